// One raw exposure's host side: a TCP server that splices each connection to the port inside the
// sandbox, or a UDP socket that relays datagrams through one upstream socket per client address.
// The target is resolved per connection (or per UDP client), so a suspended sandbox wakes on traffic.
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { connect, createServer, isIPv6, type Server, type Socket } from 'node:net';

export interface RawTarget {
  address: string;
  port: number;
  /** The connection woke the sandbox: its server may need a moment to listen again. */
  woke: boolean;
}

export type ResolveTarget = () => Promise<RawTarget | null>;

export interface RawListenerOptions {
  protocol: 'tcp' | 'udp';
  bind: string;
  publicPort: number;
  resolve: ResolveTarget;
  onError?: (e: unknown) => void;
}

const WAKE_RETRY_MS = 10_000;
/** A UDP client silent this long loses its upstream socket (as conntrack forgets a UDP flow). */
export const UDP_IDLE_MS = 60_000;
/** Clients one UDP exposure relays at once; more are dropped, so one port cannot exhaust sockets. */
const UDP_MAX_CLIENTS = 1024;

export interface RawListener {
  readonly publicPort: number;
  close(): Promise<void>;
}

/** Listens on the public port (fails with EADDRINUSE when something else holds it). */
export function openRawListener(o: RawListenerOptions): Promise<RawListener> {
  return o.protocol === 'tcp' ? openTcp(o) : openUdp(o);
}

function openTcp(o: RawListenerOptions): Promise<RawListener> {
  const live = new Set<Socket>();
  const server: Server = createServer({ pauseOnConnect: true, noDelay: true }, (client) => {
    live.add(client);
    client.on('close', () => live.delete(client));
    client.on('error', () => client.destroy());
    o.resolve().then(
      (t) => (t && !client.destroyed ? splice(client, t, t.woke ? Date.now() + WAKE_RETRY_MS : 0, live) : client.destroy()),
      (e: unknown) => {
        o.onError?.(e);
        client.destroy();
      },
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port: o.publicPort, host: o.bind, exclusive: true }, () => {
      server.off('error', reject);
      server.on('error', (e) => o.onError?.(e));
      resolve({
        publicPort: o.publicPort,
        close: () =>
          new Promise<void>((done) => {
            for (const s of live) s.destroy();
            server.close(() => done());
          }),
      });
    });
  });
}

function splice(client: Socket, t: RawTarget, retryUntil: number, live: Set<Socket>): void {
  let up: Socket | null = null;
  client.on('close', () => up?.destroy());
  const attempt = () => {
    const u = connect({ host: t.address, port: t.port, noDelay: true });
    up = u;
    live.add(u);
    let connected = false;
    u.once('connect', () => {
      connected = true;
      u.pipe(client);
      client.pipe(u);
      client.resume();
    });
    u.on('error', (e: NodeJS.ErrnoException) => {
      // Right after a wake nothing listens yet: retry until the server inside is up.
      if (!connected && e.code === 'ECONNREFUSED' && Date.now() < retryUntil && !client.destroyed) {
        setTimeout(attempt, 100);
        return;
      }
      client.destroy();
    });
    u.on('close', () => {
      live.delete(u);
      if (connected) client.end();
    });
  };
  attempt();
}

interface UdpClient {
  up: UdpSocket | null;
  queue: Buffer[];
  timer: NodeJS.Timeout;
}

function openUdp(o: RawListenerOptions): Promise<RawListener> {
  const family = isIPv6(o.bind) ? 'udp6' : 'udp4';
  const pub = createSocket({ type: family, reuseAddr: false });
  const clients = new Map<string, UdpClient>();
  const drop = (key: string) => {
    const c = clients.get(key);
    if (!c) return;
    clearTimeout(c.timer);
    c.up?.close();
    clients.delete(key);
  };
  const arm = (key: string, c: UdpClient) => {
    clearTimeout(c.timer);
    c.timer = setTimeout(() => drop(key), UDP_IDLE_MS);
    c.timer.unref();
  };
  pub.on('message', (msg, rinfo) => {
    const key = `${rinfo.address}:${rinfo.port}`;
    let c = clients.get(key);
    if (c) {
      arm(key, c);
      if (c.up) c.up.send(msg);
      else if (c.queue.length < 64) c.queue.push(msg);
      return;
    }
    if (clients.size >= UDP_MAX_CLIENTS) return;
    const fresh: UdpClient = { up: null, queue: [msg], timer: setTimeout(() => {}, 0) };
    c = fresh;
    clients.set(key, fresh);
    arm(key, fresh);
    o.resolve().then(
      (t) => {
        if (!t || clients.get(key) !== fresh) return drop(key);
        const up = createSocket(isIPv6(t.address) ? 'udp6' : 'udp4');
        up.on('message', (reply) => {
          arm(key, fresh);
          pub.send(reply, rinfo.port, rinfo.address);
        });
        up.on('error', () => drop(key));
        up.connect(t.port, t.address, () => {
          if (clients.get(key) !== fresh) return up.close();
          fresh.up = up;
          for (const m of fresh.queue.splice(0)) up.send(m);
        });
      },
      (e: unknown) => {
        o.onError?.(e);
        drop(key);
      },
    );
  });
  return new Promise((resolve, reject) => {
    pub.once('error', reject);
    pub.bind({ port: o.publicPort, address: o.bind, exclusive: true }, () => {
      pub.off('error', reject);
      pub.on('error', (e) => o.onError?.(e));
      resolve({
        publicPort: o.publicPort,
        close: () =>
          new Promise<void>((done) => {
            for (const key of [...clients.keys()]) drop(key);
            pub.close(() => done());
          }),
      });
    });
  });
}
