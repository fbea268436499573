// Pages written from a prompt by an LLM (a local OpenAI-protocol server): a durable job whose status the
// document shows, metered into the account's LLM tokens, sanitized and themed like sections, failing
// visibly with the upstream's reason, refused with 402 past the plan, over MCP too, and across a restart.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LlmStub, startLlmStub } from '../helpers/llm-stub.js';
import { pdfText } from '../helpers/pdf.js';
import { createTempDatabase, DIALECTS } from '../helpers/pg.js';
import { caller, json, newOwnerKey, startNube } from '../helpers/server.js';
import { until } from '../webhooks/helpers.js';
import { type DocsNube, startDocsNube } from './helpers.js';

const PAGES = {
  sections: [
    {
      heading: 'Pan de masa madre',
      body: 'Horneado **cada mañana**. ¿Ya lo probaste?\n\n<script>alert(1)</script>',
    },
    { heading: 'Precios', body: '| pieza | MXN |\n|---|---|\n| hogaza | 85 |' },
  ],
};

const llmEnv = (stub: LlmStub) => ({
  NUBE_LLM_BASE_URL: stub.url,
  NUBE_LLM_API_KEY: 'sk-operator',
  NUBE_LLM_MODEL: 'op-model',
  NUBE_LLM_GATEWAY_PORT: '0',
});

// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
type Doc = any;

