import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';

// Every outbound path of nube, pointed at a server that redirects to loopback or the metadata service:
// webhook delivery, web fetch / crawl / extract, the search provider, file search with an account's AI
// key, the embedding job, and the operator's embeddings endpoint. The "trap" servers on 127.0.0.1 and
// [::1] must never be reached, and no answer may carry what they would have said (the status leak).
//
// The user-chosen URLs live on 127.0.0.3, which the allow-list admits; the operator's services live on
// 127.0.0.1, which it does not (the operator's own origin is trusted; where it redirects is not).

interface Trap {
  port: number;
  hits: string[];
  close(): Promise<void>;
}

async function listen(host: string, handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<Trap> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    handler(req, res);
  });
  await new Promise<void>((r) => server.listen(0, host, r));
  return {
    port: (server.address() as AddressInfo).port,
    hits,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const TARGETS = ['127.0.0.1', '[::1]', 'localhost', '169.254.169.254'] as const;
type Target = (typeof TARGETS)[number];

let trap4: Trap;
let trap6: Trap;
/** Where /r/... redirects to now. */
let target: Target = '127.0.0.1';
let userSite: Trap; // 127.0.0.3: URLs a user gives nube
let operatorSite: Trap; // 127.0.0.1: the operator's search provider and embeddings endpoint

function trapUrl(t: Target): string {
  if (t === '169.254.169.254') return 'http://169.254.169.254/latest/meta-data/iam/security-credentials/';
  return `http://${t}:${t === '[::1]' ? trap6.port : trap4.port}/secret`;
}

/** 307 keeps the method and body, so a POST would be replayed to the target: the strongest redirect. */
const redirecting = (req: IncomingMessage, res: ServerResponse) => {
  if ((req.url ?? '').startsWith('/r')) return void res.writeHead(307, { location: trapUrl(target) }).end();
  res.writeHead(404, { 'content-type': 'text/plain' }).end('no');
};

let t: TestNube;
let call: ReturnType<typeof caller>;
beforeAll(async () => {
  const trap = (_req: IncomingMessage, res: ServerResponse) => res.writeHead(418, { 'content-type': 'text/plain' }).end('trap secret');
  trap4 = await listen('127.0.0.1', trap);
  trap6 = await listen('::1', trap);
  userSite = await listen('127.0.0.3', redirecting);
  operatorSite = await listen('127.0.0.1', redirecting);
  t = await startNube({
    env: {
      NUBE_OUTBOUND_ALLOW: '127.0.0.3/32',
      NUBE_WEB_SEARCH_URL: `http://127.0.0.1:${operatorSite.port}/r`,
      NUBE_FILES_AI_BASE_URL: `http://127.0.0.1:${operatorSite.port}/r`,
      NUBE_FILES_AI_KEY: 'sk-operator',
      NUBE_WEBHOOK_RETRY_SCHEDULE: '1h',
      NUBE_WEB_TIMEOUT_MS: '10000',
    },
  });
  call = caller(t);
});
afterAll(async () => {
  await t?.close();
  for (const s of [trap4, trap6, userSite, operatorSite]) await s?.close();
});

const user = (path: string) => `http://127.0.0.3:${userSite.port}${path}`;

/** The trap's status as a number of its own (ids and times may hold the digits), its body or reason. */
const LEAK = /(?<![\w.])418(?![\w.])|trap secret|teapot/i;

/** The answer's body must not say anything the trap would have said. */
async function noLeak(r: Response): Promise<Record<string, unknown>> {
  const text = await r.text();
  expect(text).not.toMatch(LEAK);
  return JSON.parse(text);
}

async function uploadFile(name: string): Promise<void> {
  const created = await json(await call('POST', '/files', { fileName: name, contentType: 'text/plain', size: 2 }));
  const put = await fetch(created.putUrl, { method: 'PUT', body: 'hi', headers: { 'content-type': 'text/plain' } });
  expect(put.status).toBe(200);
}

async function until<T>(fn: () => Promise<T> | T, ok: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > end) return v;
    await sleep(50);
  }
}

describe.each(TARGETS)('a redirect to %s', (to) => {
  beforeAll(() => {
    target = to;
  });

  it('web fetch answers 400 UrlRefused', async () => {
    const r = await call('POST', '/web/fetch', { url: user('/r/page') });
    expect(r.status).toBe(400);
    expect((await noLeak(r)).code).toBe('UrlRefused');
  });

  it('web crawl answers 400 UrlRefused for its start page', async () => {
    const r = await call('POST', '/web/crawl', { url: user('/r/start'), maxPages: 2 });
    expect(r.status).toBe(400);
    expect((await noLeak(r)).code).toBe('UrlRefused');
  });

  it('web extract records UrlRefused for the page', async () => {
    const { jobId } = await json(await call('POST', '/web/extract', { input: user('/r/item') }));
    const job = await until(
      async () => json(await call('GET', `/web/extract/${jobId}`)),
      (j) => j.status === 'completed' || j.status === 'failed',
    );
    expect(job.status).toBe('completed');
    expect(job.data[0].error.code).toBe('UrlRefused');
    expect(JSON.stringify(job)).not.toMatch(LEAK);
  });

  it("web search answers 502 from the operator's provider", async () => {
    const r = await call('POST', '/web/search', { query: 'nube' });
    expect(r.status).toBe(502);
    expect((await noLeak(r)).code).toBe('SearchProviderFailed');
  });

  it("file search with the operator's embeddings endpoint answers 503", async () => {
    const r = await call('GET', '/files/search?q=hello');
    expect(r.status).toBe(503);
    await noLeak(r);
  });

  it("file search with the account's own AI key answers 503, and the embedding job does not follow either", async () => {
    const set = await call('PUT', '/account/ai-key', { apiKey: 'sk-account', baseUrl: user('/r'), model: 'm' });
    expect(set.status).toBe(200);
    try {
      const r = await call('GET', '/files/search?q=hello');
      expect(r.status).toBe(503);
      await noLeak(r);
      // The background job embeds a new file with the account's key: it reaches the user's site and stops.
      const before = userSite.hits.filter((h) => h === 'POST /r/embeddings').length;
      await uploadFile(`job-${to}.txt`);
      const after = await until(
        () => userSite.hits.filter((h) => h === 'POST /r/embeddings').length,
        (n) => n > before,
      );
      expect(after).toBeGreaterThan(before);
    } finally {
      await call('DELETE', '/account/ai-key');
    }
  });

  it('webhook delivery records the 307 as a failed attempt and goes no further', async () => {
    const w = await json(await call('POST', '/webhooks', { url: user(`/r/hook-${to}`), events: ['file.created'] }));
    try {
      const ownerId = (await json(await call('GET', '/account'))).id;
      await t.nube.deps.bus.publish({ event: 'file.created', ownerId, data: { id: `file-${to}` } });
      const list = await until(
        async () => json(await call('GET', `/webhooks/${w.id}/deliveries`)),
        (l) => l.items[0]?.attemptCount >= 1,
      );
      expect(list.items[0]).toMatchObject({ attemptCount: 1, lastStatusCode: 307 });
    } finally {
      await call('DELETE', `/webhooks/${w.id}`);
    }
  });

  it('nothing reached the trap', () => {
    expect(trap4.hits).toEqual([]);
    expect(trap6.hits).toEqual([]);
  });
});
