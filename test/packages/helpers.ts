// Packing and installing this repository's packages the way a user would, in throwaway directories.
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

export const REPO = resolve(import.meta.dirname, '../..');
export const TSC = join(REPO, 'node_modules/typescript/bin/tsc');

const exec = promisify(execFile);

/**
 * The environment of a user's shell: none of the npm_* variables that `npm test` / `npx vitest` put into
 * this process (a user's npm would not see this repository's workspace or its config).
 */
export function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  return { ...env, ...extra };
}

export async function run(cmd: string, args: string[], cwd: string, env = userEnv()) {
  return exec(cmd, args, { cwd, env, maxBuffer: 64 * 1024 * 1024 });
}

/** `npm pack` in `dir` (its prepack builds it, unless `extra` says --ignore-scripts); the tarball and its files. */
export async function pack(dir: string, extra: string[] = []): Promise<{ tarball: string; files: string[] }> {
  const out = mkdtempSync(join(tmpdir(), 'nube-pack-'));
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', out, ...extra], dir);
  // prepack's output comes first on stdout; the JSON report is the last thing printed.
  const report = JSON.parse(stdout.slice(stdout.lastIndexOf('\n[') + 1)) as {
    filename: string;
    files: { path: string }[];
  }[];
  return { tarball: join(out, report[0]!.filename), files: report[0]!.files.map((f) => f.path) };
}