describe.each(DIALECTS)('documents from a prompt (%s)', (dialect) => {
  let stub: LlmStub;
  let t: DocsNube;
  const get = async (id: string): Promise<Doc> => json(await t.api('GET', `/documents/${id}`));
  const settled = (id: string, ms = 30_000) =>
    until(
      () => get(id),
      (d) => d.generation?.status === 'done' || d.generation?.status === 'failed',
      ms,
    );
  const used = async () => (await json(await t.api('GET', '/account/llm-tokens'))).used as number;

  beforeAll(async () => {
    stub = await startLlmStub();
    t = await startDocsNube(dialect, llmEnv(stub));
  });
  afterAll(async () => {
    await t?.close();
    await stub?.close();
  });

  it('writes the pages from the prompt as a job, themed and sanitized, and meters the tokens', async () => {
    const before = await used();
    stub.push({ content: JSON.stringify(PAGES), usage: { prompt_tokens: 120, completion_tokens: 80 } });
    const r = await t.api('POST', '/documents', {
      name: 'Panadería Luna',
      prompt: 'Una landing para una panadería de barrio',
      theme: 'modern',
      customColors: { primary: '#ff0066' },
    });
    expect(r.status).toBe(200);
    const { document } = await json(r);
    expect(document.generation).toMatchObject({ status: 'queued', error: null });
    expect(document.pageCount).toBe(0);

    const done = await settled(document.id);
    expect(done.generation).toMatchObject({ status: 'done', error: null });
    expect(done.pages.map((p: { title: string }) => p.title)).toEqual(['Pan de masa madre', 'Precios']);
    const [first, prices] = done.pages.map((p: { html: string }) => p.html);
    expect(first).toContain('<strong>cada mañana</strong>');
    expect(first).toContain('¿Ya lo probaste?');
    expect(first).not.toContain('<script');
    expect(first).toContain('--color-primary:#ff0066');
    expect(first).toContain('class="theme-modern"');
    expect(prices).toContain('<table>');

    const seen = stub.requests.at(-1)!;
    expect(seen.authorization).toBe('Bearer sk-operator');
    expect(seen.body.model).toBe('op-model');
    expect(JSON.stringify(seen.body.messages)).toContain('Una landing para una panadería de barrio');
    expect((await used()) - before).toBe(200);

    // The generated pages deploy and export like any others.
    const deployed = await t.api('POST', `/documents/${document.id}/deploy`);
    expect(deployed.status).toBe(200);
    const pdf = await t.api('GET', `/documents/${document.id}/pdf`);
    expect(pdf.status).toBe(200);
    const text = await pdfText(Buffer.from(await pdf.arrayBuffer()));
    expect(text).toHaveLength(2);
    expect(text[0]).toContain('Horneado cada mañana. ¿Ya lo probaste?');
    expect(text[1]).toContain('hogaza');
  });

  it('reads a fenced or Markdown answer too, and a new prompt writes the pages again', async () => {
    stub.push({ content: '```json\n{"sections":[{"title":"Uno","content":"primero"}]}\n```' });
    const { document } = await json(await t.api('POST', '/documents', { name: 'Fences', prompt: 'algo' }));
    expect((await settled(document.id)).pages.map((p: { title: string }) => p.title)).toEqual(['Uno']);

    stub.push({ content: '# Alfa\n\nuno\n\n# Beta\n\ndos' });
    const patched = await json(await t.api('PATCH', `/documents/${document.id}`, { prompt: 'otra cosa' }));
    expect(patched.generation.status).toBe('queued');
    const again = await until(
      () => get(document.id),
      (d) => d.generation?.status === 'done' && d.pageCount === 2,
    );
    expect(again.pages.map((p: { title: string }) => p.title)).toEqual(['Alfa', 'Beta']);

    // Sections sent by hand replace the generated pages and end the generation.
    const manual = await json(
      await t.api('PATCH', `/documents/${document.id}`, { sections: [{ heading: 'A mano', body: 'x' }] }),
    );
    expect(manual.generation).toBeNull();
    expect(manual.pages.map((p: { title: string }) => p.title)).toEqual(['A mano']);
  });

  it('shows failed with the upstream reason after the retries, and PATCH sections: [] tries again', async () => {
    const n = stub.requests.length;
    stub.push(
      { status: 500, content: 'model overloaded' },
      { status: 500, content: 'model overloaded' },
      { status: 500, content: 'model overloaded' },
    );
    const { document } = await json(await t.api('POST', '/documents', { name: 'Falla', prompt: 'algo' }));
    const retrying = await until(
      () => get(document.id),
      (d) => /attempt 1 of 3 failed/.test(d.generation?.error ?? ''),
    );
    expect(retrying.generation.status).not.toBe('failed');
    const failed = await settled(document.id);
    expect(failed.generation.status).toBe('failed');
    expect(failed.generation.error).toMatch(/500.*model overloaded/);
    expect(stub.requests.length - n).toBe(3);
    const deploy = await t.api('POST', `/documents/${document.id}/deploy`);
    expect(deploy.status).toBe(400);
    expect((await json(deploy)).error).toContain('model overloaded');

    stub.push({ content: JSON.stringify(PAGES) });
    const retried = await json(await t.api('PATCH', `/documents/${document.id}`, { sections: [] }));
    expect(retried.generation.status).toBe('queued');
    expect((await settled(document.id)).generation.status).toBe('done');
  }, 60_000);

  it('works over MCP', async () => {
    stub.push({ content: JSON.stringify(PAGES) });
    const mcp = async (name: string, args: unknown) => {
      const r = await fetch(`${t.baseUrl}/api/mcp`, {
        method: 'POST',
        headers: {
          ...t.auth,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: { name, arguments: args },
        }),
      });
      const result = ((await r.json()) as { result: { isError?: boolean; content: { text: string }[] } })
        .result;
      expect(result.isError).toBeFalsy();
      return JSON.parse(result.content[0]!.text);
    };
    const { document } = await mcp('documents_create', { name: 'Por MCP', prompt: 'una guía' });
    expect(document.generation.status).toBe('queued');
    const done = await until(
      () => mcp('documents_get', { id: document.id }),
      (d) => d.generation?.status === 'done',
    );
    expect(done.pageCount).toBe(2);
  });

  it('answers 402 once the month’s LLM tokens are spent; sections still work', async () => {
    const owner = (await json(await t.api('GET', '/account'))).id;
    const { allowance } = await json(await t.api('GET', '/account/llm-tokens'));
    // A document accepted while tokens were left, whose job runs after they are spent: failed, the reason
    // given, and nothing sent to the LLM.
    await t.nube.deps.jobs.stop();
    const { document } = await json(await t.api('POST', '/documents', { name: 'Tarde', prompt: 'algo' }));
    await t.nube.deps.usage.add(owner, 'llmTokens', allowance);
    const n = stub.requests.length;
    t.nube.deps.jobs.start();
    const late = await settled(document.id);
    expect(late.generation.status).toBe('failed');
    expect(late.generation.error).toMatch(/InsufficientBalance/);
    expect(stub.requests.length).toBe(n);

    const r = await t.api('POST', '/documents', { name: 'Sin saldo', prompt: 'algo' });
    expect(r.status).toBe(402);
    expect((await json(r)).code).toBe('InsufficientBalance');
    expect(
      (await t.api('POST', '/documents', { name: 'Con secciones', prompt: 'x', sections: [{ body: 'a' }] }))
        .status,
    ).toBe(200);
  });
});

