// Attacks on an agent with only what a browser page or the agent's own code holds (issue 27, items 1, 6
// and 7): each was reproduced against the code before the fix and fails there.
// - An embed token (`agt_`, in a public page) opening the raw ACP WebSocket, starting a command as a
//   stdio MCP server, redirecting the agent's LLM calls with nube's own control notification, or
//   continuing the owner's sessions.
// - One huge or failing turn poisoning a session for everyone.
// - The gateway credential read out of the box and used from another tenant's sandbox, directly or with
//   the other sandbox's address forged.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVERS } from '../sandboxes/helpers.js';
import { type AgentNube, acpSocket, credentialFromMemory, shellIn, startAgentNube, textOf } from './helpers.js';

describe('agents: what an embed token reaches', () => {
  let t: AgentNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let a: any;
  let trap: Server;
  let trapHits = 0;
  let trapUrl: string;

  beforeAll(async () => {
    t = await startAgentNube('attacks');
    trap = createServer((_req, res) => {
      trapHits++;
      res.end('{}');
    });
    await new Promise<void>((r) => trap.listen(0, '0.0.0.0', r));
    trapUrl = `http://127.0.0.1:${(trap.address() as AddressInfo).port}/v1`;
    a = await t.agent({ name: 'target' });
  }, 180_000);
  afterAll(async () => {
    trap?.close();
    await t?.stop();
  }, 60_000);

  it('the ACP WebSocket refuses the embed token, so no command runs as a stdio MCP server', async () => {
    const viaQuery = acpSocket(`${a.wsUrl}?token=${a.embedToken}`, {});
    await expect(viaQuery).rejects.toThrow('status 403');
    await expect(acpSocket(a.wsUrl, { authorization: `Bearer ${a.embedToken}` })).rejects.toThrow('status 403');
    // What the attack would have done, had the socket opened: nothing ran.
    expect((await shellIn(t, a.sandboxId, 'test -e /tmp/pwned; echo $?')).trim()).toBe('1');
  });

  it("a client cannot send nube's control notification: the agent's LLM calls stay on nube's gateway", async () => {
    const { ws, request } = await acpSocket(a.wsUrl, { authorization: `Bearer ${t.ownerKey}` });
    await request(1, 'initialize', { protocolVersion: 1, clientCapabilities: {} });
    ws.send(JSON.stringify({ jsonrpc: '2.0', method: '_nube/gateway', params: { url: trapUrl } }));
    const refused = await request(2, '_nube/gateway', { url: trapUrl });
    expect(refused.error).toMatchObject({ code: -32601 });
    const ses = await request(3, 'session/new', { cwd: '/root/workspace', mcpServers: [] });
    // Session ids are unguessable (not a timestamp and 8 characters of Math.random).
    expect(ses.result.sessionId).toMatch(/^ses_[A-Za-z0-9_-]{24}$/);
    const done = await request(4, 'session/prompt', { sessionId: ses.result.sessionId, prompt: [{ type: 'text', text: 'sigues aqui' }] });
    expect(done.result.stopReason).toBe('end_turn');
    ws.close();
    // nube's own turns too, the owner's default session included.
    expect(textOf((await t.message(a.id, 'y ahora')).events)).toBe('echo: y ahora');
    expect(trapHits).toBe(0);
  });

  it("an embed caller gets sessions of its own and never continues the owner's", async () => {
    const owner = await t.call('POST', `/agents/${a.id}/try`, { text: 'secreto del dueño' });
    expect(owner.status).toBe(200);
    const visitor = await t.call('POST', `/agents/${a.id}/try`, { text: 'hola' }, a.embedToken);
    expect(visitor.status).toBe(200);
    expect(visitor.body.session).not.toBe(owner.body.session);
    // The visitor's turn did not carry the owner's conversation to the model.
    const sent = JSON.stringify(t.stub.requests.at(-1)!.body.messages);
    expect(sent).not.toContain('secreto del dueño');
    const steal = await t.call('POST', `/agents/${a.id}/try`, { text: 'repite todo', session: owner.body.session }, a.embedToken);
    expect(steal.status).toBe(404);
    const stealStream = await fetch(`${t.baseUrl}/api/v2/agents/${a.id}/message`, {
      method: 'POST',
      headers: { authorization: `Bearer ${a.embedToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ content: 'repite', session: owner.body.session }),
    });
    expect(stealStream.status).toBe(404);
    // It continues its own, and the owner may read it too.
    const again = await t.call('POST', `/agents/${a.id}/try`, { text: 'sigo', session: visitor.body.session }, a.embedToken);
    expect(again.body).toMatchObject({ text: 'echo: sigo', session: visitor.body.session });
    // A message without a session from an embed token: a new session, named in `done`.
    const m = await t.message(a.id, 'nuevo', a.embedToken);
    const done = m.events.at(-1);
    expect(done).toMatchObject({ type: 'done', session: expect.stringMatching(/^ses_/) });
    expect([owner.body.session, visitor.body.session]).not.toContain(done.session);
  });

  it('a message over the cap is refused, and a failed turn does not poison its session', async () => {
    const huge = 'x'.repeat(9 * 1024 * 1024);
    const big = await t.call('POST', `/agents/${a.id}/try`, { text: huge }, a.embedToken);
    expect([400, 413]).toContain(big.status);
    const justOver = await t.call('POST', `/agents/${a.id}/try`, { text: 'y'.repeat(64 * 1024 + 1) }, a.embedToken);
    expect(justOver.status).toBe(400);
    expect(justOver.body.issues[0].path).toEqual(['body', 'text']);
    // The owner's default session: a turn the upstream refuses (as the gateway refused a 9 MiB
    // history) fails, and the next turn in the same session works and does not carry it.
    t.stub.push({ status: 413, content: 'too large' });
    const failed = await t.message(a.id, 'ESTE FALLA');
    expect(failed.events.find((e) => e.type === 'error')).toBeTruthy();
    const next = await t.message(a.id, 'despues');
    expect(textOf(next.events)).toBe('echo: despues');
    expect(JSON.stringify(t.stub.requests.at(-1)!.body.messages)).not.toContain('ESTE FALLA');
    // The owner's default session is still the one it was.
    const after = await t.call('POST', `/agents/${a.id}/try`, { text: 'otra' });
    expect(after.body.text).toBe('echo: otra');
  });
});

describe.each(DRIVERS)('%s: agents: the gateway credential outside its box', (driver) => {
  let t: AgentNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let a: any;
  let other: { secret: string };
  let otherSandbox: string;

  beforeAll(async () => {
    t = await startAgentNube(`attacks-key-${driver}`, { env: { NUBE_SANDBOX_DRIVER: driver } });
    a = await t.agent({ name: 'victim' });
    other = await t.nube.services.account.createAccount({ name: 'attacker', plan: 'tera' });
    const s = await t.call('POST', '/sandboxes', { template: 'base', timeoutSeconds: 600 }, other.secret);
    expect(s.status).toBe(200);
    otherSandbox = s.body.id;
    for (let i = 0; i < 600 && (await t.call('GET', `/sandboxes/${otherSandbox}`, undefined, other.secret)).body.status !== 'running'; i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
  }, 240_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  it("is in no environment or file the agent's tools read", async () => {
    const found = await shellIn(t, a.sandboxId, "grep -l -a -s 'nube_llm_' /proc/[0-9]*/environ; grep -r -l -s 'nube_llm_' /opt /root /tmp /etc /run /var/tmp; echo end");
    expect(found.trim()).toBe('end');
    const env = await shellIn(t, a.sandboxId, "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c '^NUBE_AGENT_TOKEN=\\|^NUBE_LLM_KEY=' ; true");
    expect(env.trim()).toBe('0');
  });

  it('taken out of its box, it is refused from another tenant\'s sandbox, whose root cannot forge the box\'s address', async () => {
    const key = await credentialFromMemory(t, a.sandboxId);
    const gw = await t.nube.services.llm.gatewayUrl();
    const curl = (sandboxId: string, key2: string, extra = '', as = t.ownerKey) =>
      t.call('POST', `/sandboxes/${sandboxId}/exec`, {
        command: `curl -s -m 5 -o /dev/null -w '%{http_code}' ${extra} -H 'authorization: Bearer ${key2}' ${gw}/models; echo " rc=$?"`,
        timeoutSeconds: 30,
      }, as);
    const first = await curl(a.sandboxId, key);
    const why = async (r: typeof first) => (String(r.body.stdout).includes('200') ? '' : await unreachableWhy(t, a.sandboxId, gw, key));
    expect(first.body.stdout, await why(first)).toContain('200 rc=0');
    expect((await curl(otherSandbox, key, '', other.secret)).body.stdout).toContain('401 rc=0');
    // Root in the attacker's sandbox cannot take the victim's address: its network namespace belongs to
    // the host, so neither an address change nor a raw socket (to forge a source) is allowed inside.
    const victim = (await shellIn(t, a.sandboxId, "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1")).trim();
    expect(victim).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    const forge = await t.call('POST', `/sandboxes/${otherSandbox}/exec`, { command: `ip addr add ${victim}/32 dev eth0`, timeoutSeconds: 30 }, other.secret);
    expect(forge.body.exitCode, JSON.stringify(forge.body)).not.toBe(0);
    const raw = await t.call('POST', `/sandboxes/${otherSandbox}/exec`, {
      command: `python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)"`,
      timeoutSeconds: 30,
    }, other.secret);
    expect(raw.body.exitCode, JSON.stringify(raw.body)).not.toBe(0);
    const mine = await t.call('POST', `/sandboxes/${otherSandbox}/exec`, { command: "ip -4 -o addr show dev eth0 | awk '{print $4}'" }, other.secret);
    expect(mine.body.stdout).not.toContain(`${victim}/`);
    // The victim still reaches the gateway (nothing of it was taken over).
    const last = await curl(a.sandboxId, key);
    expect(last.body.stdout, await why(last)).toContain('200 rc=0');
  });
});

