// Issue 28 item 5 (documents): a generation cut by kill -9 showed `running` for its whole 120 s job
// lease before anything ran it again, and asked the LLM a second time even when its answer had already
// come. nube runs as a child process; each round cuts a generation (kill -9 or SIGTERM) and starts nube
// again on the same data and store: the generation resumes at once, ends `done` with its pages, never
// `failed`, and an answer that had arrived is used, not asked for again.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LlmStub, startLlmStub } from '../helpers/llm-stub.js';
import { type NubeProcess, nubeProcess } from '../helpers/nube-process.js';
import { DIALECTS } from '../helpers/pg.js';

const PAGES = JSON.stringify({ sections: [{ heading: 'Uno', body: 'primera página' }, { heading: 'Dos', body: 'segunda página' }] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(DIALECTS)('%s: a document generation cut by nube stopping', (dialect) => {
  let n: NubeProcess;
  let stub: LlmStub;

  beforeAll(async () => {
    stub = await startLlmStub();
    stub.respond = () => ({ content: PAGES });
    n = await nubeProcess(dialect, mkdtempSync(join(tmpdir(), 'nube-docs-kill-')), {
      NUBE_OWNER_PLAN: 'mega',
      NUBE_LLM_BASE_URL: stub.url,
      NUBE_LLM_API_KEY: 'sk-operator',
      NUBE_LLM_MODEL: 'op-model',
      NUBE_LLM_GATEWAY_PORT: '0',
      NUBE_SHUTDOWN_GRACE_MS: '500',
    });
    await n.start();
  }, 600_000);
  afterAll(async () => {
    await n?.close();
    await stub?.close();
  }, 120_000);

  /** Creates a document from a prompt; resolves once the LLM has its request. */
  async function generating(name: string): Promise<string> {
    const before = stub.requests.length;
    const r = await n.call('POST', '/documents', { name, prompt: `las páginas de ${name}` });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    for (let i = 0; stub.requests.length === before; i++) {
      if (i > 600) throw new Error('the LLM never got the request');
      await sleep(50);
    }
    return r.body.document?.id ?? r.body.id;
  }

  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  async function settled(id: string, ms: number): Promise<any> {
    const end = Date.now() + ms;
    for (;;) {
      const d = (await n.call('GET', `/documents/${id}`)).body;
      if (d.generation?.status === 'done' || d.generation?.status === 'failed') return d;
      if (Date.now() > end) throw new Error(`not settled within ${ms} ms: ${JSON.stringify(d.generation)}`);
      await sleep(100);
    }
  }

  it('kill -9 while the LLM writes: on restart the generation runs again at once, not after its 120 s lease', async () => {
    stub.push({ content: PAGES, delayMs: 5000 });
    const id = await generating('Corte');
    await n.stop('SIGKILL');
    await n.start();
    const t0 = Date.now();
    const d = await settled(id, 60_000);
    expect(Date.now() - t0).toBeLessThan(20_000);
    expect(d.generation).toMatchObject({ status: 'done', error: null });
    expect(d.pageCount).toBe(2);
  }, 600_000);

  it('SIGTERM while the LLM writes: the generation is queued again, never failed, and done after the restart', async () => {
    stub.push({ content: PAGES, delayMs: 5000 });
    const id = await generating('Parada');
    await n.stop('SIGTERM');
    await n.start();
    const d = await settled(id, 60_000);
    expect(d.generation).toMatchObject({ status: 'done', error: null });
    expect(d.pageCount).toBe(2);
  }, 600_000);

  it.runIf(dialect === 'postgres')('kill -9 after the answer came but before the pages were stored: the answer is used, the LLM asked once', async () => {
    // The test holds the document's row while the answer arrives, so nube has the answer and cannot
    // store the pages yet; nube is killed right there.
    const lock = new pg.Client({ connectionString: n.databaseUrl });
    await lock.connect();
    try {
      stub.push({ content: PAGES, delayMs: 1500 });
      // The request is at the LLM (which answers in 1.5 s): hold the row from now on.
      const docId = await generating('Respuesta');
      await lock.query('BEGIN');
      await lock.query('SELECT id FROM documents WHERE id = $1 FOR UPDATE', [docId]);
      const asked = stub.requests.length;
      // The answer is sent at 1.5 s; nube reads it, meters it, keeps it, and waits on the row.
      await sleep(4000);
      expect((await n.call('GET', `/documents/${docId}`)).body.generation.status).toBe('running');
      await n.stop('SIGKILL');
      // The killed process's write still waits in its server backend, which would commit it once the
      // row is free: end those backends first, as a crashed host's connections end.
      await lock.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');
      await lock.query('ROLLBACK');
      // The pages were not stored: the cut came between the answer and them.
      const row = await lock.query('SELECT generation_status FROM documents WHERE id = $1', [docId]);
      expect(row.rows[0].generation_status).toBe('running');
      await n.start();
      // Long enough for the job's lease to run out on a nube that cannot take it back at once.
      const d = await settled(docId, 180_000);
      expect(d.generation).toMatchObject({ status: 'done', error: null });
      expect(d.pageCount).toBe(2);
      expect(stub.requests.length).toBe(asked);
    } finally {
      await lock.end();
    }
  }, 600_000);
});
