import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { operations } from '../../src/areas/index.js';
import { type AnyOperation, fillPath } from '../../src/platform/operation.js';
import { API_PREFIX } from '../../src/platform/rest.js';
import { DIALECTS } from '../helpers/pg.js';
import { caller, json, startNube, type TestNube } from '../helpers/server.js';

// Hostile input gets one answer on both metadata stores: a NUL (U+0000) in a path id is a 404, in a
// query parameter or a body field a 400 with issues (PostgreSQL answered 500: its text cannot hold NUL);
// free-form values too deep or too large are a 400 (5,000 levels overflowed JSON.stringify: a 500).
// Fields whose text never reaches the metadata store keep accepting any text.

const NUL = 'a\u0000b';
const owned = operations.filter((op) => op.auth.includes('owner'));
const shapeOf = (op: AnyOperation): Record<string, z.ZodType> =>
  (op.body as unknown as { _zod?: { def?: { shape?: Record<string, z.ZodType> } } } | undefined)?._zod?.def?.shape ?? {};
const exempt = (op: AnyOperation, field: string) => op.anyText === true || (op.anyText ?? []).includes(field);
/** `{"metadata": {"a": {"a": ... {}}}}` as text: building it as an object would overflow JSON.stringify here too. */
const nested = (levels: number) => `${'{"a":'.repeat(levels)}{}${'}'.repeat(levels)}`;

