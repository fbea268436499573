// The box API (issue 32): an agent's minted NUBE_API_KEY reaches nube from its own box, through the
// listener on the sandbox bridge that NUBE_BASE_URL names, within its scope; read out of the box it is
// refused everywhere else (the public listener, another sandbox), and a revived box's new address takes
// it. The box API takes no other credential. Both metadata stores.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type AgentNube, shellIn, startAgentNube } from './helpers.js';

describe.each(DIALECTS)('%s: the box API', (dialect) => {
  let t: AgentNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let agent: any;
  let other: string;
  let minted: string;
  let base: string;
  // The agent program's environment holds the key (exec's commands do not inherit it).
  const envOf = async (sandboxId: string, name: string) =>
    (
      await shellIn(
        t,
        sandboxId,
        `cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n" | grep ^${name}= | head -1 | cut -d= -f2-`,
      )
    ).trim();
  /** An HTTP call from inside a box: status and body. */
  const curl = async (sandboxId: string, key: string, path: string, extra = '') => {
    const out = await shellIn(
      t,
      sandboxId,
      `curl -s -m 30 -w '\\n%{http_code}' ${extra} -H 'authorization: Bearer ${key}' '${base}${path}'; echo " rc=$?"`,
    );
    const lines = out.trimEnd().split('\n');
    const [status, rc] = lines.pop()!.split(' ');
    expect(rc, out).toBe('rc=0');
    const text = lines.join('\n');
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {}
    // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
    return { status: Number(status), body: body as any };
  };

  beforeAll(async () => {
    t = await startAgentNube(`box-api-${dialect}`, { dialect });
    agent = await t.agent({ name: 'keyed', nubeKey: { scopes: ['databases:write'] } });
    const s = await t.call('POST', '/sandboxes', { template: 'base', timeoutSeconds: 600 });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    other = s.body.id;
    for (let i = 0; i < 600 && (await t.call('GET', `/sandboxes/${other}`)).body.status !== 'running'; i++)
      await new Promise((r) => setTimeout(r, 100));
    minted = await envOf(agent.sandboxId, 'NUBE_API_KEY');
    base = await envOf(agent.sandboxId, 'NUBE_BASE_URL');
  }, 240_000);
  afterAll(() => t?.stop(), 60_000);

  it('NUBE_BASE_URL is the box API on the bridge; from its box the key works within its scope', async () => {
    expect(minted).toMatch(/^nube_sk_live_/);
    const host = await t.nube.services.sandboxes.hostNetwork.hostAddress();
    expect(base).toMatch(new RegExp(`^http://${host.replaceAll('.', '\\.')}:\\d+$`));
    expect(base).not.toBe(t.baseUrl);

    const made = await curl(
      agent.sandboxId,
      minted,
      '/api/v2/databases',
      `-X POST -H 'content-type: application/json' -d '{"name":"from-box"}'`,
    );
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const list = await curl(agent.sandboxId, minted, '/api/v2/databases');
    expect(list.status).toBe(200);
    expect(JSON.stringify(list.body)).toContain('from-box');
    const beyond = await curl(agent.sandboxId, minted, '/api/v2/sandboxes');
    expect(beyond.status).toBe(403);
    expect(beyond.body).toMatchObject({ code: 'ScopeMissing' });
    // MCP through the box API: its tool calls replay from the same box.
    const mcp = await curl(
      agent.sandboxId,
      minted,
      '/api/mcp',
      `-X POST -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"databases_list","arguments":{}}}'`,
    );
    expect(mcp.status, JSON.stringify(mcp.body)).toBe(200);
    expect(mcp.body.result?.isError, JSON.stringify(mcp.body)).toBe(false);
    expect(JSON.stringify(mcp.body)).toContain('from-box');
  }, 120_000);

  it('read out of its box, the key is refused as unknown: on the public listener, from the host, from another sandbox', async () => {
    const publicListener = await t.call('GET', '/databases', undefined, minted);
    expect(publicListener.status).toBe(401);
    expect(publicListener.body).toMatchObject({ code: 'Unauthorized' });
    const fromHost = await fetch(`${base}/api/v2/databases`, {
      headers: { authorization: `Bearer ${minted}` },
    });
    expect(fromHost.status).toBe(401);
    const fromOther = await curl(other, minted, '/api/v2/databases');
    expect(fromOther.status).toBe(401);
    expect(fromOther.body).toMatchObject({ code: 'Unauthorized' });
    // Nor can it mint itself a key free of its box (this one may not create keys; the account checks
    // that a held key's children keep its holder: test/platform/scoped-keys-store.test.ts).
    expect(
      (
        await curl(
          agent.sandboxId,
          minted,
          '/api/v2/account/keys',
          `-X POST -H 'content-type: application/json' -d '{"name":"x","scopes":["databases:read"]}'`,
        )
      ).status,
    ).toBe(403);
  }, 120_000);

  it('the box API takes only minted keys: an owner key, another scoped key or none is refused there', async () => {
    const owner = await curl(agent.sandboxId, t.ownerKey, '/api/v2/databases');
    expect(owner.status).toBe(401);
    const scoped = (await t.call('POST', '/account/keys', { name: 'db', scopes: ['databases:read'] })).body
      .secret as string;
    expect((await curl(other, scoped, '/api/v2/databases')).status).toBe(401);
    const none = await shellIn(
      t,
      other,
      `curl -s -m 30 -o /dev/null -w '%{http_code}' '${base}/api/v2/databases'`,
    );
    expect(none.trim()).toBe('401');
    // Only the REST API and MCP: not the console, E2B, libSQL or the health check.
    expect((await curl(agent.sandboxId, minted, '/healthz')).status).toBe(404);
  }, 120_000);

  it("after a revive, the key works from the agent's new box and no longer from the old address", async () => {
    const r = await t.call('POST', `/agents/${agent.id}/revive`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.sandboxId).not.toBe(agent.sandboxId);
    expect(await envOf(r.body.sandboxId, 'NUBE_API_KEY')).toBe(minted);
    expect(await envOf(r.body.sandboxId, 'NUBE_BASE_URL')).toBe(base);
    expect((await curl(r.body.sandboxId, minted, '/api/v2/databases')).status).toBe(200);
    expect((await curl(other, minted, '/api/v2/databases')).status).toBe(401);
    // Deleting the agent revokes the key: its box is gone, and the key with it.
    expect((await t.call('DELETE', `/agents/${agent.id}`)).status).toBe(200);
    expect((await t.call('GET', '/databases', undefined, minted)).status).toBe(401);
  }, 180_000);
});
