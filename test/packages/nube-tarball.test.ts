// nube itself as a package: the tarball `npm pack` makes of the repository holds the built server and
// what it reads beside itself, and its `nube` command (bin: scripts/run-built.mjs, which in a checkout
// rebuilds a stale dist/ first and in a package runs dist/ as it is) serves the API from it,
// with the parts that start other processes or read files next to the code (database executors, the
// HTML parser, the sandbox helper compiled from C, the agent program bundled by esbuild) working from
// the package's own dist/. Its dependencies come from this repository's node_modules, which stands in
// for what `npm install -g` fetches from the registry.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Layout } from '../../src/areas/sandboxes/runtime/namespaces/state.js';
import { callJson } from '../helpers/server.js';
import { SANDBOX_ENV, TEST_ROOT, TEMPLATE_WAIT_MS } from '../sandboxes/helpers.js';
import { pack, REPO, run, userEnv } from './helpers.js';
import { builtFingerprint, fingerprint } from '../../scripts/source-fingerprint.mjs';

let dir: string;
let pkg: string;
let files: string[];
let dataDir: string;
let site: Server;
let server: ChildProcess | undefined;

/** The installed `nube` command: the package's bin run by node, as npm's shim does. */
const bin = () => join(pkg, JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')).bin.nube);
const nube = (args: string[], env: Record<string, string> = {}) =>
  run('node', [bin(), ...args], dir, userEnv({ NUBE_DATA_DIR: dataDir, ...env }));

beforeAll(async () => {
  // The prepack script would build again even when dist/ is current: build only when it is not.
  if (builtFingerprint(REPO) !== fingerprint(REPO)) await run('node', [join(REPO, 'scripts/build.mjs')], REPO);
  const packed = await pack(REPO, ['--ignore-scripts']);
  files = packed.files;
  dir = join(packed.tarball, '..');
  await run('tar', ['-xzf', packed.tarball], dir);
  pkg = join(dir, 'package');
  symlinkSync(join(REPO, 'node_modules'), join(pkg, 'node_modules'));
  dataDir = `${TEST_ROOT}/pkg-nube-${process.pid}`;
  mkdirSync(dataDir, { recursive: true });
  site = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<html><head><title>Packed</title></head><body><main><h1>From the tarball</h1><p>It parsed this page in a child process of the built nube.</p></main></body></html>');
  });
  await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
}, 600_000);

