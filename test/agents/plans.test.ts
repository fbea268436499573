// Plans and refusals at creation (on SQLite and PostgreSQL): simultaneous agents 403 PlanLimitReached,
// session length 402 SessionTooLong, LLM tokens 402 InsufficientBalance (Byte has none; also inside a
// turn: /message says so in its stream, /try answers 402), no upstream 503 LlmNotConfigured, goose
// 400 TemplateUnavailable where it is not provisioned, mcpServers on a non-ACP template 400.
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GOOSE } from '../../src/areas/sandboxes/runtime/namespaces/host-tools.js';
import { DIALECTS } from '../helpers/pg.js';
import { type AgentNube, startAgentNube } from './helpers.js';

describe.each(DIALECTS)('agents: plans and refusals (%s)', (dialect) => {
  let t: AgentNube;

  beforeAll(async () => {
    t = await startAgentNube(`plans-${dialect}`, { dialect });
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  it('refuses past the simultaneous agents allowance with 403 PlanLimitReached', async () => {
    const mega = await t.nube.services.account.createAccount({ name: 'mega', plan: 'mega' });
    // Eight agents' rows (building, never built): the allowance counts agents, not their sandboxes.
    const repo = t.nube.services.agents.core.repo;
    for (let i = 0; i < 8; i++) {
      const now = Date.now();
      await repo.insert({
        id: `agt_fake${i}_${mega.account.id}`,
        owner_id: mega.account.id,
        name: null,
        template: 'acp',
        status: 'lost',
        sandbox_id: null,
        embed_lookup: `x${i}`,
        embed_hash: `x${i}`,
        secrets_sealed: t.nube.deps.secretBox.seal('{"env":{},"mcpServers":[],"token":"x"}'),
        seed_files: '[]',
        timeout_seconds: 60,
        error: null,
        default_session_id: null,
        node_id: null,
        created_at: now,
        updated_at: now,
      });
    }
    const r = await t.call('POST', '/agents', { template: 'acp', env: {} }, mega.secret);
    expect(r.status).toBe(403);
    expect(r.body).toMatchObject({ code: 'PlanLimitReached', limit: 8, current: 8 });
    const usage = await t.call('GET', '/account/usage', undefined, mega.secret);
    expect(usage.body.simultaneousAgents).toMatchObject({ used: 8, limit: 8 });
  });

  it("refuses a timeoutSeconds above the plan's session length with 402 SessionTooLong", async () => {
    const mega = await t.nube.services.account.createAccount({ name: 'mega2', plan: 'mega' });
    const r = await t.call('POST', '/agents', { template: 'acp', env: {}, timeoutSeconds: 4 * 3600 + 1 }, mega.secret);
    expect(r.status).toBe(402);
    expect(r.body).toMatchObject({ code: 'SessionTooLong', limitSeconds: 14_400 });
  });

  it('refuses a Byte account (no LLM tokens) with 402 InsufficientBalance', async () => {
    const byte = await t.nube.services.account.createAccount({ name: 'byte', plan: 'byte' });
    const r = await t.call('POST', '/agents', { template: 'acp', env: {} }, byte.secret);
    expect(r.status).toBe(402);
    expect(r.body.code).toBe('InsufficientBalance');
  });

  it('answers goose with 400 TemplateUnavailable where it is not provisioned, an unknown template with 400, mcpServers on code-agent with 400', async () => {
    const g = await t.call('POST', '/agents', { template: 'goose', env: {} });
    if (existsSync(GOOSE.hostPath)) {
      // Provisioned here (test/agents/goose.test.ts drives it): accepted and building.
      expect(g.status).toBe(200);
      expect(g.body.status).toBe('building');
      await t.call('DELETE', `/agents/${g.body.id}`);
    } else {
      expect(g.status).toBe(400);
      expect(g.body.code).toBe('TemplateUnavailable');
      expect(g.body.error).toContain('scripts/install-goose.sh');
    }
    expect((await t.call('POST', '/agents', { template: 'nope', env: {} })).status).toBe(400);
    const m = await t.call('POST', '/agents', { template: 'code-agent', env: {}, mcpServers: [{ name: 'x', command: 'true' }] });
    expect(m.status).toBe(400);
    expect(m.body.issues[0].path).toEqual(['body', 'mcpServers']);
    expect((await t.call('POST', '/agents', { template: 'acp' })).status).toBe(400);
  });

  it('fails a turn past the allowance: /message streams the 402 error then done, /try answers 402', async () => {
    const mega = await t.nube.services.account.createAccount({ name: 'mega3', plan: 'mega' });
    const a = await t.agent({}, mega.secret);
    const ok = await t.call('POST', `/agents/${a.id}/try`, { text: 'hola' }, mega.secret);
    expect(ok.body.text).toBe('echo: hola');
    // The gateway refuses in the middle of a turn: the first completion (a tool call) spends the month.
    t.stub.push({ toolCalls: [{ name: 'shell', arguments: '{"command":"true"}' }], usage: { prompt_tokens: 10_000_000, completion_tokens: 1 } });
    const mid = await t.message(a.id, 'gasta todo', mega.secret);
    expect(mid.events.at(-2)).toEqual({ type: 'error', code: 'InsufficientBalance', message: expect.stringContaining('used up') });
    expect(mid.events.at(-1)).toEqual({ type: 'done', session: expect.stringMatching(/^ses_/) });
    // Then nube refuses before the agent is asked.
    const n = t.stub.requests.length;
    const m = await t.message(a.id, 'otra', mega.secret);
    expect(m.status).toBe(200);
    expect(m.events).toEqual([{ type: 'error', code: 'InsufficientBalance', message: expect.stringContaining('used up') }, { type: 'done', session: expect.stringMatching(/^ses_/) }]);
    const tr = await t.call('POST', `/agents/${a.id}/try`, { text: 'otra' }, mega.secret);
    expect(tr.status).toBe(402);
    expect(tr.body.code).toBe('InsufficientBalance');
    expect(t.stub.requests.length).toBe(n);
    expect((await t.call('DELETE', `/agents/${a.id}`, undefined, mega.secret)).status).toBe(200);
  });
});

describe('agents: a failed build', () => {
  it('shows lost with the reason in error', async () => {
    const t = await startAgentNube('failed-build');
    try {
      // `a` is written as a file, so `a/b` cannot be: the build fails while seeding the workspace.
      const seedFiles = [
        { name: 'a', contentBase64: 'eA==' },
        { name: 'a/b', contentBase64: 'eA==' },
      ];
      const c = await t.call('POST', '/agents', { template: 'acp', env: {}, seedFiles });
      expect(c.body.status).toBe('building');
      let g = await t.call('GET', `/agents/${c.body.id}`);
      for (let i = 0; i < 600 && g.body.status === 'building'; i++) {
        await new Promise((r) => setTimeout(r, 100));
        g = await t.call('GET', `/agents/${c.body.id}`);
      }
      expect(g.body).toMatchObject({ status: 'lost', error: expect.stringMatching(/^build failed: /) });
    } finally {
      await t.stop();
    }
  }, 120_000);
});

describe('agents: no LLM upstream', () => {
  it('answers 503 LlmNotConfigured naming the setting', async () => {
    const t = await startAgentNube('noupstream', { env: { NUBE_LLM_BASE_URL: '' } });
    try {
      const r = await t.call('POST', '/agents', { template: 'acp', env: {} });
      expect(r.status).toBe(503);
      expect(r.body.code).toBe('LlmNotConfigured');
      expect(r.body.error).toContain('NUBE_LLM_BASE_URL');
    } finally {
      await t.stop();
    }
  });
});
