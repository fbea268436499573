// A nube with sandboxes and an LLM stub (the agents' test nube) plus fleet helpers: a fleet agent,
// messages with its token, SSE reads, and the turn events published on the bus.
import { randomUUID } from 'node:crypto';
import type { BusEvent } from '../../src/platform/events.js';
import { type AgentNube, startAgentNube } from '../agents/helpers.js';
import type { LlmStub } from '../helpers/llm-stub.js';
import type { DialectName } from '../helpers/pg.js';

export interface FleetNube extends AgentNube {
  events: BusEvent[];
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  fleetAgent(body?: Record<string, unknown>): Promise<any>;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  stream(id: string, token: string, body: Record<string, unknown>): Promise<{ status: number; events: any[] }>;
  turnEvents(turnId: string): BusEvent[];
}

export const newGroup = () => `web-${randomUUID()}`;

export async function startFleetNube(
  name: string,
  opts: { dialect?: DialectName; env?: Record<string, string>; dataDir?: string; stub?: LlmStub } = {},
): Promise<FleetNube> {
  const t = await startAgentNube(`fleet-${name}`, { dialect: opts.dialect, dataDir: opts.dataDir, stub: opts.stub, env: { NUBE_FLEET_IDLE_SECONDS: '3600', ...opts.env } });
  const events: BusEvent[] = [];
  t.nube.deps.bus.subscribe((e) => {
    if (e.event.startsWith('turn.')) events.push(e);
  });
  return {
    ...t,
    events,
    async fleetAgent(body = {}) {
      const r = await t.call('POST', '/fleet-agents', { name: 'fleet', ...body });
      if (r.status !== 200) throw new Error(`fleet agent create answered ${r.status}: ${JSON.stringify(r.body)}`);
      return r.body;
    },
    async stream(id, token, body) {
      const r = await fetch(`${t.baseUrl}/api/v2/fleet-agents/${id}/message-stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const text = await r.text();
      if (r.status !== 200) return { status: r.status, events: [JSON.parse(text)] };
      const out = text
        .split('\n\n')
        .filter((b) => b.includes('data:'))
        .map((b) => JSON.parse(b.slice(b.indexOf('data:') + 5)));
      return { status: r.status, events: out };
    },
    turnEvents(turnId) {
      return events.filter((e) => e.data.turnId === turnId);
    },
    async stop() {
      const list = await t.call('GET', '/fleet-client-credentials');
      void list;
      await t.stop();
    },
  };
}
