// `npm start` / `npm run nube` (scripts/run-built.mjs) on a miniature checkout: the real scripts and
// TypeScript, a one-line src/main.ts. An edit is built before it runs, an unchanged tree is not built
// again, and a build that fails stops the start instead of running what dist/ still holds.
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO, run } from './helpers.js';

let root: string;
const write = (rel: string, text: string) => {
  mkdirSync(join(root, rel, '..'), { recursive: true });
  writeFileSync(join(root, rel), text);
};
const start = () =>
  run('node', [join(root, 'scripts/run-built.mjs'), 'serve'], root).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (e: { code: number; stdout: string; stderr: string }) => e,
  );

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'nube-run-built-'));
  for (const f of ['build.mjs', 'build-console.mjs', 'run-built.mjs', 'source-fingerprint.mjs']) {
    cpSync(join(REPO, 'scripts', f), join(root, 'scripts', f));
  }
  symlinkSync(join(REPO, 'node_modules'), join(root, 'node_modules'));
  const options = { target: 'ES2022', module: 'NodeNext', strict: true, types: [], outDir: 'dist', rootDir: '.' };
  write('package.json', JSON.stringify({ name: 'mini-nube', private: true, type: 'module' }));
  write('tsconfig.json', JSON.stringify({ compilerOptions: options }));
  write('tsconfig.build.json', JSON.stringify({ extends: './tsconfig.json', include: ['src'] }));
  write(
    'packages/sdk/tsconfig.build.json',
    JSON.stringify({ compilerOptions: { ...options, rootDir: 'src', declaration: true }, include: ['src'] }),
  );
  write('packages/sdk/src/index.ts', 'export const sdk = 1;\n');
  // Its own declaration of process: without @types/node each tsc run takes a second, not ten.
  write('src/process.d.ts', 'declare const process: { argv: string[] };\n');
  write('src/main.ts', "const said: string = 'version one';\nconsole.log(said, process.argv[2]);\n");
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('run-built (npm start)', () => {
  it('builds when there is no build, runs it with the arguments, and does not build an unchanged tree again', async () => {
    const first = await start();
    expect(first.stderr).toContain('no build in dist/ yet: building it');
    expect(first.stdout).toBe('version one serve\n');
    const again = await start();
    expect(again.stderr).toBe('');
    expect(again.stdout).toBe('version one serve\n');
  }, 300_000);

  it('an edited source is rebuilt before the start: the new code runs', async () => {
    write('src/main.ts', "const said: string = 'version two';\nconsole.log(said, process.argv[2]);\n");
    const r = await start();
    expect(r.stderr).toContain('dist/ was built from older sources than src/: rebuilding');
    expect(r.stdout).toBe('version two serve\n');
  }, 300_000);

  it('a build that fails stops the start: the previous build is not run', async () => {
    write('src/main.ts', "const said: number = 'version three';\nconsole.log(said);\n");
    const r = await start();
    expect(r.code).toBe(1);
    expect(r.stdout).not.toMatch(/version (two|three) serve/);
    expect(r.stderr).toContain('not starting the old build');
    // The previous build is still whole (built aside, swapped in only on success).
    const { stdout } = await run('node', [join(root, 'dist/src/main.js'), 'x'], root);
    expect(stdout).toBe('version two x\n');
  }, 300_000);
});
