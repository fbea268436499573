// The handler context's signal: a POST whose body has been read is not a disconnect; a client that
// hangs up before the answer is.
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Authenticator } from './auth.js';
import { MemoryRateLimiter } from './limits.js';
import { type AnyOperation, defineOperation, type Services } from './operation.js';
import { installErrorHandling } from './http-errors.js';
import { mountOperations } from './rest.js';

const seen: { aborted: boolean; at: number }[] = [];
let release: () => void = () => {};

const waitOp = defineOperation({
  id: 'test.wait',
  method: 'POST',
  path: '/wait',
  summary: 'waits, then reports whether its signal fired',
  tags: ['test'],
  auth: ['public'],
  body: z.object({ ms: z.number() }),
  response: z.object({ aborted: z.boolean() }),
  handler: async ({ body, signal }) => {
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, body.ms);
      release = () => {
        clearTimeout(t);
        resolve();
      };
      signal.addEventListener('abort', () => {
        clearTimeout(t);
        resolve();
      });
    });
    seen.push({ aborted: signal.aborted, at: Date.now() });
    return { aborted: signal.aborted };
  },
});

describe('handler context signal', () => {
  const app = Fastify();
  let port = 0;
  beforeAll(async () => {
    installErrorHandling(app);
    mountOperations(app, {
      operations: [waitOp as AnyOperation],
      auth: new Authenticator(),
      rateLimiter: new MemoryRateLimiter(),
      services: {} as Services,
      defaultRateLimit: { points: 1000, windowSeconds: 60 },
      rateLimitSettings: { sandboxCreate: { byte: 10, mega: 10, tera: 10 } },
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });
  afterAll(() => app.close());

  it('stays quiet for a POST whose body was read and whose client waits', async () => {
    const r = await fetch(`http://127.0.0.1:${port}/api/v2/wait`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ms: 300 }),
    });
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ aborted: false });
  });

  it('aborts when the client hangs up before the answer', async () => {
    seen.length = 0;
    const started = Date.now();
    await new Promise<void>((resolve) => {
      const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/api/v2/wait', headers: { 'content-type': 'application/json' } });
      req.on('error', () => resolve());
      req.end(JSON.stringify({ ms: 600_000 }));
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 200);
    });
    // Only the abort can end the handler's 600 s wait before release(); the limits allow a busy machine.
    for (let i = 0; i < 3000 && seen.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    release();
    expect(seen).toHaveLength(1);
    expect(seen[0]!.aborted).toBe(true);
    expect(seen[0]!.at - started).toBeLessThan(60_000);
  }, 120_000);
});
