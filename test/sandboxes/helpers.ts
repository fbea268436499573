// A nube whose sandboxes use the driver tests' prebuilt templates, test bridge and cgroup parent, with
// its data dir under /var/lib (overlayfs upper dirs), and helpers to call the API.
import { mkdirSync, rmSync } from 'node:fs';
import { callJson, type TestNube, startNube } from '../helpers/server.js';

export { DRIVERS } from '../../src/areas/sandboxes/runtime/namespaces/test-env.js';

export const TEST_ROOT = process.env.NUBE_TEST_DATA ?? '/var/lib/nube-test';

export const SANDBOX_ENV = {
  NUBE_TEMPLATES_DIR: `${TEST_ROOT}/templates`,
  NUBE_SANDBOX_BRIDGE: 'nubet0:10.78.0.1/16',
  NUBE_SANDBOX_CGROUP: 'nube-test',
};

export interface SandboxNube extends TestNube {
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<{ status: number; body: any }>;
}

export async function startSandboxNube(name: string, env: Record<string, string> = {}, dataDir?: string): Promise<SandboxNube> {
  const dir = dataDir ?? `${TEST_ROOT}/api-${name}-${env.NUBE_SANDBOX_DRIVER ?? 'namespaces'}-${process.pid}`;
  mkdirSync(dir, { recursive: true });
  const t = await startNube({ dataDir: dir, env: { ...SANDBOX_ENV, ...env } });
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
  for (const s of await runtime.list()) await runtime.destroy(s.id).catch(() => {});
  await t.close();
  if (!opts.keepDir) rmSync(t.dataDir, { recursive: true, force: true });
}
