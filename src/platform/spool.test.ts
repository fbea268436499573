import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { Spool } from './spool.js';

const root = mkdtempSync(join(tmpdir(), 'nube-spool-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('Spool', () => {
  it('starts empty (a crash leftover is gone), keeps a file under its cap and removes it when asked', async () => {
    const dir = join(root, 'a');
    mkdirSync(dir);
    writeFileSync(join(dir, 'left-by-a-crash'), 'x');
    const spool = new Spool(dir);
    expect(readdirSync(dir)).toEqual([]);
    const bytes = Buffer.alloc(3000, 7);
    const f = await spool.take(Readable.from([bytes.subarray(0, 100), bytes.subarray(100)]), 3000, () => new Error('too large'));
    expect([f.size, f.head.length, readFileSync(f.path).equals(bytes)]).toEqual([3000, 512, true]);
    await f.remove();
    expect(existsSync(f.path)).toBe(false);
    const s = await spool.scratch();
    writeFileSync(join(s.dir, 'x'), 'x');
    await s.remove();
    expect(readdirSync(dir)).toEqual([]);
  });

  it('stops past the cap with the caller\'s error and leaves nothing behind', async () => {
    const dir = join(root, 'b');
    const spool = new Spool(dir);
    async function* endless() {
      for (;;) yield Buffer.alloc(64 * 1024);
    }
    await expect(spool.take(endless(), 1 << 20, () => new Error('past 1 MB'))).rejects.toThrow('past 1 MB');
    expect(readdirSync(dir)).toEqual([]);
  });
});
