// nube as an operating-system process (`nube serve`), for tests that kill it or run several on one
// machine: a free loopback port, the child started and waited for, its exit awaited. The child runs the
// build in dist/ when it was made from the sources as they are (what `npm start` runs: CI builds it in
// setup, and it starts in about half the CPU time), else the sources under tsx.
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { builtFingerprint, fingerprint } from '../../scripts/source-fingerprint.mjs';

let entry: string[] | undefined;
/** Node's arguments that run the `nube` command: dist/src/main.js when current, else src/main.ts under tsx. */
export function nubeEntry(): string[] {
  entry ??= builtFingerprint(process.cwd()) === fingerprint(process.cwd()) ? ['dist/src/main.js'] : ['--import', 'tsx', 'src/main.ts'];
  return entry;
}

/** A loopback port free right now (the caller binds it soon after; collisions are unlikely, not impossible). */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

/**
 * `nube serve` in a child process; resolves once /healthz answers on `base`. Only PATH and HOME pass
 * from this process's environment: the child's configuration is `env`, nothing else. Its stderr is
 * kept (the last 64 kB) for the error when it exits or never answers.
 */
export async function spawnNube(
  env: Record<string, string>,
  base: string,
  opts: { startMs?: number; root?: string } = {},
): Promise<ChildProcess> {
  // Another checkout (an earlier release, built): its own dist/.
  const entry = opts.root ? [`${opts.root}/dist/src/main.js`] : nubeEntry();
  const child = spawn(process.execPath, [...entry, 'serve'], {
    cwd: opts.root ?? process.cwd(),
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-65_536);
  });
  const end = Date.now() + (opts.startMs ?? 120_000);
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nube exited with ${child.exitCode}: ${stderr}`);
    try {
      if ((await fetch(`${base}/healthz`)).ok) return child;
    } catch {
      // not listening yet
    }
    if (Date.now() > end) {
      child.kill('SIGKILL');
      throw new Error(`nube did not start: ${stderr}`);
    }
    await sleep(100);
  }
}

/** Resolves once the child has exited (at once if it already has). */
export const exited = (c: ChildProcess): Promise<unknown> =>
  c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise((r) => c.once('exit', r));
