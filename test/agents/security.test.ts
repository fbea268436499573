// The issue's security list, each a test: the agent's sandbox reaches the LLM gateway and nothing else
// of the host (nube's API port included); the gateway credential has no owner rights and dies with the
// agent; another owner's agent is a 404; agent A's embed token on B is a 403; seed names cannot escape.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVERS } from '../sandboxes/helpers.js';
import { type AgentNube, credentialFromMemory, startAgentNube, textOf } from './helpers.js';

describe.each(DRIVERS)('%s: agents security', (driver) => {
  let t: AgentNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let a: any;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let b: any;
  let hostServer: Server;
  let hostPort: number;
  let apiPort: number;
  const exec = async (sandboxId: string, command: string) =>
    (await t.call('POST', `/sandboxes/${sandboxId}/exec`, { command, timeoutSeconds: 30 })).body;
  const agentKey = (sandboxId: string) => credentialFromMemory(t, sandboxId);
  const gatewayUrl = () => t.nube.services.llm.gatewayUrl();

  beforeAll(async () => {
    // nube listens on every address here, so its API port is on the bridge's host address too.
    t = await startAgentNube(`sec-${driver}`, { env: { NUBE_SANDBOX_DRIVER: driver, NUBE_HOST: '0.0.0.0' } });
    apiPort = Number(new URL(t.baseUrl).port);
    hostServer = createServer((_req, res) => res.end('host service'));
    await new Promise<void>((r) => hostServer.listen(0, '0.0.0.0', r));
    hostPort = (hostServer.address() as AddressInfo).port;
    [a, b] = await Promise.all([t.agent({ name: 'a' }), t.agent({ name: 'b' })]);
  }, 180_000);
  afterAll(async () => {
    hostServer?.close();
    await t?.stop();
  }, 60_000);

  it("the agent's sandbox reaches the gateway and nothing else of the host", async () => {
    const gw = new URL(await gatewayUrl());
    const key = await agentKey(a.sandboxId);
    expect(key).toMatch(/^nube_llm_/);
    const curl = (url: string, extra = '') => exec(a.sandboxId, `curl -s -m 5 -o /dev/null -w '%{http_code}' ${extra} ${url}; echo " rc=$?"`);
    const ok = await curl(`${gw.origin}/v1/models`, `-H 'authorization: Bearer ${key}'`);
    expect(ok.stdout).toContain('200 rc=0');
    // nube's API on the same host address: refused by the firewall, with any credential.
    const api = await curl(`http://${gw.hostname}:${apiPort}/api/v2/account`, `-H 'authorization: Bearer ${key}'`);
    expect(api.stdout).not.toMatch(/^(200|401|404)/);
    expect(api.stdout).toMatch(/rc=(7|28)/);
    const other = await curl(`http://${gw.hostname}:${hostPort}/`);
    expect(other.stdout).toMatch(/rc=(7|28)/);
    // The gateway listener serves the gateway only; the credential is not an API credential.
    const onGateway = await curl(`${gw.origin}/api/v2/account`, `-H 'authorization: Bearer ${t.ownerKey}'`);
    expect(onGateway.stdout).toContain('404 rc=0');
    expect((await t.call('GET', '/account', undefined, key)).status).toBe(401);
  });

  it("another owner's agent is a 404; agent A's embed token on B is a 403 and on other routes too", async () => {
    const other = await t.nube.services.account.createAccount({ name: 'other', plan: 'tera' });
    for (const [m, p] of [
      ['GET', `/agents/${a.id}`],
      ['DELETE', `/agents/${a.id}`],
      ['POST', `/agents/${a.id}/revive`],
    ] as const) {
      expect((await t.call(m, p, undefined, other.secret)).status).toBe(404);
    }
    expect((await t.call('POST', `/agents/${a.id}/try`, { text: 'x' }, other.secret)).status).toBe(404);
    expect((await t.call('GET', '/agents', undefined, other.secret)).body.agents).toEqual([]);

    // A's token works on A's message, try and GET.
    expect((await t.call('GET', `/agents/${a.id}`, undefined, a.embedToken)).status).toBe(200);
    const tried = await t.call('POST', `/agents/${a.id}/try`, { text: 'desde el navegador' }, a.embedToken);
    expect(tried.body.text).toBe('echo: desde el navegador');
    expect(tried.headers.get('access-control-allow-origin')).toBe('*');
    const m = await t.message(a.id, 'hola', a.embedToken);
    expect(textOf(m.events)).toBe('echo: hola');
    // ... and on nothing else.
    expect((await t.call('GET', `/agents/${b.id}`, undefined, a.embedToken)).status).toBe(403);
    expect((await t.call('POST', `/agents/${b.id}/try`, { text: 'x' }, a.embedToken)).status).toBe(403);
    expect((await t.message(b.id, 'x', a.embedToken)).status).toBe(403);
    expect((await t.call('GET', '/agents', undefined, a.embedToken)).status).toBe(403);
    expect((await t.call('DELETE', `/agents/${a.id}`, undefined, a.embedToken)).status).toBe(403);
    expect((await t.call('POST', `/agents/${a.id}/revive`, undefined, a.embedToken)).status).toBe(403);
    expect((await t.call('GET', `/sandboxes/${a.sandboxId}`, undefined, a.embedToken)).status).toBe(403);
    expect((await t.call('GET', '/account', undefined, a.embedToken)).status).toBe(403);
    // CORS preflight for browsers.
    const pre = await fetch(`${t.baseUrl}/api/v2/agents/${a.id}/message`, {
      method: 'OPTIONS',
      headers: { origin: 'https://example.com', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization' },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get('access-control-allow-origin')).toBe('*');
  });

  it("a deleted agent's gateway credential and embed token are refused", async () => {
    const c = await t.agent({ name: 'doomed' });
    const key = await agentKey(c.sandboxId);
    expect(await t.nube.services.llm.resolveCredential(key)).toMatchObject({ subject: `agent:${c.id}` });
    expect((await t.call('DELETE', `/agents/${c.id}`)).status).toBe(200);
    expect(await t.nube.services.llm.resolveCredential(key)).toBeNull();
    expect((await t.call('GET', `/agents/${c.id}`, undefined, c.embedToken)).status).toBe(401);
    expect((await t.call('GET', `/sandboxes/${c.sandboxId}`)).status).toBe(404);
  });

  it('refuses seed file names with .. or absolute paths', async () => {
    for (const name of ['../escape.txt', '/etc/passwd', 'a/../../b', 'ok/./x', 'a//b']) {
      const r = await t.call('POST', '/agents', { template: 'acp', env: {}, seedFiles: [{ name, contentBase64: 'aGk=' }] });
      expect(r.status, name).toBe(400);
      expect(r.body.issues[0].path).toEqual(['body', 'seedFiles', 0, 'name']);
    }
  });
});
