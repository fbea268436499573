// One of each plain resource (a key, a file with its bytes, a database with a row, a webhook, a
// document) made on a nube, for the tests that check they outlive something: an upgrade
// (test/platform/upgrade.test.ts), a backup and restore (test/platform/backup.test.ts).
import { expect } from 'vitest';

interface Caller {
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  call(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
}

export async function makeKept(n: Caller, keyName: string, hookUrl: string) {
  const key = await n.call('POST', '/account/keys', { name: keyName });
  expect(key.status, JSON.stringify(key.body)).toBe(201);
  const created = await n.call('POST', '/files', { fileName: 'kept.txt', contentType: 'text/plain', size: 4 });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  expect((await fetch(created.body.putUrl, { method: 'PUT', body: 'kept', headers: { 'content-type': 'text/plain' } })).ok).toBe(true);
  const db = await n.call('POST', '/databases', { name: 'kept' });
  expect(db.status, JSON.stringify(db.body)).toBe(201);
  const q = await n.call('POST', `/databases/${db.body.id}/query`, {
    statements: [{ sql: 'create table t (v text)' }, { sql: "insert into t values ('before')" }],
  });
  expect(q.status, JSON.stringify(q.body)).toBe(200);
  const hook = await n.call('POST', '/webhooks', { url: hookUrl, events: ['file.created'] });
  expect(hook.status, JSON.stringify(hook.body)).toBeLessThan(300);
  const doc = await n.call('POST', '/documents', { name: 'kept' });
  expect(doc.status, JSON.stringify(doc.body)).toBe(200);
  return { key, created, db, hook, doc };
}
