// The end users of one fleet agent are strangers (issue 27 item 2): a conversation never sees another
// conversation's files, sessions, processes or credentials. Two web conversations of one fleet agent;
// the first leaves a secret in what it said, in a file, in a running process and in its configuration
// group's MCP connector headers; the second's model then reads everything its shell tool can reach.
// Before boxes were per conversation the second ran on the first's box and read all of it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FleetNube, newGroup, startFleetNube } from './helpers.js';

describe('fleet: conversations are strangers', () => {
  let t: FleetNube;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let fa: any;
  let crm: string;

  beforeAll(async () => {
    t = await startFleetNube('isolation', { env: { NUBE_FLEET_SPARE_BOXES: '1' } });
    const group = await t.call('POST', '/fleet-config-groups', {
      name: 'crm',
      mcpServers: [{ name: 'crm', type: 'http', url: 'http://127.0.0.1:9/mcp', headers: { authorization: 'Bearer CRM-SECRET-77' } }],
    });
    expect(group.status).toBe(200);
    fa = await t.fleetAgent({ name: 'Extraños', capacity: 3 });
    crm = group.body.id;
  }, 180_000);
  afterAll(async () => {
    await t?.stop();
  }, 60_000);

  const send = (groupId: string, text: string, configGroupId?: string) =>
    t.call('POST', `/fleet-agents/${fa.id}/message`, { groupId, text, ...(configGroupId ? { configGroupId } : {}) }, fa.token);
  const shell = (command: string) => `call shell ${JSON.stringify({ command })}`;

  it("a second conversation's shell finds nothing of the first's", async () => {
    const a = newGroup();
    const b = newGroup();
    expect((await send(a, 'mi clave es ZORRO-42', crm)).status).toBe(200);
    const left = await send(a, shell('echo ZORRO-42 > /root/workspace/secreto.txt; nohup sh -c "exec sleep 600 # ZORRO-42" >/dev/null 2>&1 & echo listo'), crm);
    expect(left.body.reply).toContain('listo');
    const look = await send(
      b,
      shell(
        'cat /root/.nube-agent/sessions/*.json /root/workspace/* 2>/dev/null; ps -eo args; ' +
          "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; grep -r -l -s -e ZORRO -e CRM-SECRET /root /tmp /opt /etc; echo fin",
      ),
    );
    expect(look.status).toBe(200);
    expect(look.body.reply).toContain('fin');
    for (const secret of ['ZORRO-42', 'CRM-SECRET-77', 'nube_llm_']) expect(look.body.reply).not.toContain(secret);
    // Each ran in a box of its own, bound to it.
    const boxes = await t.nube.deps.store.db.selectFrom('fleet_boxes').selectAll().where('fleet_agent_id', '=', fa.id).execute();
    const of = (g: string) => boxes.find((x) => x.group_id === g);
    expect(of(a)).toBeDefined();
    expect(of(b)).toBeDefined();
    expect(of(a)!.agent_id).not.toBe(of(b)!.agent_id);
    // The first conversation still has what it left (its box is its own, and still there).
    const mine = await send(a, shell('cat /root/workspace/secreto.txt'));
    expect(mine.body.reply).toContain('ZORRO-42');
  }, 180_000);

  it('a box is never handed to a second conversation: at capacity the idlest box is destroyed, not reused', async () => {
    const small = await t.fleetAgent({ name: 'Uno', capacity: 1 });
    const say = (groupId: string, text: string) => t.call('POST', `/fleet-agents/${small.id}/message`, { groupId, text }, small.token);
    const a = newGroup();
    expect((await say(a, shell('echo RASTRO-9 > /root/workspace/r.txt; echo ok'))).body.reply).toContain('ok');
    const db = t.nube.deps.store.db;
    const first = await db.selectFrom('fleet_boxes').selectAll().where('fleet_agent_id', '=', small.id).execute();
    expect(first.map((x) => x.group_id)).toEqual([a]);
    const b = newGroup();
    const r = await say(b, shell('cat /root/workspace/r.txt 2>&1; echo fin'));
    expect(r.body.reply).toContain('fin');
    expect(r.body.reply).not.toContain('RASTRO-9');
    const second = await db.selectFrom('fleet_boxes').selectAll().where('fleet_agent_id', '=', small.id).execute();
    expect(second.map((x) => x.group_id)).toEqual([b]);
    expect(second[0]!.agent_id).not.toBe(first[0]!.agent_id);
    // The first box's agent (and sandbox) are gone.
    await expect.poll(async () => (await t.call('GET', `/agents/${first[0]!.agent_id}`)).status, { timeout: 30_000 }).toBe(404);
    // The first conversation comes back to a fresh box, with its transcript.
    const back = await say(a, 'sigo aqui');
    expect(back.status).toBe(200);
  }, 180_000);
});
