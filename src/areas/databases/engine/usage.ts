import { readFileSync } from 'node:fs';
import { rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';

let tmpSeq = 0;

export interface DatabaseUsage {
  rowsRead: number;
  rowsWritten: number;
}

/**
 * Rows read/written per database, kept in memory and written to `usage.json` in the
 * engine directory at most once per `flushMs` (and on close). Counters are for usage
 * figures, not billing-grade: a crash of nube can lose the last `flushMs` of counts,
 * never a database write.
 */
export class UsageCounters {
  private readonly counts = new Map<string, DatabaseUsage>();
  private readonly file: string;
  private timer: NodeJS.Timeout | null = null;
  private writing: Promise<void> = Promise.resolve();

  constructor(
    dir: string,
    private readonly flushMs = 1000,
  ) {
    this.file = path.join(dir, 'usage.json');
    try {
      const saved = JSON.parse(readFileSync(this.file, 'utf8')) as Record<string, DatabaseUsage>;
      for (const [id, u] of Object.entries(saved))
        this.counts.set(id, { rowsRead: u.rowsRead, rowsWritten: u.rowsWritten });
    } catch {
      // No file yet (or a torn one from a crash): start from zero.
    }
  }

  get(id: string): DatabaseUsage {
    const u = this.counts.get(id);
    return u ? { ...u } : { rowsRead: 0, rowsWritten: 0 };
  }

  add(id: string, rowsRead: number, rowsWritten: number): void {
    if (rowsRead === 0 && rowsWritten === 0) return;
    const u = this.counts.get(id) ?? { rowsRead: 0, rowsWritten: 0 };
    u.rowsRead += rowsRead;
    u.rowsWritten += rowsWritten;
    this.counts.set(id, u);
    this.schedule();
  }

  remove(id: string): void {
    if (this.counts.delete(id)) this.schedule();
  }

  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const snapshot = JSON.stringify(Object.fromEntries(this.counts));
    // A temp name of its own per write: two engines on one directory (a restart while the old one
    // still flushes, tests) must not rename each other's half-written file away (ENOENT).
    const tmp = `${this.file}.${process.pid}.${++tmpSeq}.tmp`;
    // A failed write must not fail every later flush: the chain goes on from a settled promise.
    const write = this.writing.then(async () => {
      try {
        await writeFile(tmp, snapshot);
        await rename(tmp, this.file);
      } catch (err) {
        await rm(tmp, { force: true });
        throw err;
      }
    });
    this.writing = write.catch(() => undefined);
    await write;
  }

  private schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.flush().catch(() => undefined);
    }, this.flushMs);
    this.timer.unref();
  }
}
