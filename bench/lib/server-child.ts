// A server of bench/lib/api-server.ts in its own process (own event loop), driven over IPC: its CPU
// time, a CPU profile of a span, a stop. Used by the benches that measure nube from outside.
import { type ChildProcess, fork } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

export interface Server {
  mode: string;
  address: string;
  child: ChildProcess;
  cpuMicros(): Promise<number>;
  /** Sends `msg` and waits for the reply carrying `key`. */
  call(msg: string, key: string): Promise<unknown>;
  stop(): Promise<void>;
}

/** Forks bench/lib/api-server.ts in its own process (own event loop, own core) and waits for it. */
export function startServer(
  mode: 'nube' | 'bare',
  env: Record<string, string>,
  opts: { stdoutFile?: string; nodeArgs?: string[] } = {},
): Promise<Server> {
  const out = opts.stdoutFile ? openSync(opts.stdoutFile, 'w') : 'ignore';
  const base = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('NUBE_') && k !== 'DATABASE_URL' && k !== 'REDIS_URL'),
  );
  const child = fork(join(here, 'api-server.ts'), [mode], {
    execArgv: ['--import', 'tsx', ...(opts.nodeArgs ?? [])],
    env: { ...base, ...env },
    stdio: ['ignore', out, 'inherit', 'ipc'],
  });
  if (typeof out === 'number') closeSync(out);
  const request = <T>(msg: string, pick: (m: Record<string, unknown>) => T | undefined): Promise<T> =>
    new Promise((resolve, reject) => {
      const onMsg = (m: unknown) => {
        const v = m && typeof m === 'object' ? pick(m as Record<string, unknown>) : undefined;
        if (v !== undefined) {
          child.off('message', onMsg);
          resolve(v);
        }
      };
      child.on('message', onMsg);
      child.send(msg, (err) => err && reject(err));
    });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill();
      reject(new Error(`${mode} server did not start within 60 s`));
    }, 60_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${mode} server exited with ${code} before it was ready`));
    });
    child.on('message', (m: unknown) => {
      const msg = m as { ready?: boolean; address?: string };
      if (!msg.ready || !msg.address) return;
      clearTimeout(timer);
      child.removeAllListeners('exit');
      resolve({
        mode,
        address: msg.address,
        child,
        cpuMicros: () =>
          request('cpu', (m) => {
            const c = m.cpu as { user: number; system: number } | undefined;
            return c ? c.user + c.system : undefined;
          }),
        call: (msg, key) => request(msg, (m) => m[key]),
        stop: () =>
          new Promise<void>((res) => {
            if (child.exitCode !== null) return res();
            const kill = setTimeout(() => child.kill('SIGKILL'), 10_000);
            child.once('exit', () => {
              clearTimeout(kill);
              res();
            });
            child.send('stop');
          }),
      });
    });
  });
}
