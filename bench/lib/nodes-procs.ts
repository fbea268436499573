// bench/nodes over three nube OS processes (test/nodes/processes.ts): a sandbox on node 1; its `exec`
// sent to node 1 (local) and to node 0 (forwarded), interleaved; and the first event of an SSE stream
// served inside the sandbox, read through node 1's port proxy (direct) and through node 0 (forwarded).
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import { createRunning } from '../../test/sandboxes/helpers.js';
import { HEARTBEAT_MS, startProcessCluster } from '../../test/nodes/processes.js';
import { getStream, SSE_SERVER } from '../../test/nodes/sse-server.js';
import type { ResultRow } from './result.js';
import { round, summarize } from './stats.js';

/** The rows of an exec measured on the sandbox's node and through another node (same run, interleaved). */
export function execRows(prefix: string, local: number[], forwarded: number[]): ResultRow[] {
  const L = summarize(local);
  const F = summarize(forwarded);
  const overhead = F.p50Ms - L.p50Ms;
  return [
    { name: `${prefix}exec \`true\` on the node holding the sandbox`, p50Ms: round(L.p50Ms), p99Ms: round(L.p99Ms), throughputPerSec: round(1000 / L.meanMs) },
    {
      name: `${prefix}exec \`true\` sent to another node (forwarded)`,
      p50Ms: round(F.p50Ms),
      p99Ms: round(F.p99Ms),
      throughputPerSec: round(1000 / F.meanMs),
      overheadP50Ms: round(overhead),
      target: 'p50 overhead < 2 ms',
      pass: overhead < 2,
    },
  ];
}

export async function benchProcesses(samples: number): Promise<{ rows: ResultRow[]; notes: string[] }> {
  const c = await startProcessCluster({ env: { NUBE_LOG_LEVEL: 'silent' } });
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 4 });
  let id: string | undefined;
  try {
    await c.sql("UPDATE nodes SET state = 'cordoned' WHERE id <> 'proc-1'");
    await new Promise((r) => setTimeout(r, HEARTBEAT_MS * 3));
    id = (await createRunning(c.on(0), { timeoutSeconds: 900 })).id as string;
    await c.sql("UPDATE nodes SET state = 'active'");
    if ((await c.nodeOf('sandboxes', id)) !== 'proc-1') throw new Error('the sandbox is not on proc-1');
    const headers = { ...c.client.auth, 'content-type': 'application/json' };
    const body = JSON.stringify({ command: 'true' });
    const exec = async (n: number) => {
      const r = await request(`${c.nodes[n]!.baseUrl}/api/v2/sandboxes/${id}/exec`, { method: 'POST', headers, body, dispatcher: agent });
      const text = await r.body.text();
      if (r.statusCode !== 200) throw new Error(`exec on node ${n}: ${r.statusCode} ${text}`);
    };
    for (let i = 0; i < 20; i++) for (const n of [0, 1]) await exec(n);
    const local: number[] = [];
    const forwarded: number[] = [];
    for (let i = 0; i < samples; i++) {
      for (const n of i % 2 ? [1, 0] : [0, 1]) {
        const t0 = performance.now();
        await exec(n);
        (n === 1 ? local : forwarded).push(performance.now() - t0);
      }
    }

    // SSE: the server sends its first event at once (and, /tmp/sse-go present, the second right after).
    await c.on(1).call('POST', `/sandboxes/${id}/files/write`, { path: '/root/sse.py', content: SSE_SERVER });
    await c.on(1).call('POST', `/sandboxes/${id}/exec`, { command: 'touch /tmp/sse-go' });
    await c.on(1).call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 /root/sse.py' });
    await c.on(1).call('POST', `/sandboxes/${id}/expose`, { port: 9002 });
    const first = async (n: number) => {
      const port = c.nodes[n]!.port;
      const t0 = performance.now();
      const r = await getStream(port, `9002-${id}.sandbox.localhost:${port}`);
      if (r.status !== 200 || !r.body.startsWith('data: first')) throw new Error(`SSE via node ${n}: ${r.status} ${r.body.slice(0, 200)}`);
      return r.firstChunkAt - t0;
    };
    for (let tries = 0; ; tries++) {
      try {
        await first(1);
        break;
      } catch (e) {
        if (tries > 100) throw e;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const sseDirect: number[] = [];
    const sseForwarded: number[] = [];
    const sseSamples = Math.max(20, Math.round(samples / 3));
    for (let i = 0; i < sseSamples; i++) {
      for (const n of i % 2 ? [1, 0] : [0, 1]) (n === 1 ? sseDirect : sseForwarded).push(await first(n));
    }

    const SD = summarize(sseDirect);
    const SF = summarize(sseForwarded);
    return {
      rows: [
        ...execRows('processes: ', local, forwarded),
        { name: "processes: SSE first event through the sandbox's node (direct)", p50Ms: round(SD.p50Ms), p99Ms: round(SD.p99Ms) },
        {
          name: 'processes: SSE first event through another node (forwarded)',
          p50Ms: round(SF.p50Ms),
          p99Ms: round(SF.p99Ms),
          overheadP50Ms: round(SF.p50Ms - SD.p50Ms),
          ratio: round(SF.p50Ms / SD.p50Ms),
          ratioAgainst: 'SSE first event direct (p50 latency)',
        },
      ],
      notes: [
        `Processes: three \`nube serve\` processes (tsx) on one PostgreSQL, Redis and s3rver, as test/nodes/processes.ts starts them; ${samples} interleaved exec samples each way, ${sseSamples} SSE requests each way (a new request per sample, keep-alive client; the time to the first byte of the body).`,
      ],
    };
  } finally {
    if (id) await c.on(1).call('DELETE', `/sandboxes/${id}`).catch(() => {});
    await agent.close();
    await c.close();
  }
}