describe.each(DIALECTS)('hostile input (%s)', (dialect) => {
  let t: TestNube;
  let call: ReturnType<typeof caller>;
  beforeAll(async () => {
    t = await startNube({ dialect, env: { NUBE_RATE_LIMIT_PER_MINUTE: '100000', NUBE_SANDBOX_CREATE_PER_MINUTE: '100000' } });
    call = caller(t);
  });
  afterAll(() => t?.close());

  const inject = (op: AnyOperation, params: Record<string, string>, query = '', payload?: string) =>
    t.nube.app.inject({
      method: op.method,
      url: API_PREFIX + fillPath(op.path, params) + query,
      headers: { ...t.auth, ...(payload === undefined ? {} : { 'content-type': 'application/json' }) },
      payload,
    });

  it('a NUL in any path parameter of any operation is a 404', async () => {
    for (const op of owned.filter((o) => o.params)) {
      const names = Object.keys(op.params!.shape);
      for (const name of names) {
        const params = Object.fromEntries(names.map((n) => [n, n === name ? NUL : 'x1']));
        const body = op.method === 'GET' || op.method === 'DELETE' ? undefined : '{}';
        const r = await inject(op, params, '', body);
        expect(r.statusCode, `${op.id} ${name}: ${r.body}`).toBe(404);
        expect(JSON.parse(r.body)).toMatchObject({ code: 'NotFound' });
      }
    }
  });

  it('a NUL in any query parameter of any operation is a 400 naming the parameter', async () => {
    for (const op of owned.filter((o) => o.query)) {
      const params = Object.fromEntries(Object.keys(op.params?.shape ?? {}).map((n) => [n, 'x1']));
      for (const name of Object.keys(op.query!.shape)) {
        const r = await inject(op, params, `?${name}=a%00b`);
        expect(r.statusCode, `${op.id} ?${name}: ${r.body}`).toBe(400);
        expect(JSON.parse(r.body).issues).toContainEqual(expect.objectContaining({ path: ['query', name], code: 'nul_character' }));
      }
    }
  });

  it('a NUL in any body field is a 400 naming the field, except where any text is legitimate', async () => {
    let checked = 0;
    for (const op of owned.filter((o) => o.body)) {
      const params = Object.fromEntries(Object.keys(op.params?.shape ?? {}).map((n) => [n, 'x1']));
      for (const field of Object.keys(shapeOf(op))) {
        if (exempt(op, field)) continue;
        const r = await inject(op, params, '', JSON.stringify({ [field]: NUL }));
        expect(r.statusCode, `${op.id} body.${field}: ${r.body}`).toBe(400);
        expect(JSON.parse(r.body).issues).toContainEqual(expect.objectContaining({ path: ['body', field], code: 'nul_character' }));
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(50);
  });

  it('files, webhooks and databases: NUL in names, nested metadata, keys, ids and cursors', async () => {
    const created = await call('POST', '/files', { fileName: NUL, contentType: 'text/plain', size: 1 });
    expect(created.status).toBe(400);
    expect((await json(created)).issues[0].path).toEqual(['body', 'fileName']);
    const meta = await call('POST', '/files', { fileName: 'ok.txt', contentType: 'text/plain', size: 1, metadata: { tags: ['x', NUL], [NUL]: 1 } });
    expect(meta.status).toBe(400);
    const paths = (await json(meta)).issues.map((i: { path: unknown[] }) => i.path);
    expect(paths).toEqual(expect.arrayContaining([['body', 'metadata', 'tags', 1], ['body', 'metadata', NUL]]));
    for (const path of ['/files/file_x%00', '/webhooks/wh_%00', '/databases/db_x%00', `/files/x%00y/restore`]) {
      const method = path.endsWith('restore') ? 'POST' : 'GET';
      const r = await call(method, path);
      expect(r.status, path).toBe(404);
    }
    for (const path of ['/files?cursor=%00', '/files?assetId=a%00', '/files/search?q=%00', '/webhooks/wh_x/deliveries?cursor=%00']) {
      const r = await call('GET', path);
      expect(r.status, path).toBe(400);
    }
    expect((await call('POST', '/webhooks', { url: `https://example.com/${NUL}`, events: ['file.created'] })).status).toBe(400);
    expect((await call('POST', '/databases', { name: 'notes', description: NUL })).status).toBe(400);
    // Nothing of it was stored.
    expect((await json(await call('GET', '/files'))).items).toEqual([]);
    expect((await json(await call('GET', '/databases'))).items).toEqual([]);
  });

  it('routes outside the registry: a NUL in a file link or signed URL is a 404, a share link refuses it', async () => {
    for (const [method, path, status] of [
      ['GET', '/public/files/file_x%00', 404],
      ['GET', '/public/files/file_x%00/name.txt', 404],
      ['HEAD', '/public/files/file_x%00', 404],
      ['GET', '/blob/x%00', 404],
      ['PUT', '/blob/x%00', 404],
      ['GET', '/share/shr_x%00', 403],
    ] as const) {
      const r = await fetch(t.baseUrl + path, { method, body: method === 'PUT' ? 'x' : undefined });
      expect(r.status, `${method} ${path}`).toBe(status);
    }
  });

  it("database query arguments go to the user's database: text with NUL is refused by the engine, not cut; bytes with NUL are kept", async () => {
    const db = await json(await call('POST', '/databases', { name: 'nul-text' }));
    try {
      const q = (body: unknown) => call('POST', `/databases/${db.id}/query`, body);
      expect((await q({ sql: 'create table t(v)' })).status).toBe(200);
      // SQLite's binding would keep only "a": a clear 400 instead of silent loss, the same on both stores.
      for (const [sql, args] of [['insert into t values (?)', [NUL]], ['insert into t values (:v)', { v: NUL }]] as const) {
        const r = await q({ sql, args });
        expect(r.status).toBe(400);
        expect((await json(r)).code).toBe('InvalidRequest');
      }
      const imp = await q({ table: 't', columns: ['v'], rows: [[NUL]] });
      expect(imp.status).toBe(400);
      const blob = { base64: Buffer.from(NUL).toString('base64') };
      expect((await q({ sql: 'insert into t values (?)', args: [blob] })).status).toBe(200);
      const sel = await json(await q({ sql: 'select v, hex(v) from t' }));
      expect(sel.rows).toEqual([[blob, '610062']]);
      // A NUL in the SQL text reaches SQLite too, which ends the statement there: SQLite's own answer.
      const cut = await q({ sql: "select 'a\u0000b'" });
      expect(cut.status).toBe(400);
      expect((await json(cut)).code).toBe('SQLITE_ERROR');
    } finally {
      await call('DELETE', `/databases/${db.id}`);
    }
  });

  it('free-form values: too deep or too large is a 400, on create and on update', async () => {
    const h = { ...t.auth, 'content-type': 'application/json' };
    const post = (body: string) => fetch(`${t.baseUrl}/api/v2/files`, { method: 'POST', headers: h, body });
    const base = '"fileName":"m.txt","contentType":"text/plain","size":1';
    // 5,000 levels: refused as a body before anything looks at it.
    const deep = await post(`{${base},"metadata":${nested(5000)}}`);
    expect(deep.status).toBe(400);
    expect((await json(deep)).issues[0]).toMatchObject({ path: ['body'], code: 'too_deep' });
    // 17 levels of metadata: past the metadata limit (16).
    const over = await post(`{${base},"metadata":${nested(17)}}`);
    expect(over.status).toBe(400);
    expect((await json(over)).issues[0].path).toEqual(['body', 'metadata']);
    const big = await post(JSON.stringify({ fileName: 'm.txt', contentType: 'text/plain', size: 1, metadata: { text: 'x'.repeat(17 * 1024) } }));
    expect(big.status).toBe(400);
    const many = await post(JSON.stringify({ fileName: 'm.txt', contentType: 'text/plain', size: 1, metadata: Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`k${i}`, i])) }));
    expect(many.status).toBe(400);
    // Within the limits: kept and answered as given.
    const ok = await post(`{${base},"metadata":${nested(15)}}`);
    expect(ok.status).toBe(201);
    const file = (await json(ok)).file;
    const patch = await fetch(`${t.baseUrl}/api/v2/files/${file.id}`, { method: 'PATCH', headers: h, body: `{"metadata":${nested(40)}}` });
    expect(patch.status).toBe(400);
    const extract = await fetch(`${t.baseUrl}/api/v2/web/extract`, { method: 'POST', headers: h, body: `{"input":${nested(9)}}` });
    expect(extract.status).toBe(400);
    const env = await fetch(`${t.baseUrl}/api/v2/sandboxes/sbx_x/exec`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ command: 'true', env: Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`V${i}`, 'x'])) }),
    });
    expect(env.status).toBe(400);
  });

  it('the same limits through MCP', async () => {
    const r = await fetch(`${t.baseUrl}/api/mcp`, {
      method: 'POST',
      headers: { ...t.auth, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"files_create","arguments":{"fileName":"a\\u0000b","contentType":"text/plain","size":1}}}`,
    });
    const text = await r.text();
    expect(text).toContain('nul_character');
    expect(text).not.toContain('InternalError');
  });
});
