// An agent's message cut by the end of nube (issue 28 item 5), on both metadata stores: SIGKILL (a
// crash) mid-stream leaves the turn `failed` with code Interrupted and the text it had streamed so far
// (written as it streams, so a crash keeps it), saying it was cut; SIGTERM (an operator's stop) either
// lets the turn finish or ends it the same way, never as the agent's failure with nothing kept.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { spawnAgentNube } from './helpers.js';

const REPLY = 'uno dos tres cuatro cinco seis siete ocho nueve diez once doce trece catorce quince';

describe.each(DIALECTS)('agents: a message cut by the end of nube (%s)', (dialect) => {
  let n: Awaited<ReturnType<typeof spawnAgentNube>>;
  let agentId: string;

  beforeAll(async () => {
    n = await spawnAgentNube(`agent-kill-${dialect}`, { dialect });
    const c = await n.call('POST', '/agents', { template: 'acp', env: {} });
    expect(c.status).toBe(200);
    agentId = c.body.id;
    for (let i = 0; i < 1200 && (await n.call('GET', `/agents/${agentId}`)).body.status !== 'running'; i++) await sleep(100);
  }, 240_000);
  afterAll(async () => {
    await n?.call('DELETE', `/agents/${agentId}`).catch(() => {});
    await n?.remove();
  }, 120_000);

  for (const signal of ['SIGKILL', 'SIGTERM'] as const) {
    it(`${signal} mid-stream keeps what was streamed`, async () => {
      const text = `cuenta despacio ${signal}`;
      n.stub.push({ content: REPLY, chunkSize: 4, chunkDelayMs: 250 });
      const res = await fetch(`${n.base}/api/v2/agents/${agentId}/message`, {
        method: 'POST',
        headers: { authorization: `Bearer ${n.ownerKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ content: text }),
      });
      const reader = res.body!.getReader();
      let seen = '';
      while ((seen.match(/"chunk"/g) ?? []).length < 6) seen += new TextDecoder().decode((await reader.read()).value);
      await n.stop(signal);
      reader.cancel().catch(() => {});
      await n.start();
      const turns = (await n.call('GET', `/agents/${agentId}/turns`)).body.turns as { input: string; status: string; output: string; error: { code: string; message: string } | null }[];
      const turn = turns.find((x) => x.input === text)!;
      expect(turn).toBeDefined();
      if (turn.status === 'done') {
        expect(signal).toBe('SIGTERM');
        expect(turn.output).toBe(REPLY);
      } else {
        expect(turn).toMatchObject({ status: 'failed', error: { code: 'Interrupted', message: expect.stringContaining('cut') } });
        expect(turn.output.length).toBeGreaterThanOrEqual(8);
        expect(REPLY.startsWith(turn.output)).toBe(true);
      }
    }, 240_000);
  }
});
