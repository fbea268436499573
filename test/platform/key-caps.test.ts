// Key caps on LLM tokens and sandbox CPU seconds (issue 32, item 2), end to end over HTTP on both
// metadata stores: a scoped key's documents from a prompt and agent turns are metered by the LLM gateway
// under the key (a local OpenAI-protocol server answers), and the CPU of the sandboxes it created is
// read from their cgroups; past a cap the key's next call is 402 KeyCapReached, the owner's key is not.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AgentNube, startAgentNube } from '../agents/helpers.js';
import { DIALECTS } from '../helpers/pg.js';
import { until } from '../webhooks/helpers.js';

describe.each(DIALECTS)('key caps on LLM tokens and sandbox CPU (%s)', (dialect) => {
  let t: AgentNube;
  let site: Server;
  let siteUrl: string;
  const mint = async (body: Record<string, unknown>, key?: string) => t.call('POST', '/account/keys', body, key);
  const keyCounter = (keyId: string, metric: 'llmTokens' | 'sandboxCpuMs') => t.nube.deps.usage.counter(`key:${keyId}`, metric);

  beforeAll(async () => {
    // A page for the web extraction's schema source.
    site = createServer((_req, res) => {
      res.setHeader('content-type', 'text/html; charset=utf-8');
      res.end('<!doctype html><html><head><title>Panadería</title></head><body><h1>Pan de masa madre</h1></body></html>');
    });
    await new Promise<void>((r) => site.listen(0, '127.0.0.1', r));
    siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}/`;
    t = await startAgentNube('key-caps', { dialect, env: { NUBE_OWNER_PLAN: 'mega', NUBE_KEY_CPU_METER_MS: '500', NUBE_OUTBOUND_ALLOW: '127.0.0.1/32' } });
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
    await new Promise((r) => site?.close(r));
  }, 120_000);

  it('caps are validated: negative or fractional caps are 400; a key creates keys only within its caps', async () => {
    for (const caps of [{ llmTokens: -1 }, { sandboxCpuSeconds: 1.5 }, { llmTokens: 'many' }, { sandboxCpuSeconds: -3 }]) {
      const r = await mint({ name: 'bad', scopes: ['account:read'], caps });
      expect(r.status, JSON.stringify(caps)).toBe(400);
      expect(r.body.issues[0].path[0]).toBe('body');
    }
    const k = await mint({ name: 'capped', scopes: ['account:write', 'sandboxes:write'], caps: { llmTokens: 100, sandboxCpuSeconds: 5 } });
    expect(k.status).toBe(201);
    expect(k.body.caps).toEqual({ llmTokens: 100, sandboxCpuSeconds: 5 });
    const wider = await mint({ name: 'wider', scopes: ['account:read'], caps: { llmTokens: 101 } }, k.body.secret);
    expect(wider.status).toBe(403);
    expect(wider.body.code).toBe('KeyScopeTooWide');
    const cpuWider = await mint({ name: 'wider', scopes: ['account:read'], caps: { sandboxCpuSeconds: 6 } }, k.body.secret);
    expect(cpuWider.status).toBe(403);
    // A child without caps inherits its creator's.
    const child = await mint({ name: 'child', scopes: ['account:read'] }, k.body.secret);
    expect(child.status).toBe(201);
    expect(child.body.caps).toEqual({ llmTokens: 100, sandboxCpuSeconds: 5 });
    const listed = (await t.call('GET', '/account/keys')).body.items.find((i: { id: string }) => i.id === k.body.id);
    expect(listed.caps).toEqual({ llmTokens: 100, sandboxCpuSeconds: 5 });
  });

  it('llmTokens: a document written from a prompt counts toward the key; its next prompt is 402, the owner goes on', async () => {
    const k = await mint({ name: 'writer', scopes: ['documents:write'], caps: { llmTokens: 150 } });
    expect(k.status).toBe(201);
    const pages = JSON.stringify({ sections: [{ heading: 'Hola', body: 'mundo' }] });
    t.stub.push({ content: pages, usage: { prompt_tokens: 120, completion_tokens: 80 } });
    const first = await t.call('POST', '/documents', { name: 'Primera', prompt: 'una página' }, k.body.secret);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    const id = first.body.document.id;
    const doc = await until(
      async () => (await t.call('GET', `/documents/${id}`)).body,
      (d) => d.generation?.status === 'done' || d.generation?.status === 'failed',
      30_000,
    );
    expect(doc.generation.status).toBe('done');
    expect(await keyCounter(k.body.id, 'llmTokens')).toBe(200);
    const refused = await t.call('POST', '/documents', { name: 'Segunda', prompt: 'otra página' }, k.body.secret);
    expect(refused.status).toBe(402);
    expect(refused.body.code).toBe('KeyCapReached');
    expect(refused.body.cap).toBe('llmTokens');
    expect(refused.body.limit).toBe(150);
    // Sections need no LLM: the key still writes documents by hand.
    expect((await t.call('POST', '/documents', { name: 'A mano', sections: [{ body: 'x' }] }, k.body.secret)).status).toBe(200);
    t.stub.push({ content: pages, usage: { prompt_tokens: 10, completion_tokens: 10 } });
    const owner = await t.call('POST', '/documents', { name: 'Del dueño', prompt: 'algo' });
    expect(owner.status).toBe(200);
  });

  it("llmTokens: a web extraction's schema source counts its LLM tokens toward the key that asked", async () => {
    const k = await mint({ name: 'extractor', scopes: ['web:write'], caps: { llmTokens: 30 } });
    expect(k.status).toBe(201);
    const schema = { type: 'object', properties: { heading: { type: 'string' } } };
    t.stub.push({ content: JSON.stringify({ heading: 'Pan de masa madre' }), usage: { prompt_tokens: 25, completion_tokens: 15 } });
    const start = await t.call('POST', '/web/extract', { input: siteUrl, source: 'schema', schema }, k.body.secret);
    expect(start.status, JSON.stringify(start.body)).toBe(200);
    const job = await until(
      async () => (await t.call('GET', `/web/extract/${start.body.jobId}`)).body,
      (j) => j.status === 'completed' || j.status === 'failed',
      30_000,
    );
    expect(job.status, JSON.stringify(job)).toBe('completed');
    expect(await keyCounter(k.body.id, 'llmTokens')).toBe(40);
    const refused = await t.call('POST', '/web/extract', { input: siteUrl, source: 'schema', schema }, k.body.secret);
    expect(refused.status).toBe(402);
    expect(refused.body.code).toBe('KeyCapReached');
    // Sources without an LLM are not held by the llmTokens cap.
    expect((await t.call('POST', '/web/extract', { input: siteUrl, source: 'page' }, k.body.secret)).status).toBe(200);
  });

  it("llmTokens: an agent's turn started with the key counts its gateway tokens toward it; the next turn is 402", async () => {
    const agent = await t.agent();
    const k = await mint({ name: 'talker', scopes: ['agents:write'], caps: { llmTokens: 40 } });
    expect(k.status).toBe(201);
    t.stub.push({ content: 'primera respuesta', usage: { prompt_tokens: 30, completion_tokens: 20 } });
    const turn = await t.message(agent.id, 'hola', k.body.secret);
    expect(turn.status).toBe(200);
    expect(turn.events.some((e) => e.type === 'chunk')).toBe(true);
    expect(await keyCounter(k.body.id, 'llmTokens')).toBe(50);
    const refused = await t.message(agent.id, 'otra vez', k.body.secret);
    expect(refused.status).toBe(402);
    expect(refused.events[0].code).toBe('KeyCapReached');
    const tried = await t.call('POST', `/agents/${agent.id}/try`, { text: 'y otra' }, k.body.secret);
    expect(tried.status).toBe(402);
    // The owner's turns are the account's alone: nothing more is counted toward the key.
    t.stub.push({ content: 'para el dueño', usage: { prompt_tokens: 5, completion_tokens: 5 } });
    const owner = await t.message(agent.id, 'soy el dueño');
    expect(owner.status).toBe(200);
    expect(owner.events.some((e) => e.type === 'error')).toBe(false);
    expect(await keyCounter(k.body.id, 'llmTokens')).toBe(50);
  }, 120_000);

  it('sandboxCpuSeconds: a sandbox the key created burns more than its cap; the next exec and create are 402', async () => {
    const k = await mint({ name: 'cpu', scopes: ['sandboxes:write'], caps: { sandboxCpuSeconds: 1 } });
    expect(k.status).toBe(201);
    const s = await t.call('POST', '/sandboxes', { timeoutSeconds: 120 }, k.body.secret);
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const id = s.body.id;
    await until(
      async () => (await t.call('GET', `/sandboxes/${id}`)).body,
      (b) => b.status === 'running',
      60_000,
    );
    // The shell spins until its own user time (field 14 of /proc/self/stat, in 1/100 s) passes 2 s,
    // however busy the host's cores are: twice the 1 s cap.
    const spin = 'i=0; while :; do i=$((i+1)); if [ $((i % 20000)) -eq 0 ] && [ "$(cut -d" " -f14 /proc/$$/stat)" -gt 200 ]; then break; fi; done; echo burnt';
    const burn = await t.call('POST', `/sandboxes/${id}/exec`, { command: spin, timeoutSeconds: 120 }, k.body.secret);
    expect(burn.status, JSON.stringify(burn.body)).toBe(200);
    expect(burn.body.stdout).toContain('burnt');
    const exec = await t.call('POST', `/sandboxes/${id}/exec`, { command: 'true' }, k.body.secret);
    expect(exec.status, JSON.stringify(exec.body)).toBe(402);
    expect(exec.body.code).toBe('KeyCapReached');
    expect(exec.body.cap).toBe('sandboxCpuSeconds');
    expect(exec.body.used).toBeGreaterThan(1);
    const create = await t.call('POST', '/sandboxes', { timeoutSeconds: 60 }, k.body.secret);
    expect(create.status).toBe(402);
    expect((await t.call('POST', `/sandboxes/${id}/resume`, {}, k.body.secret)).status).toBe(402);
    // The owner's key runs commands in the same sandbox; its CPU still counts toward the key that made it.
    const owner = await t.call('POST', `/sandboxes/${id}/exec`, { command: 'echo ok' });
    expect(owner.status).toBe(200);
    const before = await keyCounter(k.body.id, 'sandboxCpuMs');
    expect(before).toBeGreaterThan(1000);
    // Deleting is never refused; what it used up to then is counted.
    expect((await t.call('DELETE', `/sandboxes/${id}`, undefined, k.body.secret)).status).toBe(200);
    expect(await keyCounter(k.body.id, 'sandboxCpuMs')).toBeGreaterThanOrEqual(before);
    const mine = await t.call('POST', '/sandboxes', { timeoutSeconds: 60 });
    expect(mine.status).toBe(200);
    await t.call('DELETE', `/sandboxes/${mine.body.id}`);
  }, 120_000);
});
