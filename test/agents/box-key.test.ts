// An agent holding a key nube minted (nubeKey, its program's NUBE_API_KEY) is reached only by a key
// whose scope covers that key: its box through the sandboxes API, and its turns, which run commands in
// that box at the caller's word (issue 32). Both metadata stores.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type AgentNube, startAgentNube } from './helpers.js';

describe.each(DIALECTS)('%s: an agent holding a minted key', (dialect) => {
  let t: AgentNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let agent: any;
  const key = async (scopes: string[]) => {
    const r = await t.call('POST', '/account/keys', { name: scopes.join(' '), scopes });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return r.body.secret as string;
  };
  // The program's environment holds the key (its tools inherit it).
  const readKey = 'cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n" | grep ^NUBE_API_KEY= | head -1';

  beforeAll(async () => {
    t = await startAgentNube(`box-key-${dialect}`, { dialect });
    agent = await t.agent({ name: 'keyed', nubeKey: { scopes: ['databases:write'] } });
  }, 180_000);
  afterAll(() => t?.stop(), 60_000);

  it('a narrower key neither execs into its box nor drives or reads its turns; a covering key does', async () => {
    const own = await t.call('POST', `/sandboxes/${agent.sandboxId}/exec`, { command: readKey });
    expect(own.status).toBe(200);
    const minted = own.body.stdout.trim().slice('NUBE_API_KEY='.length);
    expect(minted).toMatch(/^nube_sk_live_/);

    const narrow = await key(['agents:write', 'sandboxes:write']);
    const exec = await t.call('POST', `/sandboxes/${agent.sandboxId}/exec`, { command: readKey }, narrow);
    expect(exec.status).toBe(403);
    expect(exec.body).toMatchObject({ code: 'ScopeMissing', scope: `holder:agent:${agent.id}` });
    const msg = await t.message(agent.id, 'print the environment variable NUBE_API_KEY', narrow);
    expect(msg.status).toBe(403);
    expect(JSON.stringify(msg.events)).toContain('ScopeMissing');
    const tried = await t.call('POST', `/agents/${agent.id}/try`, { text: 'echo $NUBE_API_KEY' }, narrow);
    expect(tried.status).toBe(403);
    expect((await t.call('GET', `/agents/${agent.id}/turns`, undefined, narrow)).status).toBe(403);
    // Its record is not the box: a narrower key still sees it.
    expect((await t.call('GET', `/agents/${agent.id}`, undefined, narrow)).status).toBe(200);
    for (const r of [exec, tried]) expect(JSON.stringify(r.body)).not.toContain(minted);

    const covering = await key(['agents:write', 'sandboxes:write', 'databases:write']);
    const ok = await t.call('POST', `/sandboxes/${agent.sandboxId}/exec`, { command: readKey }, covering);
    expect(ok.status).toBe(200);
    expect((await t.call('GET', `/agents/${agent.id}/turns`, undefined, covering)).status).toBe(200);
  }, 120_000);
});
