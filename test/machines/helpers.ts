// A nube with real sandboxes (the sandbox tests' templates, bridge and cgroup parent) on either store,
// and helpers to drive machines through the API and reach their apps through nube's port proxy.
import { mkdirSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { SANDBOX_ENV, TEMPLATE_WAIT_MS, TEST_ROOT } from '../sandboxes/helpers.js';
import { callJson, type TestNube, startNube } from '../helpers/server.js';
import pg from 'pg';
import { type DialectName, PG_ADMIN_URL } from '../helpers/pg.js';

export { TEMPLATE_WAIT_MS };
export const OPERATOR_KEY = 'operator-key-for-tests-0123456789';

export interface MachineNube extends TestNube {
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  call(method: string, path: string, body?: unknown, key?: string): Promise<{ status: number; body: any }>;
  /** Every API answer body seen, as text (the secret-leak test searches them). */
  answers: string[];
}

export async function startMachineNube(
  name: string,
  dialect: DialectName,
  env: Record<string, string> = {},
  dataDir?: string,
): Promise<MachineNube> {
  const dir = dataDir ?? `${TEST_ROOT}/machines-${name}-${dialect}-${process.pid}`;
  mkdirSync(dir, { recursive: true });
  const t = await startNube({
    dialect,
    dataDir: dir,
    env: { ...SANDBOX_ENV, NUBE_CHECKOUT_OPERATOR_KEY: OPERATOR_KEY, NUBE_OUTBOUND_ALLOW: '127.0.0.1/32', ...env },
  });
  return wrap(t, name);
}

/**
 * Stops nube (its boxes and their supervisors keep running) and starts a new one on the same data
 * directory and store, as a restart of the host's service would. close() then also drops the store.
 */
export async function restartMachineNube(t: MachineNube, env: Record<string, string> = {}): Promise<MachineNube> {
  const url = t.nube.deps.config.databaseUrl;
  await t.nube.close();
  const t2 = await startNube({
    dataDir: t.dataDir,
    env: {
      ...SANDBOX_ENV,
      NUBE_CHECKOUT_OPERATOR_KEY: OPERATOR_KEY,
      NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
      NUBE_OWNER_KEY: t.ownerKey,
      ...(url ? { DATABASE_URL: url } : {}),
      ...env,
    },
  });
  const w = await wrap(t2, 'restarted');
  return {
    ...w,
    async close() {
      await t2.close();
      if (url) {
        const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
        await admin.connect();
        await admin.query(`DROP DATABASE IF EXISTS ${new URL(url).pathname.slice(1)} WITH (FORCE)`);
        await admin.end();
      }
    },
  };
}

async function wrap(t: TestNube, name: string): Promise<MachineNube> {
  await t.nube.services.sandboxes.core.runtime.ensureTemplate('base', (line) => console.log(`[machines ${name}] template base: ${line}`));
  const answers: string[] = [];
  const call = async (method: string, path: string, body?: unknown, key?: string) => {
    const r = await callJson(t.baseUrl, method, path, body, { authorization: `Bearer ${key ?? t.ownerKey}` });
    answers.push(typeof r.body === 'string' ? r.body : JSON.stringify(r.body));
    return { status: r.status, body: r.body };
  };
  return { ...t, call, answers };
}

export async function stopMachineNube(t: MachineNube): Promise<void> {
  const runtime = t.nube.services.sandboxes.core.runtime;
  for (const s of await runtime.list().catch(() => [])) await runtime.destroy(s.id).catch(() => {});
  await t.close();
  rmSync(t.dataDir, { recursive: true, force: true });
}

/** POST /machines and wait until it runs (its box started). */
// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
export async function createRunning(t: MachineNube, body: Record<string, unknown>, key?: string): Promise<any> {
  const c = await t.call('POST', '/machines', body, key);
  if (c.status !== 200 || !c.body.id) throw new Error(`create answered ${c.status}: ${JSON.stringify(c.body)}`);
  return waitRunning(t, c.body.id, key);
}

// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
export async function waitRunning(t: MachineNube, id: string, key?: string): Promise<any> {
  const end = Date.now() + 120_000;
  for (;;) {
    const g = await t.call('GET', `/machines/${id}`, undefined, key);
    if (g.body.status === 'running') return g.body;
    if (g.body.status === 'failed' || Date.now() > end) throw new Error(`machine ${id}: ${JSON.stringify(g.body)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Writes files into a machine's box through the sandbox files API. */
export async function writeApp(t: MachineNube, sandboxId: string, files: Record<string, string>, key?: string): Promise<void> {
  for (const [path, content] of Object.entries(files)) {
    const w = await t.call('POST', `/sandboxes/${sandboxId}/files/write`, { path, content }, key);
    if (w.status !== 200) throw new Error(`write ${path}: ${w.status} ${JSON.stringify(w.body)}`);
  }
}

/** GET through nube's port proxy with the machine URL's Host (no DNS for *.localhost needed). */
export function getUrl(t: TestNube, url: string, path = '/'): Promise<{ status: number; body: string }> {
  const port = Number(new URL(t.baseUrl).port);
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host: new URL(url).host } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => {
        body += c.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Polls the app's URL until it answers 200 with a body passing `ok` (or the deadline). */
export async function waitServing(t: TestNube, url: string, ok: (body: string) => boolean = () => true, ms = 30_000) {
  const end = Date.now() + ms;
  let last: { status: number; body: string } = { status: 0, body: '' };
  while (Date.now() < end) {
    last = await getUrl(t, url).catch(() => ({ status: 0, body: '' }));
    if (last.status === 200 && ok(last.body)) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not serve: last ${last.status} ${last.body.slice(0, 200)}`);
}

/** A Node app with no dependencies: answers its version, and whether SECRET_TOKEN is set (never its value). */
export function nodeApp(version: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    '/app/server.js': `const http = require('http');
console.log('app ${version} booting');
http.createServer((req, res) => {
  console.log('request ' + req.url);
  res.end(JSON.stringify({ version: '${version}', secretLength: (process.env.SECRET_TOKEN || '').length }));
}).listen(Number(process.env.PORT || 8080), '0.0.0.0');
`,
    '/app/package.json': JSON.stringify({ name: 'app', version: '1.0.0', main: 'server.js' }),
    ...extra,
  };
}
