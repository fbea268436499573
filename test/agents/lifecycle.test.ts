// Lost and revived agents, and agents across a restart of nube, on both sandbox drivers: a deleted or
// expired sandbox makes the agent `lost`; a message revives it on its own; /revive answers the same id
// and URL on a fresh disk; a restarted nube reconnects to the running agent and its session goes on.
import { mkdirSync, rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { startLlmStub } from '../helpers/llm-stub.js';
import { DRIVERS, TEST_ROOT } from '../sandboxes/helpers.js';
import { startAgentNube, textOf } from './helpers.js';

describe.each(DRIVERS)('%s: agents lifecycle', (driver) => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('becomes lost when its sandbox disappears; a message revives it; /revive gives a fresh disk', async () => {
    const t = await startAgentNube(`life-${driver}`, { env: { NUBE_SANDBOX_DRIVER: driver } });
    try {
      const a = await t.agent();
      const first = a.sandboxId;
      expect((await t.call('POST', `/sandboxes/${first}/files/write`, { path: '/root/workspace/old.txt', content: 'x' })).status).toBe(200);
      expect((await t.call('DELETE', `/sandboxes/${first}`)).status).toBe(200);
      const lost = await t.call('GET', `/agents/${a.id}`);
      expect(lost.body).toMatchObject({ status: 'lost', error: expect.stringContaining('sandbox is gone') });

      const m = await t.message(a.id, 'sigues ahi');
      expect(textOf(m.events)).toBe('echo: sigues ahi');
      const revived = await t.call('GET', `/agents/${a.id}`);
      expect(revived.body.status).toBe('running');
      expect(revived.body.sandboxId).not.toBe(first);

      const r = await t.call('POST', `/agents/${a.id}/revive`);
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ agentId: a.id, sandboxId: expect.stringMatching(/^sbx_/), status: 'running', wsUrl: a.wsUrl });
      expect(r.body.sandboxId).not.toBe(revived.body.sandboxId);
      const ls = await t.call('POST', `/sandboxes/${r.body.sandboxId}/exec`, { command: 'ls /root/workspace' });
      expect(ls.body.stdout).not.toContain('old.txt');
      expect((await t.call('POST', `/agents/${a.id}/try`, { text: 'de nuevo' })).body.text).toBe('echo: de nuevo');
      // Its sandbox goes away while nube still holds the connection: the next message revives it anyway.
      expect((await t.call('DELETE', `/sandboxes/${r.body.sandboxId}`)).status).toBe(200);
      const m2 = await t.message(a.id, 'otra vez');
      expect(textOf(m2.events)).toBe('echo: otra vez');
      expect((await t.call('GET', `/agents/${a.id}`)).body.sandboxId).not.toBe(r.body.sandboxId);
    } finally {
      await t.stop();
    }
  }, 180_000);

  it('starts the agent program again, on the same disk, when it ended in a living sandbox', async () => {
    const t = await startAgentNube(`prog-${driver}`, { env: { NUBE_SANDBOX_DRIVER: driver } });
    try {
      const a = await t.agent();
      const s = (await t.call('POST', `/agents/${a.id}/try`, { text: 'antes', reset: true })).body.session;
      // A tool whose program exits without reading its stdin (this crashed the agent once: EPIPE).
      expect(textOf((await t.message(a.id, 'call shell {"command":"true"}')).events)).toContain('exit code 0');
      const bg = await t.call('GET', `/sandboxes/${a.sandboxId}/bg`);
      const prog = bg.body.processes.find((p: { command: string; state: string }) => p.command.includes('agent.js') && p.state === 'running');
      expect((await t.call('DELETE', `/sandboxes/${a.sandboxId}/bg/${prog.execId}?graceSeconds=0`)).status).toBe(200);
      const after = await t.call('POST', `/agents/${a.id}/try`, { text: 'despues', session: s });
      expect(after.status).toBe(200);
      expect(after.body.text).toBe('echo: despues');
      expect((await t.call('GET', `/agents/${a.id}`)).body).toMatchObject({ status: 'running', sandboxId: a.sandboxId });
      // Its sessions were on disk: the restarted program still had the first turn in context.
      expect(t.stub.requests.at(-1)!.body.messages.map((m) => m.content)).toContain('antes');
      // The program ends while a turn is being sent to it (nube's link to it not yet seen closed): the
      // turn is answered all the same, by the program started again, never a 502; or, when the program
      // ended in the middle of its answer, with what it had said and an error saying it was cut.
      const bg2 = await t.call('GET', `/sandboxes/${a.sandboxId}/bg`);
      const prog2 = bg2.body.processes.find((p: { command: string; state: string }) => p.command.includes('agent.js') && p.state === 'running');
      const [killed, raced] = await Promise.all([
        t.call('DELETE', `/sandboxes/${a.sandboxId}/bg/${prog2.execId}?graceSeconds=0`),
        t.call('POST', `/agents/${a.id}/try`, { text: 'durante', session: s }),
      ]);
      expect(killed.status).toBe(200);
      expect(raced.status, JSON.stringify(raced.body)).toBe(200);
      if (raced.body.text !== 'echo: durante') {
        expect('echo: durante'.startsWith(raced.body.text), raced.body.text).toBe(true);
        expect(raced.body.error, JSON.stringify(raced.body)).toEqual(expect.any(String));
      }
      const next = await t.call('POST', `/agents/${a.id}/try`, { text: 'luego', session: s });
      expect(next.status, JSON.stringify(next.body)).toBe(200);
      expect(next.body.text).toBe('echo: luego');
    } finally {
      await t.stop();
    }
  }, 180_000);

  it('survives a restart of nube: the agent keeps running and its session keeps its context', async () => {
    const stub = await startLlmStub();
    const dir = `${TEST_ROOT}/agents-restart-${driver}-${process.pid}`;
    dirs.push(dir);
    mkdirSync(dir, { recursive: true });
    const env = { NUBE_SANDBOX_DRIVER: driver };
    let t = await startAgentNube(`restart-${driver}`, { env, dataDir: dir, stub });
    const a = await t.agent();
    const s = (await t.call('POST', `/agents/${a.id}/try`, { text: 'recuerda esto', reset: true })).body.session;
    await t.close(); // nube stops; sandboxes and the agent process keep running
    t = await startAgentNube(`restart-${driver}`, { env: { ...env, NUBE_OWNER_KEY: t.ownerKey }, dataDir: dir, stub });
    try {
      const g = await t.call('GET', `/agents/${a.id}`);
      expect(g.body).toMatchObject({ status: 'running', sandboxId: a.sandboxId });
      const again = await t.call('POST', `/agents/${a.id}/try`, { text: 'y ahora', session: s });
      expect(again.status).toBe(200);
      expect(again.body.text).toBe('echo: y ahora');
      // The same ACP session: the agent still had the first turn in its context.
      expect(stub.requests.at(-1)!.body.messages.map((m) => m.content)).toContain('recuerda esto');
    } finally {
      await t.stop();
      await stub.close();
    }
  }, 180_000);
});
