// expose-raw / unexpose-raw: TCP and UDP echo servers inside sandboxes reached from the host through
// the public ports nube allocates; each port reaches only its own sandbox; idempotent; per-plan limit;
// restored after a restart of nube; freed when the sandbox ends. Both drivers, both metadata stores.
import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTempDatabase } from '../helpers/pg.js';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube, until } from './helpers.js';

// Each answers with its sandbox's hostname first, so a test sees which sandbox it reached.
const TCP_ECHO = `
import socket, threading
name = socket.gethostname().encode()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 7000)); s.listen(16)
def serve(c):
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(name + b':' + d)
    c.close()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
`;
const UDP_ECHO = `
import socket
name = socket.gethostname().encode()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 7001))
while True:
    d, a = s.recvfrom(65536); s.sendto(name + b':' + d, a)
`;

/** One TCP round trip through a host port: what came back, or the error code. */
function tcpAsk(port: number, text: string, ms = 10_000): Promise<string> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    let got = '';
    const done = (v: string) => {
      clearTimeout(timer);
      s.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(got || 'TIMEOUT'), ms);
    s.on('connect', () => s.write(text));
    s.on('data', (d) => {
      got += d.toString();
      if (got.endsWith(text)) done(got);
    });
    s.on('error', (e: NodeJS.ErrnoException) => done(e.code ?? 'ERROR'));
    s.on('close', () => done(got || 'CLOSED'));
  });
}

function udpAsk(port: number, text: string, ms = 3000): Promise<string> {
  return new Promise((resolve) => {
    const s = createSocket('udp4');
    const timer = setTimeout(() => {
      s.close();
      resolve('TIMEOUT');
    }, ms);
    s.on('message', (m) => {
      clearTimeout(timer);
      s.close();
      resolve(m.toString());
    });
    s.send(text, port, '127.0.0.1');
  });
}

const ready = (v: string) => v.includes(':');

const CASES = DRIVERS.map((driver, i) => ({ driver, dialect: i % 2 === 0 ? 'sqlite' : 'postgres', ports: 41100 + i * 50 }));

