// A real HTTP receiver on loopback that records every delivery and answers as the test tells it to.
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';

export interface Received {
  headers: IncomingHttpHeaders;
  raw: string;
  at: number;
}

export interface Receiver {
  url: string;
  port: number;
  got: Received[];
  /** Status to answer with (default 200), and an optional delay before answering. */
  status: number;
  delayMs: number;
  /** When set, only the first `delayFirst` requests wait `delayMs`; later ones are answered at once. */
  delayFirst?: number;
  /** Resolves once `n` deliveries have arrived in total (rejects after timeoutMs). */
  waitFor(n: number, timeoutMs?: number): Promise<Received[]>;
  close(): Promise<void>;
}

/**
 * Records only requests to its own path (`/hook/<random>` unless given): test files run in parallel, and
 * a port closed by one file can be handed to another's receiver while the first file's nube still
 * retries deliveries to it. Those strays get a 410 and are not recorded.
 */
export async function startReceiver(port = 0, path = `/hook/${randomBytes(6).toString('hex')}`): Promise<Receiver> {
  const waiters: { n: number; resolve: () => void }[] = [];
  const r: Receiver = {
    url: '',
    port: 0,
    got: [],
    status: 200,
    delayMs: 0,
    waitFor(n, timeoutMs = 20_000) {
      if (r.got.length >= n) return Promise.resolve(r.got);
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`receiver got ${r.got.length} of ${n} deliveries`)), timeoutMs);
        waiters.push({
          n,
          resolve: () => {
            clearTimeout(t);
            resolve(r.got);
          },
        });
      });
    },
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
  const server: Server = createServer((req, res) => {
    if (req.url !== path) {
      res.writeHead(410, { 'content-type': 'text/plain' }).end('not this receiver');
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const status = r.status;
      r.got.push({ headers: req.headers, raw: Buffer.concat(chunks).toString('utf8'), at: Date.now() });
      for (const w of [...waiters]) {
        if (r.got.length >= w.n) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve();
        }
      }
      const answer = () => {
        if (!res.destroyed) res.writeHead(status, { 'content-type': 'text/plain' }).end(`answer ${status}`);
      };
      const delayed = r.delayFirst === undefined || r.got.length <= r.delayFirst;
      if (r.delayMs && delayed) setTimeout(answer, r.delayMs);
      else answer();
    });
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  r.port = (server.address() as AddressInfo).port;
  r.url = `http://127.0.0.1:${r.port}${path}`;
  return r;
}
