// Issue 27 item 4: a sandbox's network policy never opens link-local (the cloud metadata service at
// 169.254.169.254), loopback, private ranges beyond the host (in a cloud: the databases and stores
// behind nube) or the sandbox network itself, whatever `allowOut` says, unless the operator admitted the
// range (NUBE_SANDBOX_PRIVATE_ALLOW). The API answers 400 naming each refused entry; below the API the
// driver's filter holds the same line, so a policy that reached the kernel some other way (stored before,
// copied by a fork) opens nothing either. Both drivers. A network namespace plays "beyond the host": it
// answers HTTP at a private address and at 169.254.169.254 (routed to it for this test's bridge only),
// and a nube that admits both ranges reaches them, so the probes would see a hole.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NamespacesRuntime } from '../../src/areas/sandboxes/runtime/namespaces/runtime.js';
import { createRunning, DRIVERS, type SandboxNube, startSandboxNube, stopSandboxNube, TEMPLATE_WAIT_MS, vethNamespace } from './helpers.js';

const BRIDGE = 'nubesn0:10.141.0.1/16';
const SUBNET = '10.141.0.0/16';
const METADATA = '169.254.169.254';

const ip = (...a: string[]) => execFileSync('ip', a, { stdio: 'pipe' });
const quiet = (...a: string[]) => {
  try {
    ip(...a);
  } catch {}
};

/** A namespace beyond the host with an HTTP server at `private` and at 169.254.169.254. */
function beyond(i: number) {
  const ns = `secnb${i}`;
  const veth = `secnbh${i}`;
  const net = `10.151.${i}`;
  const table = String(11510 + i);
  const unroute = () => {
    quiet('rule', 'del', 'from', SUBNET, 'to', METADATA, 'lookup', table);
    quiet('route', 'flush', 'table', table);
  };
  unroute();
  const link = vethNamespace(ns, veth, net, 30);
  const down = () => {
    unroute();
    link.down();
  };
  ip('-n', ns, 'addr', 'add', `${METADATA}/32`, 'dev', 'lo');
  // Only traffic from this test's sandboxes goes there for the metadata address.
  ip('route', 'add', METADATA, 'via', `${net}.2`, 'table', table);
  ip('rule', 'add', 'from', SUBNET, 'to', METADATA, 'lookup', table);
  const py =
    'import http.server\nclass H(http.server.BaseHTTPRequestHandler):\n def do_GET(self):\n  b=("secret at "+self.connection.getsockname()[0]).encode(); self.send_response(200); self.end_headers(); self.wfile.write(b)\n def log_message(self,*a): pass\nhttp.server.ThreadingHTTPServer(("0.0.0.0",80),H).serve_forever()';
  const server: ChildProcess = spawn('ip', ['netns', 'exec', ns, 'python3', '-c', py], { stdio: 'ignore' });
  return {
    address: `${net}.2`,
    range: `${net}.0/30`,
    down: () => {
      server.kill();
      down();
    },
  };
}

