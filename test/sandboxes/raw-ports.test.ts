// expose-raw / unexpose-raw: TCP and UDP echo servers inside sandboxes reached from the host through
// the public ports nube allocates; each port reaches only its own sandbox; idempotent; per-plan limit;
// restored after a restart of nube; freed when the sandbox ends. Both drivers, both metadata stores.
// While a sandbox runs the kernel forwards (nftables DNAT): a server inside that answers with its
// peer's address tells DNAT (the client's own address) from nube's relay (the bridge address), from
// the host and from another network namespace acting as an outside host; suspended, the relay answers
// and wakes the sandbox. Own bridge and outside namespaces in 10.104.0.0/16.
import { execFile, execFileSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTempDatabase } from '../helpers/pg.js';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube, until, vethNamespace } from './helpers.js';

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
function tcpAsk(port: number, text: string, ms = 10_000, host = '127.0.0.1'): Promise<string> {
  return new Promise((resolve) => {
    const s = connect({ host, port });
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

function udpAsk(port: number, text: string, ms = 3000, host = '127.0.0.1'): Promise<string> {
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
    s.send(text, port, host);
  });
}

// Answers with the address of its peer (TCP and UDP on 7002).
const PEER = `
import socket, threading
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('0.0.0.0', 7002))
def udp():
    while True:
        d, a = u.recvfrom(65536); u.sendto(b'peer=' + a[0].encode(), a)
threading.Thread(target=udp, daemon=True).start()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 7002)); s.listen(16)
while True:
    c, a = s.accept(); c.recv(100); c.sendall(b'peer=' + a[0].encode()); c.close()
`;

const ready = (v: string) => v.includes(':');

const BRIDGE = 'nubedn0:10.104.0.1/17';
const BRIDGE_IP = '10.104.0.1';

/** The host's first address on a real interface (not loopback, not a sandbox bridge). */
function hostAddress(): string {
  for (const [name, addrs] of Object.entries(networkInterfaces())) {
    if (name.startsWith('nube') || name.startsWith('dnt')) continue;
    const a = addrs?.find((x) => x.family === 'IPv4' && !x.internal && !x.address.startsWith('10.'));
    if (a) return a.address;
  }
  throw new Error('no host address');
}

/** A network namespace with a veth to the host: another machine, as far as routing goes. */
function outsideHost(i: number) {
  const ns = `dnto${i}`;
  const veth = `dntv${i}`;
  const net = `10.104.${128 + i}`;
  const { down } = vethNamespace(ns, veth, net, 24);
  /** One TCP or UDP exchange from inside the namespace to the host's address on its link (async: nube's relay runs in this process). */
  const ask = (protocol: 'tcp' | 'udp', port: number, text: string): Promise<string> => {
    const py =
      protocol === 'tcp'
        ? 'import socket,sys\ntry:\n s=socket.create_connection((sys.argv[1],int(sys.argv[2])),20); s.sendall(sys.argv[3].encode()); print(s.recv(200).decode())\nexcept Exception as e: print(type(e).__name__)'
        : 'import socket,sys\nu=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.settimeout(3)\ntry:\n u.sendto(sys.argv[3].encode(),(sys.argv[1],int(sys.argv[2]))); print(u.recvfrom(200)[0].decode())\nexcept Exception as e: print(type(e).__name__)';
    return new Promise((resolve, reject) =>
      execFile('ip', ['netns', 'exec', ns, 'python3', '-c', py, `${net}.1`, String(port), text], { encoding: 'utf8' }, (e, out) =>
        e ? reject(e) : resolve(out.trim()),
      ),
    );
  };
  return { address: `${net}.2`, ask, down };
}

/** The DNAT map elements of the test bridge's table (what the kernel forwards now). */
function dnatElements(): string {
  const r = execFileSync('nft', ['list', 'map', 'inet', 'nube_nubedn0', 'raw_any'], { encoding: 'utf8' });
  return r.replace(/\s+/g, ' ');
}

const CASES = DRIVERS.map((driver, i) => ({ driver, dialect: i % 2 === 0 ? 'sqlite' : 'postgres', ports: 41100 + i * 50 }));

describe.each(CASES)('$driver on $dialect: raw TCP/UDP ports', ({ driver, dialect, ports }) => {
  let t: SandboxNube;
  let a: { id: string; host: string; address: string };
  let b: { id: string; host: string };
  let dropDb: (() => Promise<void>) | undefined;
  let env: Record<string, string>;
  let outside: ReturnType<typeof outsideHost>;

  const start = async (id: string) => {
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/tcp.py', content: TCP_ECHO });
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/udp.py', content: UDP_ECHO });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 /root/tcp.py' });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 /root/udp.py' });
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/peer.py', content: PEER });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 /root/peer.py' });
  };

  beforeAll(async () => {
    // Every address of the host (so the outside namespace reaches it); told to clients as 127.0.0.2
    // (127.0.0.1 is the console's host: refused as NUBE_RAW_HOST).
    env = {
      NUBE_SANDBOX_DRIVER: driver,
      NUBE_RAW_PORTS: `${ports}-${ports + 9}`,
      NUBE_RAW_BIND: '0.0.0.0',
      NUBE_RAW_HOST: '127.0.0.2',
      NUBE_SANDBOX_BRIDGE: BRIDGE,
    };
    outside = outsideHost(CASES.findIndex((c) => c.driver === driver));
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
      const address = (await t.call('POST', `/sandboxes/${c.body.id}/runtime`, {})).body.address;
      if (which === 'a') a = { id: c.body.id, host, address };
      else b = { id: c.body.id, host };
    }
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    outside?.down();
    if (t) await stopSandboxNube(t);
    await dropDb?.();
  }, 120_000);

  it('expose-raw tcp answers a host port that reaches the echo server inside; idempotent', async () => {
    const e = await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7000 });
    expect(e.status).toBe(200);
    expect(e.body).toEqual({ host: '127.0.0.2', publicPort: ports, protocol: 'tcp', port: 7000 });
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

  it('while the sandbox runs the kernel forwards (DNAT): TCP and UDP from the host and from an outside namespace', async () => {
    const tcp = (await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7002 })).body.publicPort;
    const udp = (await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7002, protocol: 'udp' })).body.publicPort;
    expect(dnatElements()).toContain(`tcp . ${tcp} : ${a.address} . 7002`);
    expect(dnatElements()).toContain(`udp . ${udp} : ${a.address} . 7002`);
    const peer = (v: string) => v.startsWith('peer=');
    // From the host's own address the sandbox sees that address (the relay would show the bridge's).
    const me = hostAddress();
    expect(await until(() => tcpAsk(tcp, 'x', 5000, me), peer, 30_000)).toBe(`peer=${me}`);
    expect(await until(() => udpAsk(udp, 'x', 3000, me), peer, 30_000)).toBe(`peer=${me}`);
    // From loopback: masqueraded to the bridge address (the sandbox could not answer 127.0.0.1).
    expect(await tcpAsk(tcp, 'x')).toBe(`peer=${BRIDGE_IP}`);
    expect(await udpAsk(udp, 'x')).toBe(`peer=${BRIDGE_IP}`);
    // From another host: its own address arrives inside, and the answer finds its way back.
    expect(await outside.ask('tcp', tcp, 'x')).toBe(`peer=${outside.address}`);
    expect(await outside.ask('udp', udp, 'x')).toBe(`peer=${outside.address}`);
    // The echo ports too, from outside.
    expect(await outside.ask('tcp', ports, 'out')).toBe(`${a.host}:out`);
  }, 120_000);

  it('suspended, the relay answers and wakes the sandbox; running again, DNAT is back', async () => {
    const tcp = (await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7002 })).body.publicPort;
    expect((await t.call('POST', `/sandboxes/${a.id}/suspend`, {})).status).toBe(200);
    // Its processes stopped with it: the bootstrap starts the servers again at the wake.
    const script = 'python3 /root/tcp.py & python3 /root/udp.py & exec python3 /root/peer.py';
    expect((await t.call('POST', `/sandboxes/${a.id}/bootstrap`, { script, mode: 'async' })).status).toBe(200);
    expect(dnatElements()).not.toContain(`tcp . ${tcp} :`);
    expect(dnatElements()).not.toContain(`tcp . ${ports} :`);
    // The first connection wakes it through nube's relay (so the sandbox sees the bridge address).
    expect(await outside.ask('tcp', tcp, 'wake')).toBe(`peer=${BRIDGE_IP}`);
    expect((await t.call('GET', `/sandboxes/${a.id}`)).body.status).toBe('running');
    expect(dnatElements()).toContain(`tcp . ${tcp} : ${a.address} . 7002`);
    expect(await outside.ask('tcp', tcp, 'again')).toBe(`peer=${outside.address}`);
    expect(await until(() => tcpAsk(ports, 'echo'), ready, 30_000)).toBe(`${a.host}:echo`);
  }, 180_000);

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

  it('traffic through the kernel counts as activity for the idle clock; silence still suspends', async () => {
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 3, suspendOnIdle: true });
    expect(c.status).toBe(200);
    const id = c.body.id;
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/peer.py', content: PEER });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 /root/peer.py' });
    const port = (await t.call('POST', `/sandboxes/${id}/expose-raw`, { port: 7002 })).body.publicPort;
    const me = hostAddress();
    expect(await until(() => tcpAsk(port, 'x', 5000, me), (v) => v === `peer=${me}`, 30_000)).toBe(`peer=${me}`);
    // Only the kernel sees this traffic (the answer shows the client's own address, not the relay's).
    const end = Date.now() + 9000;
    while (Date.now() < end) {
      expect(await tcpAsk(port, 'x', 5000, me)).toBe(`peer=${me}`);
      await new Promise((r) => setTimeout(r, 500));
    }
    expect((await t.call('GET', `/sandboxes/${id}`)).body.status).toBe('running');
    const s = await until(() => t.call('GET', `/sandboxes/${id}`), (r) => r.body.status === 'suspended', 60_000);
    expect(s.body.status).toBe('suspended');
    expect((await t.call('DELETE', `/sandboxes/${id}`)).status).toBe(200);
  }, 120_000);

  it('raw ports are restored after a restart of nube and freed when the sandbox ends', async () => {
    await t.nube.close();
    expect(await tcpAsk(ports, 'down')).toBe('ECONNREFUSED');
    const t2 = await startSandboxNube('raw-ports', { ...env, NUBE_OWNER_KEY: t.ownerKey }, t.dataDir);
    Object.assign(t, { ...t2 });
    expect(await until(() => tcpAsk(ports, 'again'), ready, 30_000)).toBe(`${a.host}:again`);
    // Restored in the kernel too: an outside client's address arrives inside.
    expect(dnatElements()).toContain(`tcp . ${ports} : ${a.address} . 7000`);
    const peerPort = (await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7002 })).body.publicPort;
    expect(await outside.ask('tcp', peerPort, 'x')).toBe(`peer=${outside.address}`);
    const udp = (await t.call('POST', `/sandboxes/${a.id}/expose-raw`, { port: 7001, protocol: 'udp' })).body.publicPort;
    expect(await until(() => udpAsk(udp, 'u'), ready, 30_000)).toBe(`${a.host}:u`);
    expect((await t.call('DELETE', `/sandboxes/${a.id}`)).status).toBe(200);
    expect(await tcpAsk(ports, 'gone')).toBe('ECONNREFUSED');
    expect(await outside.ask('tcp', peerPort, 'gone')).toBe('ConnectionRefusedError');
    expect(dnatElements()).not.toContain(`: ${a.address} .`);
    expect(await t.nube.services.sandboxes.rawPorts.repo.ofSandbox(a.id)).toEqual([]);
    // The freed host port is handed out again.
    const e = await t.call('POST', `/sandboxes/${b.id}/expose-raw`, { port: 7001, protocol: 'tcp' });
    expect(e.body.publicPort).toBe(ports);
  }, 180_000);
});