describe.each(CASES)('$driver on $dialect: raw TCP/UDP ports', ({ driver, dialect, ports }) => {
  let t: SandboxNube;
  let a: { id: string; host: string };
  let b: { id: string; host: string };
  let dropDb: (() => Promise<void>) | undefined;
  let env: Record<string, string>;

  const start = async (id: string) => {
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/tcp.py', content: TCP_ECHO });
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/udp.py', content: UDP_ECHO });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 /root/tcp.py' });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 /root/udp.py' });
  };

  beforeAll(async () => {
    env = { NUBE_SANDBOX_DRIVER: driver, NUBE_RAW_PORTS: `${ports}-${ports + 9}` };
    if (dialect === 'postgres') {
      const db = await createTempDatabase('raw');
      env.DATABASE_URL = db.url;
      dropDb = db.drop;
    }
    t = await startSandboxNube('raw-ports', env);
    for (const which of ['a', 'b']) {
      const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 600 });
      expect(c.status).toBe(200);
      await start(c.body.id);
      const host = (await t.call('POST', `/sandboxes/${c.body.id}/exec`, { command: 'hostname' })).body.stdout.trim();
      if (which === 'a') a = { id: c.body.id, host };
      else b = { id: c.body.id, host };
    }
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (t) await stopSandboxNube(t);
    await dropDb?.();
  }, 120_000);

  it('expose-raw tcp answers a host port that reaches the echo server inside; idempotent', async () => {
    const e = await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7000 });
    expect(e.status).toBe(200);
    expect(e.body).toEqual({ host: '127.0.0.1', publicPort: ports, protocol: 'tcp', port: 7000 });
    const r = await until(() => tcpAsk(ports, 'hello'), ready, 30_000);
    expect(r).toBe(`${a.host}:hello`);
    const again = await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7000, protocol: 'tcp' });
    expect(again.body.publicPort).toBe(ports);
  }, 120_000);

  it('expose-raw udp relays datagrams both ways', async () => {
    const e = await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7001, protocol: 'udp' });
    expect(e.status).toBe(200);
    expect(e.body).toMatchObject({ protocol: 'udp', port: 7001 });
    const r = await until(() => udpAsk(e.body.publicPort, 'ping'), ready, 30_000);
    expect(r).toBe(`${a.host}:ping`);
  }, 120_000);

  it("a raw port reaches only its own sandbox; another owner's sandbox is a 404", async () => {
    const e = await t.call('POST', `/sandboxes/${b.id}/expose-raw`, { port: 7000 });
    expect(e.body.publicPort).not.toBe(ports);
    expect(await until(() => tcpAsk(e.body.publicPort, 'who'), ready, 30_000)).toBe(`${b.host}:who`);
    expect(await tcpAsk(ports, 'who')).toBe(`${a.host}:who`);
    const other = await t.nube.services.account.createAccount({ name: `o-${driver}`, plan: 'tera' });
    const h = { authorization: `Bearer ${other.secret}` };
    expect((await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7000 }, h)).status).toBe(404);
    expect((await t.call('POST', `/sandboxes/${a.id}/unexpose-raw`, { port: 7000 }, h)).status).toBe(404);
    // Still served for its owner.
    expect(await tcpAsk(ports, 'still')).toBe(`${a.host}:still`);
  }, 120_000);

  it('bad bodies are 400 with issues', async () => {
    for (const body of [{}, { port: 0 }, { port: 70000 }, { port: 7000, protocol: 'sctp' }, { port: '7000' }]) {
      const r = await t.call('POST', `/sandboxes/${a.id}/expose-raw`, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.issues?.length, JSON.stringify(body)).toBeGreaterThan(0);
    }
  });

  it('unexpose-raw closes the host port; exposing again works', async () => {
    const u = await t.call('POST', `/sandboxes/${b.id}/unexpose-raw`, { port: 7000 });
    expect(u.status).toBe(200);
    expect(u.body.ok).toBe(true);
    expect(await tcpAsk(u.body.freed, 'x')).toBe('ECONNREFUSED');
    // Unexposing what is not exposed is fine (idempotent).
    expect((await t.call('POST', `/sandboxes/${b.id}/unexpose-raw`, { port: 7000 })).body.freed).toBeNull();
    const e = await t.call('POST', `/sandboxes/${b.id}/expose-raw`, { port: 7000 });
    expect(await until(() => tcpAsk(e.body.publicPort, 'back'), ready, 30_000)).toBe(`${b.host}:back`);
  }, 120_000);

  it('a per-plan limit on the count of raw ports (402 RawPortLimit)', async () => {
    const byte = await t.nube.services.account.createAccount({ name: `byte-${driver}`, plan: 'byte' });
    const h = { authorization: `Bearer ${byte.secret}` };
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 600 }, h);
    expect(c.status).toBe(200);
    expect((await t.call('POST', `/sandboxes/${c.body.id}/expose-raw`, { port: 1 }, h)).status).toBe(200);
    expect((await t.call('POST', `/sandboxes/${c.body.id}/expose-raw`, { port: 2 }, h)).status).toBe(200);
    // The same exposure again is not a new one.
    expect((await t.call('POST', `/sandboxes/${c.body.id}/expose-raw`, { port: 2 }, h)).status).toBe(200);
    const over = await t.call('POST', `/sandboxes/${c.body.id}/expose-raw`, { port: 3 }, h);
    expect(over.status).toBe(402);
    expect(over.body.code).toBe('RawPortLimit');
    expect((await t.call('DELETE', `/sandboxes/${c.body.id}`, undefined, h)).status).toBe(200);
  }, 120_000);

  it('raw ports are restored after a restart of nube and freed when the sandbox ends', async () => {
    await t.nube.close();
    expect(await tcpAsk(ports, 'down')).toBe('ECONNREFUSED');
    const t2 = await startSandboxNube('raw-ports', { ...env, NUBE_OWNER_KEY: t.ownerKey }, t.dataDir);
    Object.assign(t, { ...t2 });
    expect(await until(() => tcpAsk(ports, 'again'), ready, 30_000)).toBe(`${a.host}:again`);
    const udp = (await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7001, protocol: 'udp' })).body.publicPort;
    expect(await until(() => udpAsk(udp, 'u'), ready, 30_000)).toBe(`${a.host}:u`);
    expect((await t.call('DELETE', `/sandboxes/${a.id}`)).status).toBe(200);
    expect(await tcpAsk(ports, 'gone')).toBe('ECONNREFUSED');
    expect(await t.nube.services.sandboxes.rawPorts.repo.ofSandbox(a.id)).toEqual([]);
    // The freed host port is handed out again.
    const e = await t.call('POST', `/sandboxes/${b.id}/expose-raw`, { port: 7001, protocol: 'tcp' });
    expect(e.body.publicPort).toBe(ports);
  }, 180_000);
});
