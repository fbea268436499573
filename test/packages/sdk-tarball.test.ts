// The SDK as a user gets it: `npm pack` of packages/sdk, installed from the tarball alone into an empty
// project (no network: it has no dependencies), used from a plain .mjs script against a running nube
// and typechecked from a .ts file by tsc.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, startSandboxNube, stopSandboxNube, TEMPLATE_WAIT_MS } from '../sandboxes/helpers.js';
import { pack, REPO, run, TSC, userEnv } from './helpers.js';

let project: string;
let tarball: string;
let files: string[];
let t: SandboxNube;

beforeAll(async () => {
  [{ tarball, files }, t] = await Promise.all([
    pack(join(REPO, 'packages/sdk')),
    startSandboxNube('sdk-tarball'),
  ]);
  project = mkdtempSync(join(tmpdir(), 'nube-sdk-user-'));
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'user-app', private: true, type: 'module' }));
  await run('npm', ['install', '--offline', '--no-audit', '--no-fund', tarball], project);
}, TEMPLATE_WAIT_MS);

afterAll(async () => {
  if (t) await stopSandboxNube(t);
  if (project) rmSync(project, { recursive: true, force: true });
  if (tarball) rmSync(join(tarball, '..'), { recursive: true, force: true });
}, 120_000);

/**
 * The README's JavaScript examples as one module: their imports joined at the top, the first example
 * (which makes `nube`) as it is, each other one in a block of its own so their names do not clash.
 */
function readmeExamples(): string {
  const readme = readFileSync(join(REPO, 'packages/sdk/README.md'), 'utf8');
  const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const names = new Set<string>();
  const bodies = blocks.map((b) =>
    b.replace(/^import \{([^}]*)\} from '@nube\/sdk';\n/gm, (_, list: string) => {
      for (const n of list.split(',')) names.add(n.trim());
      return '';
    }),
  );
  return [
    `import { ${[...names].join(', ')} } from '@nube/sdk';`,
    bodies[0],
    ...bodies.slice(1).map((b) => `{\n${b}}`),
  ].join('\n');
}

describe('@nube/sdk from its tarball', () => {
  it('holds built JavaScript, declarations and source maps, and installs with no dependencies', () => {
    for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/index.js.map', 'dist/request.js', 'README.md', 'openapi.json']) {
      expect(files).toContain(f);
    }
    expect(files.filter((f) => f.startsWith('test/') || f.startsWith('scripts/'))).toEqual([]);
    const installed = JSON.parse(readFileSync(join(project, 'node_modules/@nube/sdk/package.json'), 'utf8'));
    expect(installed.dependencies ?? {}).toEqual({});
    const lock = JSON.parse(readFileSync(join(project, 'package-lock.json'), 'utf8'));
    expect(Object.keys(lock.packages)).toEqual(['', 'node_modules/@nube/sdk']);
  });

  it('works from a plain .mjs script: account, a database query, a sandbox exec, an error that says what to do', async () => {
    writeFileSync(
      join(project, 'script.mjs'),
      `import { Nube, NotFoundError, ValidationError } from '@nube/sdk';
const nube = new Nube(); // NUBE_API_KEY and NUBE_BASE_URL from the environment
const out = {};
out.plan = (await nube.account.get()).plan.name;
const db = await nube.databases.create({ name: 'from-tarball' });
out.query = await nube.databases.query(db.id, { sql: 'SELECT 6 * 7 AS answer, ? AS said', args: ['hola'] });
const sbx = await nube.sandboxes.create({ timeoutSeconds: 120 });
out.sandbox = sbx.status;
out.exec = await nube.sandboxes.exec(sbx.id, { command: 'echo "$((6 * 7)) from $(uname -s)"' });
await nube.sandboxes.delete(sbx.id);
try {
  await nube.sandboxes.get(sbx.id);
} catch (e) {
  out.gone = { notFound: e instanceof NotFoundError, status: e.status, message: e.message };
}
try {
  await nube.databases.query(db.id, { sql: '' });
} catch (e) {
  out.invalid = { validation: e instanceof ValidationError, issues: e.issues.length };
}
console.log(JSON.stringify(out));
`,
    );
    const { stdout } = await run(
      'node',
      ['script.mjs'],
      project,
      userEnv({ NUBE_API_KEY: t.ownerKey, NUBE_BASE_URL: t.baseUrl }),
    );
    const out = JSON.parse(stdout);
    expect(out.plan).toBe('tera');
    expect(out.query).toMatchObject({ columns: ['answer', 'said'], rows: [[42, 'hola']] });
    expect(out.sandbox).toBe('running');
    expect(out.exec).toMatchObject({ exitCode: 0, stdout: '42 from Linux\n', timedOut: false });
    expect(out.gone).toMatchObject({ notFound: true, status: 404 });
    expect(out.gone.message).toContain('Check the id');
    expect(out.invalid).toMatchObject({ validation: true });
    expect(out.invalid.issues).toBeGreaterThan(0);
  }, 300_000);

  it('typechecks a TypeScript user of it with full types, with Node types and without; the README examples too', async () => {
    writeFileSync(
      join(project, 'app.ts'),
      `import { Nube, NotFoundError, type OpOutput, RateLimitError } from '@nube/sdk';
const nube = new Nube({ baseUrl: 'http://127.0.0.1:7070', timeoutMs: 5000, maxRetries: 1 });
const me = await nube.account.get();
const plan: 'byte' | 'mega' | 'tera' = me.plan.name;
const r: OpOutput<'sandboxes.exec'> = await nube.sandboxes.exec('sbx_1', { command: 'ls' }, { timeoutMs: 1000 });
const code: number | null = r.exitCode;
const q = await nube.databases.query('db_1', { sql: 'select 1' });
const cols: string[] = 'columns' in q ? q.columns : [];
for await (const ev of await nube.agents.message('agt_1', { content: 'hi' })) console.log(ev.event, ev.json());
try { await nube.account.usage(); } catch (e) { if (e instanceof RateLimitError) console.log(e.retryAfter, e instanceof NotFoundError); }
// @ts-expect-error command is required
await nube.sandboxes.exec('sbx_1', {});
// @ts-expect-error not an operation
await nube.call('sandboxes.nope');
// @ts-expect-error a plan name is one of three
const wrong: 'gold' = me.plan.name;
console.log(plan, code, cols, wrong);
`,
    );
    writeFileSync(join(project, 'readme.mjs'), readmeExamples());
    const base = { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, skipLibCheck: false };
    const configs = {
      'tsconfig.dom.json': [{ ...base, lib: ['ES2022', 'DOM', 'DOM.Iterable'], types: [] }, ['app.ts']],
      'tsconfig.node.json': [
        { ...base, lib: ['ES2022'], types: ['node'], typeRoots: [join(REPO, 'node_modules/@types')], allowJs: true, checkJs: true },
        ['app.ts', 'readme.mjs'],
      ],
    } as const;
    await Promise.all(
      Object.entries(configs).map(async ([name, [compilerOptions, files]]) => {
        writeFileSync(join(project, name), JSON.stringify({ compilerOptions, files }));
        const r = await run('node', [TSC, '-p', name], project).catch((e: { stdout: string }) => e);
        expect(r.stdout, name).toBe('');
      }),
    );
  }, 300_000);
});