afterAll(async () => {
  if (server && server.exitCode === null) server.kill('SIGKILL');
  await new Promise<void>((r) => (site ? site.close(() => r()) : r()));
  if (dataDir) {
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(new Layout(dataDir).runDir, { recursive: true, force: true });
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 120_000);

describe('the nube package', () => {
  it('holds the compiled server, its C sources, build stamp and set-up scripts, and no TypeScript or tests', () => {
    for (const f of [
      'dist/src/main.js',
      'dist/build-info.json',
      'dist/src/areas/sandboxes/runtime/namespaces/helper/nube-helper.c',
      'dist/src/areas/sandboxes/runtime/namespaces/helper/launch.c',
      'dist/src/areas/sandboxes/runtime/gvisor/nube-run.c',
      'dist/src/areas/agents/program/main.js',
      'dist/src/areas/databases/engine/executor-main.js',
      'dist/src/areas/web/parser-main.js',
      'scripts/install-host-deps.sh',
      'console/dist/index.html',
      'README.md',
    ]) {
      expect(files).toContain(f);
    }
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
    expect(files.filter((f) => /\.test\.js$|^test\/|^packages\//.test(f))).toEqual([]);
    const manifest = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8'));
    expect(manifest.bin).toEqual({ nube: 'scripts/run-built.mjs' });
    expect(readFileSync(bin(), 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
  });

  it('its nube command has serve, migrate, accounts, keys, templates and doctor', async () => {
    const { stdout, stderr } = await nube(['--help']);
    expect(stderr).toBe(''); // no sources beside the package's dist/: nothing to check or build
    for (const cmd of ['serve', 'migrate', 'accounts', 'keys', 'templates', 'doctor']) {
      expect(stdout).toMatch(new RegExp(`^  ${cmd}\\b`, 'm'));
    }
    const report = await nube(['doctor', '--json']).catch((e: { stdout: string }) => e);
    expect(Array.isArray(JSON.parse(report.stdout))).toBe(true);
    await expect(nube(['templates', 'build', 'no-such-template'])).rejects.toMatchObject({
      stderr: expect.stringContaining('unknown template no-such-template'),
    });
  }, 300_000);

  it('serves the API from dist/: an account made by the CLI, a database query, a web fetch, a sandbox exec; stops on SIGTERM', async () => {
    const created = JSON.parse((await nube(['accounts', 'create', '--plan', 'mega', '--name', 'packed'])).stdout);
    const auth = { authorization: `Bearer ${created.apiKey}` };
    server = spawn('node', [bin(), 'serve'], {
      cwd: dir,
      env: userEnv({
        ...SANDBOX_ENV,
        NUBE_DATA_DIR: dataDir,
        NUBE_PORT: '0',
        NUBE_LOG_LEVEL: 'info',
        NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
      }),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const baseUrl = await new Promise<string>((resolve, reject) => {
      let out = '';
      server!.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /listening on (http:\/\/[\d.:]+)/.exec(out);
        if (m) resolve(m[1]!);
      });
      server!.on('exit', (code) => reject(new Error(`nube exited ${code} before listening:\n${out}`)));
    });
    const call = (method: string, path: string, body?: unknown) => callJson(baseUrl, method, path, body, auth);

    expect((await call('GET', '/account')).body.plan.name).toBe('mega');
    // The web console, built into the package and found beside its dist/.
    const consolePage = await fetch(`${baseUrl}/console`);
    expect(consolePage.status).toBe(200);
    expect(await consolePage.text()).toContain('/console/assets/');
    const db = await call('POST', '/databases', { name: 'packed' });
    expect(db.status).toBe(201);
    const q = await call('POST', `/databases/${db.body.id}/query`, { sql: 'SELECT 6 * 7 AS answer' });
    expect(q.body).toMatchObject({ columns: ['answer'], rows: [[42]] });
    const page = await call('POST', '/web/fetch', { url: `http://127.0.0.1:${(site.address() as AddressInfo).port}/` });
    expect(page.status).toBe(200);
    expect(JSON.stringify(page.body)).toContain('From the tarball');
    const sbx = await call('POST', '/sandboxes', { timeoutSeconds: 120 });
    expect(sbx.body.status).toBe('running');
    const ex = await call('POST', `/sandboxes/${sbx.body.id}/exec`, { command: 'echo packed' });
    expect(ex.body).toMatchObject({ exitCode: 0, stdout: 'packed\n' });
    expect((await call('DELETE', `/sandboxes/${sbx.body.id}`)).status).toBe(200);

    const exited = new Promise<number | null>((r) => server!.on('exit', (code) => r(code)));
    server.kill('SIGTERM');
    expect(await exited).toBe(0);
  }, TEMPLATE_WAIT_MS);

  it('bundles the in-sandbox agent program from the package (esbuild on dist/, dependencies resolved)', async () => {
    const bundle = join(pkg, 'dist/src/areas/agents/bundle.js');
    expect(existsSync(bundle)).toBe(true);
    const { stdout } = await run(
      'node',
      ['--input-type=module', '-e', `const { agentProgram } = await import(${JSON.stringify(bundle)}); const b = await agentProgram(); console.log(b.length, b.includes('session/prompt'));`],
      dir,
    );
    const [bytes, acp] = stdout.trim().split(' ');
    expect(Number(bytes)).toBeGreaterThan(100_000);
    expect(acp).toBe('true');
  }, 300_000);
});
