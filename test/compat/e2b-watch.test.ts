// The real `e2b` SDK against nube: watchDir (inotify inside the sandbox). Events named relative to the
// watched directory, recursive watches following new directories, entry info, and the errors.
import {
  FileNotFoundError,
  type FilesystemEvent,
  FilesystemEventType,
  FileType,
  InvalidArgumentError,
  Sandbox,
} from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;
let sbx: Sandbox;

/** Events as they come, and a way to wait for one. */
function collector() {
  const events: FilesystemEvent[] = [];
  const waitFor = async (ok: (e: FilesystemEvent) => boolean, ms = 10_000) => {
    const end = Date.now() + ms;
    for (;;) {
      const hit = events.find(ok);
      if (hit) return hit;
      if (Date.now() > end) throw new Error(`no such event in ${JSON.stringify(events)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  return { events, on: (e: FilesystemEvent) => void events.push(e), waitFor };
}

describe('e2b SDK: watchDir', () => {
  beforeAll(async () => {
    t = await startE2bNube('e2b-watch');
    sbx = await Sandbox.create({ timeoutMs: 300_000 });
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('reports creates, writes, chmods, renames and removes in a directory', async () => {
    await sbx.files.makeDir('w1');
    const c = collector();
    const h = await sbx.files.watchDir('w1', c.on);
    await sbx.files.write('w1/a.txt', 'one');
    await c.waitFor((e) => e.type === FilesystemEventType.CREATE && e.name === 'a.txt');
    await sbx.files.write('w1/a.txt', 'two');
    await c.waitFor((e) => e.type === FilesystemEventType.WRITE && e.name === 'a.txt');
    await sbx.commands.run('chmod 600 w1/a.txt');
    await c.waitFor((e) => e.type === FilesystemEventType.CHMOD && e.name === 'a.txt');
    await sbx.files.rename('w1/a.txt', 'w1/b.txt');
    await c.waitFor((e) => e.type === FilesystemEventType.RENAME && e.name === 'a.txt');
    await c.waitFor((e) => e.type === FilesystemEventType.CREATE && e.name === 'b.txt');
    await sbx.files.remove('w1/b.txt');
    await c.waitFor((e) => e.type === FilesystemEventType.REMOVE && e.name === 'b.txt');
    // Not recursive: a subdirectory's own changes are not reported.
    await sbx.files.makeDir('w1/sub');
    await c.waitFor((e) => e.type === FilesystemEventType.CREATE && e.name === 'sub');
    await sbx.files.write('w1/sub/deep.txt', 'x');
    await new Promise((r) => setTimeout(r, 500));
    expect(c.events.some((e) => e.name.includes('deep'))).toBe(false);
    await h.stop();
  });

  it('watches recursively, directories made after it started too, with entry info', async () => {
    await sbx.files.makeDir('w2/old');
    const c = collector();
    const h = await sbx.files.watchDir('w2', c.on, { recursive: true, includeEntry: true });
    await sbx.files.write('w2/old/f.txt', 'x');
    const created = await c.waitFor((e) => e.type === FilesystemEventType.CREATE && e.name === 'old/f.txt');
    expect(created.entry).toMatchObject({
      name: 'f.txt',
      path: '/home/user/w2/old/f.txt',
      type: FileType.FILE,
    });
    const written = await c.waitFor((e) => e.type === FilesystemEventType.WRITE && e.name === 'old/f.txt');
    expect(written.entry).toMatchObject({ owner: 'user', size: 1 });
    await sbx.files.makeDir('w2/new');
    await c.waitFor((e) => e.type === FilesystemEventType.CREATE && e.name === 'new');
    await sbx.files.write('w2/new/g.txt', 'y');
    await c.waitFor((e) => e.type === FilesystemEventType.WRITE && e.name === 'new/g.txt');
    await sbx.files.remove('w2/new/g.txt');
    const removed = await c.waitFor((e) => e.type === FilesystemEventType.REMOVE && e.name === 'new/g.txt');
    expect(removed.entry).toBeUndefined();
    await h.stop();
  });

  it('refuses a directory that is not there, and a file', async () => {
    await expect(sbx.files.watchDir('no-such-dir', () => {})).rejects.toBeInstanceOf(FileNotFoundError);
    await sbx.files.write('plain.txt', 'x');
    await expect(sbx.files.watchDir('plain.txt', () => {})).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('ends with a timeout error when its time is up', async () => {
    await sbx.files.makeDir('w3');
    let ended: Error | undefined | null = null;
    await sbx.files.watchDir('w3', () => {}, {
      timeoutMs: 1000,
      onExit: (e) => {
        ended = e;
      },
    });
    const end = Date.now() + 10_000;
    while (ended === null && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
    expect(String(ended)).toMatch(/TimeoutError/);
  });
});