// Issue 27 item 3: a browser sends the console's cookie to every port of the console's host, so raw
// ports (tenants' own servers) are never there. By default a loopback nube (the console at 127.0.0.1)
// puts them on 127.0.0.2 and says so; nothing answers them at the console's address.
describe.each(CASES)('$driver: raw ports by default are not on the console host', ({ driver, ports }) => {
  let t: SandboxNube;
  let id: string;
  beforeAll(async () => {
    t = await startSandboxNube('raw-host', { NUBE_SANDBOX_DRIVER: driver, NUBE_RAW_PORTS: `${ports + 20}-${ports + 29}`, NUBE_SANDBOX_BRIDGE: BRIDGE });
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 600 });
    id = c.body.id;
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/tcp.py', content: TCP_ECHO });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 /root/tcp.py' });
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    if (t) await stopSandboxNube(t);
  }, 120_000);

  it('announces and serves them at an address of their own, never at the console host', async () => {
    const consoleHost = new URL(t.baseUrl).hostname;
    const e = await t.call('POST', `/sandboxes/${id}/expose-raw`, { port: 7000 });
    expect(e.status).toBe(200);
    expect(e.body.host).not.toBe(consoleHost);
    expect(e.body.host).toBe('127.0.0.2');
    const name = (await t.call('POST', `/sandboxes/${id}/exec`, { command: 'hostname' })).body.stdout.trim();
    expect(await until(() => tcpAsk(e.body.publicPort, 'hi', 10_000, e.body.host), ready, 30_000)).toBe(`${name}:hi`);
    // The console's host: nothing there, by the kernel's forwarding or by nube's relay.
    expect(await tcpAsk(e.body.publicPort, 'cookie?', 3000, consoleHost)).toBe('ECONNREFUSED');
    expect(await tcpAsk(e.body.publicPort, 'cookie?', 3000, 'localhost')).toMatch(/ECONNREFUSED|EADDRNOTAVAIL/);
    await t.call('POST', `/sandboxes/${id}/suspend`, {});
    expect(await tcpAsk(e.body.publicPort, 'cookie?', 3000, consoleHost)).toBe('ECONNREFUSED');
    // SSH is announced there too.
    expect((await t.call('POST', `/sandboxes/${id}/ssh-enable`)).body.host).toBe('127.0.0.2');
  }, 180_000);
});
