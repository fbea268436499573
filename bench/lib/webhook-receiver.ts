// The webhook receiver the webhooks and forms benches share: a child process (its own event loop) that
// timestamps each delivery against the send time carried in its JSON body, at a dotted path given on
// its command line (`data.sentAt`, `data.fields.sentAt`). The parent arms it for n arrivals and gets
// their latencies and the last arrival time back.
import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';

export const now = () => performance.timeOrigin + performance.now();

export interface Receiver {
  port: number;
  /** Arms the receiver for `n` arrivals; resolves with their latencies and the last arrival time. */
  expect(n: number): Promise<{ latencies: number[]; last: number }>;
  stop(): void;
}

/** Starts the receiver; `sentAtPath` is where each delivery's body carries its send time. */
export async function startReceiver(sentAtPath: string): Promise<Receiver> {
  const child = fork(fileURLToPath(import.meta.url), ['webhook-receiver', sentAtPath], { execArgv: ['--import', 'tsx'] });
  const port = await new Promise<number>((resolve) => child.once('message', (m: { port: number }) => resolve(m.port)));
  return {
    port,
    expect(n) {
      const p = new Promise<{ latencies: number[]; last: number }>((resolve) =>
        child.once('message', (m: { latencies: number[]; last: number }) => resolve(m)),
      );
      child.send({ expect: n });
      return p;
    },
    stop: () => child.send({ stop: true }),
  };
}

function receiverChild(sentAtPath: string[]): void {
  let latencies: number[] = [];
  let last = 0;
  let want = Number.POSITIVE_INFINITY;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const at = now();
      let v: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      for (const k of sentAtPath) v = (v as Record<string, unknown>)[k];
      latencies.push(at - Number(v));
      last = at;
      res.writeHead(200).end();
      if (latencies.length >= want) {
        want = Number.POSITIVE_INFINITY;
        process.send?.({ done: true, latencies, last });
      }
    });
  });
  server.keepAliveTimeout = 30_000;
  server.listen(0, '127.0.0.1', () => process.send?.({ port: (server.address() as AddressInfo).port }));
  process.on('message', (m: { expect?: number; stop?: boolean }) => {
    if (m.stop) process.exit(0);
    if (m.expect !== undefined) {
      latencies = [];
      want = m.expect;
    }
  });
  process.on('disconnect', () => process.exit(0));
}

if (process.argv[2] === 'webhook-receiver') receiverChild(process.argv[3]!.split('.'));