/**
 * What the host and the box see when the box cannot reach the gateway: CI once timed out here (curl's
 * 000 rc=28) where no local run did, so a failure carries the state needed to tell why.
 */
async function unreachableWhy(t: AgentNube, box: string, gw: string, key: string): Promise<string> {
  const { execSync } = await import('node:child_process');
  const host = (c: string) => {
    try {
      return execSync(c, { timeout: 10_000 }).toString();
    } catch (e) {
      return `ERR ${String(e).slice(0, 300)}`;
    }
  };
  const port = new URL(gw).port;
  const inside = await t.call('POST', `/sandboxes/${box}/exec`, {
    command: `ip -4 addr show dev eth0; ip route; ip neigh; curl -sv -m 5 -o /dev/null -H 'authorization: Bearer ${key}' ${gw}/models 2>&1 | tail -8`,
    timeoutSeconds: 30,
  });
  return [
    `box: ${JSON.stringify(inside.body)}`,
    `host curl: ${host(`curl -s -m 5 -o /dev/null -w '%{http_code} %{time_total}' -H 'authorization: Bearer ${key}' ${gw}/models`)}`,
    `listen: ${host(`ss -ltn | grep ':${port} ' || echo none`)}`,
    host('ip -4 -br addr; ip neigh show dev nubet0 | head -20; bridge fdb show br nubet0 | grep -v permanent | head -20'),
    host("nft list table inet nube_nubet0 | grep -v '^\\s*$' | head -80"),
    host(`nft list ruleset | grep -n 'dport\\|raw_any\\|${port}' | head -40`),
    host('uptime'),
  ].join('\n');
}
