// A nube whose sandboxes use the driver tests' prebuilt templates, test bridge and cgroup parent, with
// its data dir under /var/lib (overlayfs upper dirs), and helpers to call the API.
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import type { NamespacesRuntime } from '../../src/areas/sandboxes/runtime/namespaces/runtime.js';
import { callJson, type JsonCaller, type TestNube, startNube } from '../helpers/server.js';
import type { DialectName } from '../helpers/pg.js';

export { DRIVERS } from '../../src/areas/sandboxes/runtime/namespaces/test-env.js';

export const TEST_ROOT = process.env.NUBE_TEST_DATA ?? '/var/lib/nube-test';

export const SANDBOX_ENV = {
  NUBE_TEMPLATES_DIR: `${TEST_ROOT}/templates`,
  NUBE_SANDBOX_BRIDGE: 'nubet0:10.78.0.1/16',
  NUBE_SANDBOX_CGROUP: 'nube-test',
  // Test files run at once: the SSH gateway takes any free port rather than all fighting over 2222.
  NUBE_SSH_PORT: '0',
  // Likewise the box API listener (a minted NUBE_API_KEY's NUBE_BASE_URL) rather than all on 7072.
  NUBE_BOX_API_PORT: '0',
  // No warm pool unless a test asks for one (test/sandboxes/pool*.test.ts): sandboxes started in the
  // background would load the machine and show up in what other tests count.
  NUBE_SANDBOX_POOL: '0',
  // Plain copies, no store image: suites that take this env (agents, machines, llm, nodes) remove their
  // data dirs without unmounting one. startSandboxNube (whose stop unmounts it) turns the store on.
  NUBE_SANDBOX_STORE: 'copy',
};

export interface SandboxNube extends TestNube {
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<{ status: number; body: any }>;
}

/**
 * How long a test file waits for its templates. On a fresh host the first file to need `base` builds
 * it (91 s on an idle 2-core host, 399 s while other suites load it) and every other file waits for
 * that build (a lock on disk): the wait must outlast a build under load, with room to spare.
 */
export const TEMPLATE_WAIT_MS = 25 * 60_000;

/**
 * A nube for sandbox tests. Returns once the templates the file uses are built: a build another test
 * file started is waited for (shared lock), so no test sees `starting` because of it.
 */
export async function startSandboxNube(
  name: string,
  env: Record<string, string> = {},
  dataDir?: string,
  opts: { templates?: string[]; dialect?: DialectName } = {},
): Promise<SandboxNube> {
  const dir = dataDir ?? `${TEST_ROOT}/api-${name}-${env.NUBE_SANDBOX_DRIVER ?? 'namespaces'}-${process.pid}`;
  mkdirSync(dir, { recursive: true });
  const t = await startNube({
    dataDir: dir,
    dialect: opts.dialect,
    env: { ...SANDBOX_ENV, NUBE_SANDBOX_STORE: 'auto', ...env },
  });
  const runtime = t.nube.services.sandboxes.core.runtime;
  for (const tpl of opts.templates ?? ['base']) {
    await runtime.ensureTemplate(tpl, (line) => console.log(`[${name}] template ${tpl}: ${line}`));
  }
  const call = async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const { status, body: parsed } = await callJson(t.baseUrl, method, path, body, { ...t.auth, ...headers });
    return { status, body: parsed };
  };
  return { ...t, call };
}

/** Destroy every sandbox through the API, stop the server, remove its data dir. */
export async function stopSandboxNube(t: SandboxNube, opts: { keepDir?: boolean } = {}): Promise<void> {
  const list = await t.call('GET', '/sandboxes');
  for (const s of list.body?.sandboxes ?? []) await t.call('DELETE', `/sandboxes/${s.id}`);
  const tpls = await t.call('GET', '/template-snapshots');
  for (const x of tpls.body?.items ?? []) await t.call('DELETE', `/template-snapshots/${x.id}`);
  // Whatever the API could not reach (a failed test) goes too: no mounts, netns or cgroups left behind.
  const runtime = t.nube.services.sandboxes.core.runtime;
  // (A host that cannot run sandboxes has none to list.)
  for (const s of await runtime.list().catch(() => [])) await runtime.destroy(s.id).catch(() => {});
  await t.close();
  if (!opts.keepDir) {
    await (runtime as NamespacesRuntime).detachStore?.();
    rmSync(t.dataDir, { recursive: true, force: true });
    rmSync((runtime as NamespacesRuntime).runDir, { recursive: true, force: true });
  }
}

/**
 * POST /sandboxes and wait while it is `starting` (its template may still be building: the phase and
 * progress are printed as they change). Throws unless it ends `running`.
 */
// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
export async function createRunning(t: JsonCaller, body: Record<string, unknown> = {}): Promise<any> {
  const c = await t.call('POST', '/sandboxes', body);
  if (c.status !== 200) throw new Error(`create answered ${c.status}: ${JSON.stringify(c.body)}`);
  let s = c.body;
  let said = '';
  for (const end = Date.now() + TEMPLATE_WAIT_MS - 60_000; s.status === 'starting' && Date.now() < end; ) {
    const now = `${s.phase} ${s.progress ? `${s.progress.percent}% ${s.progress.step}` : ''}`;
    if (now !== said) console.log(`sandbox ${s.id}: ${now}`);
    said = now;
    await new Promise((r) => setTimeout(r, 1000));
    s = (await t.call('GET', `/sandboxes/${s.id}`)).body;
  }
  if (s.status !== 'running') throw new Error(`sandbox ${s.id} is ${s.status}: ${JSON.stringify(s)}`);
  return s;
}

/** Polls `fn` until `ok` holds or `ms` pass; returns the last value (the caller asserts on it). */
export async function until<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms: number): Promise<T> {
  const end = Date.now() + ms;
  let v = await fn();
  while (!ok(v) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 100));
    v = await fn();
  }
  return v;
}

/**
 * A network namespace joined to the host by a veth pair (`veth` on the host, `eth0` inside) on the
 * `/prefix` network of `net` (`10.104.128`: host .1, namespace .2, its default route via the host):
 * another machine as far as routing goes. `down` removes both (also whatever an earlier run left).
 */
export function vethNamespace(ns: string, veth: string, net: string, prefix: number): { down(): void } {
  const ip = (...a: string[]) => execFileSync('ip', a, { stdio: 'pipe' });
  const down = () => {
    for (const a of [['netns', 'del', ns], ['link', 'del', veth]]) {
      try {
        ip(...a);
      } catch {}
    }
  };
  down();
  ip('netns', 'add', ns);
  ip('link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
  ip('addr', 'add', `${net}.1/${prefix}`, 'dev', veth);
  ip('link', 'set', veth, 'up');
  ip('-n', ns, 'addr', 'add', `${net}.2/${prefix}`, 'dev', 'eth0');
  ip('-n', ns, 'link', 'set', 'eth0', 'up');
  ip('-n', ns, 'link', 'set', 'lo', 'up');
  ip('-n', ns, 'route', 'add', 'default', 'via', `${net}.1`);
  return { down };
}