describe.each(DRIVERS)('%s: network policy never opens protected ranges', (driver) => {
  const i = DRIVERS.indexOf(driver);
  let out: ReturnType<typeof beyond>;
  let t: SandboxNube;
  let admits: SandboxNube;
  let box: { id: string; runtimeId: string; address: string };
  let neighbour: { id: string; address: string };

  const runtimeOf = async (n: SandboxNube, id: string) => (await n.nube.services.sandboxes.core.repo.get(id))!.runtime_id;
  /** From inside: the HTTP status and curl's exit code (`200 rc=0` when reached). */
  const probe = async (n: SandboxNube, id: string, url: string) =>
    (await n.call('POST', `/sandboxes/${id}/exec`, { command: `curl -sS -m 3 -o /dev/null -w '%{http_code}' ${url} 2>/dev/null; echo " rc=$?"` })).body.stdout.trim();

  beforeAll(async () => {
    out = beyond(i);
    t = await startSandboxNube('netpol', { NUBE_SANDBOX_DRIVER: driver, NUBE_SANDBOX_BRIDGE: BRIDGE });
    admits = await startSandboxNube('netpol-admit', {
      NUBE_SANDBOX_DRIVER: driver,
      NUBE_SANDBOX_BRIDGE: BRIDGE,
      NUBE_SANDBOX_PRIVATE_ALLOW: `${out.range},${METADATA}/32`,
    });
    const a = await createRunning(t, { timeoutSeconds: 600 });
    const b = await createRunning(t, { timeoutSeconds: 600 });
    await t.call('POST', `/sandboxes/${b.id}/bg`, { command: 'exec python3 -m http.server 8000' });
    box = { id: a.id, runtimeId: await runtimeOf(t, a.id), address: (await t.call('POST', `/sandboxes/${a.id}/runtime`, {})).body.address };
    neighbour = { id: b.id, address: (await t.call('POST', `/sandboxes/${b.id}/runtime`, {})).body.address };
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (t) await stopSandboxNube(t);
    if (admits) await stopSandboxNube(admits);
    out?.down();
  }, 120_000);

  it('the API refuses allowOut entries in protected ranges, naming each (400), and keeps the old policy', async () => {
    const allowOut = [`${METADATA}/32`, '10.0.0.0/8', out.address, '1.1.1.1', 'localhost', neighbour.address, '0.0.0.0/0', '192.168.1.0/24'];
    const r = await t.call('POST', `/sandboxes/${box.id}/network-policy`, { allowOut });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.code).toBe('ProtectedRange');
    const named = r.body.issues.map((x: { path: unknown[] }) => x.path[2]);
    expect(named).toEqual([0, 1, 2, 4, 5, 6, 7]);
    for (const entry of [METADATA, '10.0.0.0/8', out.address, 'localhost', neighbour.address]) expect(r.body.error).toContain(entry);
    expect(r.body.issues[0].message).toMatch(/link-local.*metadata/);
    expect(r.body.issues[3].message).toMatch(/localhost resolves to 127\.0\.0\.1, 127\.0\.0\.0\/8, loopback/);
    expect(r.body.issues[4].message).toContain('the sandbox network 10.141.0.0/16');
    expect(r.body.error).toContain('NUBE_SANDBOX_PRIVATE_ALLOW');
    // Nothing was applied.
    const rt = t.nube.services.sandboxes.core.runtime as NamespacesRuntime;
    expect(await rt.describeNetworkPolicy(box.runtimeId)).not.toContain('10.0.0.0/8 accept');
    // A public address alone is fine.
    expect((await t.call('POST', `/sandboxes/${box.id}/network-policy`, { allowOut: ['1.1.1.1'], internet: false })).status).toBe(200);
  }, 60_000);

  it('a policy that reaches the driver anyway opens nothing protected: metadata, a private host beyond, the neighbour', async () => {
    const runtime = t.nube.services.sandboxes.core.runtime;
    for (const policy of [
      { allow: [`${METADATA}/32`, '10.0.0.0/8', out.address, neighbour.address, '169.254.0.0/16'] },
      { allow: ['0.0.0.0/0'], deny: ['0.0.0.0/0'] },
    ]) {
      await runtime.setNetworkPolicy(box.runtimeId, policy);
      for (const url of [`http://${METADATA}/latest/meta-data/`, `http://${out.address}/`, `http://${neighbour.address}:8000/`]) {
        const got = await probe(t, box.id, url);
        expect(got, `${url} with ${JSON.stringify(policy)}`).not.toMatch(/ rc=0$/);
        expect(got).not.toMatch(/^200/);
      }
    }
    await runtime.setNetworkPolicy(box.runtimeId, {});
  }, 120_000);

  it('an operator-admitted range stays closed until a policy opens it, and then only it (the probes see a hole)', async () => {
    const s = await createRunning(admits, { timeoutSeconds: 600 });
    expect(await probe(admits, s.id, `http://${out.address}/`)).not.toMatch(/ rc=0$/);
    expect(await probe(admits, s.id, `http://${METADATA}/`)).not.toMatch(/ rc=0$/);
    // Wider than what the operator admitted: refused.
    const wide = await admits.call('POST', `/sandboxes/${s.id}/network-policy`, { allowOut: ['10.151.0.0/16'] });
    expect(wide.status).toBe(400);
    const ok = await admits.call('POST', `/sandboxes/${s.id}/network-policy`, { allowOut: [out.address, METADATA] });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(await probe(admits, s.id, `http://${out.address}/`)).toBe('200 rc=0');
    expect(await probe(admits, s.id, `http://${METADATA}/`)).toBe('200 rc=0');
    // Below the API a wider allow still opens only the admitted part; the neighbour never.
    const runtime = admits.nube.services.sandboxes.core.runtime;
    await runtime.setNetworkPolicy(await runtimeOf(admits, s.id), { allow: ['10.0.0.0/8', '169.254.0.0/16', SUBNET] });
    expect(await probe(admits, s.id, `http://${out.address}/`)).toBe('200 rc=0');
    expect(await probe(admits, s.id, `http://${neighbour.address}:8000/`)).not.toMatch(/ rc=0$/);
  }, 180_000);
});
