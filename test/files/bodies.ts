// Test bodies of files through the API only, run by test/files/files.test.ts on one nube in process and
// by test/nodes/processes.test.ts through a client that spreads each request over three nube processes.
import { expect } from 'vitest';
import { json } from '../helpers/server.js';
import type { FilesApi } from './helpers.js';

/** Soft-deletes a DONE file: it is in the trash (7 days to purge), out of the list, read-only; restore brings it back. */
export async function trashAndRestoreBody(t: { api: FilesApi }, id: string): Promise<void> {
  expect((await t.api(`/files/${id}`, { method: 'DELETE' })).status).toBe(200);
  const trash = await json(await t.api('/files?status=DELETED'));
  const listed = trash.items.find((x: { id: string }) => x.id === id);
  expect(listed).toMatchObject({ status: 'DELETED', daysUntilPurge: 7 });
  expect((await json(await t.api('/files'))).items.some((x: { id: string }) => x.id === id)).toBe(false);
  expect((await json(await t.api(`/files/${id}`, { method: 'PATCH', body: JSON.stringify({ name: 'n' }) }))).code).toBe('FileDeleted');

  const restored = await t.api(`/files/${id}/restore`, { method: 'POST' });
  expect(restored.status).toBe(200);
  expect((await json(restored)).status).toBe('DONE');
}
