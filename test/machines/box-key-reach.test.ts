// A box that holds a key nube minted (a machine's or agent's NUBE_API_KEY) is reached only by callers
// whose scope covers that key: a key scoped to sandboxes:write must not exec into the box and read a
// wider key (issue 32, privilege escalation). Every path that reaches the box is tried with a narrow key.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { upgradeStatus } from '../helpers/upgrade-status.js';
import {
  createRunning,
  type MachineNube,
  startMachineNube,
  stopMachineNube,
  TEMPLATE_WAIT_MS,
} from './helpers.js';

describe.each(DIALECTS)('%s: boxes holding a minted key', (dialect) => {
  let t: MachineNube;
  let machineId: string;
  let sandboxId: string;
  let minted: string;
  const key = async (scopes: string[]) => {
    const r = await t.call('POST', '/account/keys', { name: scopes.join(' '), scopes });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return r.body.secret as string;
  };

  beforeAll(async () => {
    t = await startMachineNube('box-key', dialect);
    const m = await createRunning(t, {
      tier: 'nano',
      nubeKey: { scopes: ['databases:write', 'account:read'] },
    });
    machineId = m.id;
    sandboxId = m.sandboxId;
    const own = await t.call('POST', `/sandboxes/${sandboxId}/exec`, { command: 'printenv NUBE_API_KEY' });
    expect(own.status, JSON.stringify(own.body)).toBe(200);
    minted = own.body.stdout.trim();
    expect(minted).toMatch(/^nube_sk_live_/);
  }, TEMPLATE_WAIT_MS);
  afterAll(() => stopMachineNube(t), 120_000);

  it('a key narrower than the box key reaches the box by no path: REST, MCP, terminal, SSH, fork, E2B', async () => {
    const narrow = await key(['sandboxes:write']);
    const refusals: [string, string, unknown?][] = [
      ['POST', `/sandboxes/${sandboxId}/exec`, { command: 'printenv NUBE_API_KEY' }],
      ['POST', `/sandboxes/${sandboxId}/run-code`, { lang: 'bash', code: 'printenv NUBE_API_KEY' }],
      ['POST', `/sandboxes/${sandboxId}/bg`, { command: 'printenv NUBE_API_KEY' }],
      ['POST', `/sandboxes/${sandboxId}/files/read`, { path: '/proc/1/environ' }],
      ['GET', `/sandboxes/${sandboxId}/files/read?path=/etc/hostname`],
      ['POST', `/sandboxes/${sandboxId}/fork`, {}],
      ['POST', `/sandboxes/${sandboxId}/snapshot`, {}],
      ['POST', `/sandboxes/${sandboxId}/ssh-enable`, {}],
      ['GET', `/sandboxes/${sandboxId}`],
    ];
    for (const [method, path, body] of refusals) {
      const r = await t.call(method, path, body, narrow);
      expect(r.status, `${method} ${path}: ${JSON.stringify(r.body)}`).toBe(403);
      expect(r.body.code).toBe('ScopeMissing');
      expect(r.body.scope).toBe(`holder:machine:${machineId}`);
      expect(JSON.stringify(r.body)).not.toContain(minted);
    }
    const ws = `${t.baseUrl.replace('http', 'ws')}/api/v2/sandboxes/${sandboxId}/terminal`;
    expect(await upgradeStatus(ws, { authorization: `Bearer ${narrow}` })).toBe(403);
    expect(await upgradeStatus(ws, { authorization: `Bearer ${t.ownerKey}` })).toBe(0);
    // E2B's control plane (which hands out the envd token) takes full owner keys only.
    const e2b = await fetch(`${t.baseUrl}/e2b/sandboxes/${sandboxId.replace('_', '-')}`, {
      headers: { 'x-api-key': narrow },
    });
    expect(e2b.status).toBe(403);
    expect(await e2b.text()).not.toContain('envdAccessToken');

    const client = new Client({ name: 'narrow', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${t.baseUrl}/api/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${narrow}` } },
      }),
    );
    const viaMcp = await client.callTool({
      name: 'sandboxes_exec',
      arguments: { id: sandboxId, command: 'printenv NUBE_API_KEY' },
    });
    expect(viaMcp.isError).toBe(true);
    expect((viaMcp.structuredContent as { code: string }).code).toBe('ScopeMissing');
    expect(JSON.stringify(viaMcp)).not.toContain(minted);
    await client.close();

    // The machine's own app code and logs are the box too; its status is not.
    const machinesOnly = await key(['machines:write']);
    expect((await t.call('GET', `/machines/${machineId}`, undefined, machinesOnly)).status).toBe(200);
    expect((await t.call('GET', `/machines/${machineId}/logs`, undefined, machinesOnly)).status).toBe(403);
  }, 120_000);

  it('a key that covers the box key, and the owner key, reach it as before', async () => {
    const covering = await key(['sandboxes:write', 'databases:write', 'account:read']);
    const r = await t.call(
      'POST',
      `/sandboxes/${sandboxId}/exec`,
      { command: 'printenv NUBE_API_KEY' },
      covering,
    );
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.stdout.trim()).toBe(minted);
    // Any scope beyond the narrow key's is not enough: it must cover every operation of the box's key.
    const partly = await key(['sandboxes:write', 'databases:write']);
    expect((await t.call('POST', `/sandboxes/${sandboxId}/exec`, { command: 'true' }, partly)).status).toBe(
      403,
    );
    expect((await t.call('GET', '/sandboxes', undefined, partly)).status).toBe(200);
  }, 60_000);

  it("a fork of the box (which copies its environment and disk) is guarded by the parent's key", async () => {
    const f = await t.call('POST', `/sandboxes/${sandboxId}/fork`, {});
    expect(f.status, JSON.stringify(f.body)).toBe(200);
    const child = (f.body.sandboxes?.[0] ?? f.body).id as string;
    expect(child).toMatch(/^sbx_/);
    const owner = await t.call('POST', `/sandboxes/${child}/exec`, { command: 'printenv NUBE_API_KEY' });
    expect(owner.body.stdout.trim()).toBe(minted);
    const narrow = await key(['sandboxes:write']);
    const r = await t.call('POST', `/sandboxes/${child}/exec`, { command: 'printenv NUBE_API_KEY' }, narrow);
    expect(r.status).toBe(403);
    expect(r.body.code).toBe('ScopeMissing');
    // The copy it holds is bound to the parent's box: from the fork's own address it is refused.
    const fromFork = await t.call('POST', `/sandboxes/${child}/exec`, { command: boxCurl('/api/v2/account') });
    expect(fromFork.body.stdout, JSON.stringify(fromFork.body)).toContain('401 rc=0');
    expect((await t.call('DELETE', `/sandboxes/${child}`)).status).toBe(200);
  }, 120_000);

  it('from its own box the key reaches nube through NUBE_BASE_URL (the box API), within its scope; elsewhere it is 401', async () => {
    const base = (await t.call('POST', `/sandboxes/${sandboxId}/exec`, { command: 'printenv NUBE_BASE_URL' })).body.stdout.trim();
    const host = await t.nube.services.sandboxes.hostNetwork.hostAddress();
    expect(base).toMatch(new RegExp(`^http://${host.replaceAll('.', '\\.')}:\\d+$`));
    const run = async (path: string) => (await t.call('POST', `/sandboxes/${sandboxId}/exec`, { command: boxCurl(path) })).body.stdout as string;
    expect(await run('/api/v2/account')).toContain('200 rc=0');
    const beyond = await run('/api/v2/sandboxes');
    expect(beyond).toContain('403 rc=0');
    expect(beyond).toContain('ScopeMissing');
    // The same key from the host, on the public listener or the box API: as if unknown.
    expect((await t.call('GET', '/account', undefined, minted)).status).toBe(401);
    expect((await fetch(`${base}/api/v2/account`, { headers: { authorization: `Bearer ${minted}` } })).status).toBe(401);
  }, 120_000);
});

/** A call from inside a box with its own NUBE_API_KEY and NUBE_BASE_URL: the body, then status and curl's exit code. */
function boxCurl(path: string): string {
  return `curl -s -m 30 -w '\\n%{http_code}' -H "Authorization: Bearer $NUBE_API_KEY" "$NUBE_BASE_URL${path}"; echo " rc=$?"`;
}