describe.each(DIALECTS)("documents from a prompt with the account's own AI key (%s)", (dialect) => {
  let stub: LlmStub;
  let t: DocsNube;
  beforeAll(async () => {
    stub = await startLlmStub();
    // No NUBE_LLM_*: the operator offers no LLM; the loopback stub is allowed as an account's upstream.
    t = await startDocsNube(dialect, { NUBE_OUTBOUND_ALLOW: '127.0.0.1/32', NUBE_LLM_GATEWAY_PORT: '0' });
  });
  afterAll(async () => {
    await t?.close();
    await stub?.close();
  });

  it('answers 400 naming the setting until the account sets a key, then writes with it', async () => {
    const none = await t.api('POST', '/documents', { name: 'Propia', prompt: 'algo' });
    expect(none.status).toBe(400);
    const body = await json(none);
    expect(body).toMatchObject({ code: 'LlmNotConfigured' });
    expect(body.error).toContain('NUBE_LLM_BASE_URL');
    expect(body.issues[0].path).toEqual(['body', 'prompt']);

    const key = { baseUrl: stub.url, apiKey: 'sk-own', model: 'own-model' };
    expect((await t.api('PUT', '/account/ai-key', key)).status).toBe(200);
    stub.push({ content: JSON.stringify(PAGES) });
    const { document } = await json(await t.api('POST', '/documents', { name: 'Propia', prompt: 'algo' }));
    const done = await until(
      async () => json(await t.api('GET', `/documents/${document.id}`)),
      (d) => d.generation?.status === 'done',
    );
    expect(done.pageCount).toBe(2);
    expect(stub.requests.at(-1)).toMatchObject({
      authorization: 'Bearer sk-own',
      body: { model: 'own-model' },
    });
  });
});

describe.each(DIALECTS)('a generation across a restart of nube (%s)', (dialect) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'nube-docgen-restart-'));
  const cleanup: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of cleanup.reverse()) await c();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('a generation interrupted by a shutdown finishes after the next start', async () => {
    const stub = await startLlmStub();
    cleanup.push(() => stub.close());
    const pg = dialect === 'postgres' ? await createTempDatabase('docgen') : undefined;
    if (pg) cleanup.push(pg.drop);
    const env = {
      ...llmEnv(stub),
      NUBE_OWNER_KEY: newOwnerKey(),
      NUBE_OWNER_PLAN: 'mega',
      ...(pg ? { DATABASE_URL: pg.url } : {}),
    };
    // The first answer never comes in time: nube stops while the job waits for it.
    stub.push({ delayMs: 30_000, content: JSON.stringify(PAGES) }, { content: JSON.stringify(PAGES) });
    const first = await startNube({ dataDir, env });
    const api1 = caller(first);
    const { document } = await json(await api1('POST', '/documents', { name: 'Reinicio', prompt: 'algo' }));
    await until(
      async () => json(await api1('GET', `/documents/${document.id}`)),
      (d) => d.generation?.status === 'running',
    );
    await first.nube.deps.jobs.stop({ graceMs: 50 });
    await first.close();
    expect(stub.requests).toHaveLength(1);

    const second = await startNube({ dataDir, env });
    cleanup.push(() => second.close());
    const api2 = caller(second);
    const done = await until(
      async () => json(await api2('GET', `/documents/${document.id}`)),
      (d) => d.generation?.status === 'done',
      30_000,
    );
    expect(done.pages.map((p: { title: string }) => p.title)).toEqual(['Pan de masa madre', 'Precios']);
    expect(stub.requests).toHaveLength(2);
  }, 90_000);
});
