// Backups of a machine's data (runspec.dataPaths, never the root filesystem) into the blob store, on a
// durable timer per machine (daily by default), kept 7 days. Inside the box, SQLite databases are
// copied with SQLite's backup API (consistent while the app writes); other files are copied with the
// app frozen (SIGSTOP to its process group) and thawed right after. Each backup says which it was.
import { Readable } from 'node:stream';
import type { z } from 'zod';
import type { BlobStore } from '../../blob/index.js';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { cutShort, type JobContext } from '../../platform/jobs.js';
import type { MachineApps } from './app.js';
import type { Backup } from './schemas.js';
import type { BackupRow, MachineRow } from './repo.js';
import type { Runspec } from './runspec.js';
import type { MachinesCore } from './service.js';

export const BACKUP_JOB = 'machines.backup';
const WORK = '/opt/nube/backup';
/** A backup is read into nube's memory once on its way to the blob store: this is its limit. */
const MAX_BACKUP_BYTES = 512 * 1024 * 1024;
const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export class Backups {
  constructor(
    private readonly core: MachinesCore,
    private readonly apps: MachineApps,
    private readonly store: () => BlobStore,
  ) {}

  private get sbx() {
    return this.core.s.sandboxes;
  }

  view(b: BackupRow): z.input<typeof Backup> {
    return {
      id: b.id,
      machineId: b.machine_id,
      consistency: b.consistency,
      method: b.method,
      paths: JSON.parse(b.paths) as string[],
      sizeBytes: b.size_bytes,
      status: b.status,
      error: b.error,
      createdAt: new Date(b.created_at).toISOString(),
      expiresAt: new Date(b.expires_at).toISOString(),
    };
  }

  async list(p: Principal, id: string) {
    const m = await this.core.own(p, id);
    return { backups: (await this.core.repo.backups(m.id)).map((b) => this.view(b)) };
  }

  /** Arms the machine's timer; `replace` re-arms from inside the running job. */
  async arm(machineId: string, onDuplicate: 'keep' | 'replace' = 'keep'): Promise<void> {
    // The backup reads the box: it runs on the machine's node.
    const nodeId = await this.core.repo.nodeOf(machineId);
    await this.core.deps.jobs.enqueue(
      this.core.deps.nodes.jobType(BACKUP_JOB, nodeId),
      { machineId },
      { runAt: Date.now() + this.core.deps.config.machines.backupIntervalMs, key: `machine-backup:${machineId}`, onDuplicate },
    );
  }

  /**
   * The timer: back up (when there are data paths), drop expired backups, arm the next one. A backup cut
   * by nube's own stop is not a failed backup: its row goes, and the job runs again when nube is back
   * (it arms the next one then).
   */
  async run(job: { machineId: string }, ctx: Pick<JobContext, 'signal' | 'stopping'>): Promise<void> {
    const m = await this.core.repo.get(job.machineId);
    if (!m || m.status === 'deleted') return;
    try {
      const paths = m.runspec ? (JSON.parse(m.runspec) as Runspec).dataPaths : [];
      if (paths.length > 0 && m.status !== 'provisioning') await this.take(await this.core.principalOf(m.owner_id), m, paths, ctx);
      await this.prune(m.id);
    } finally {
      if (!cutShort(ctx)) await this.arm(m.id, 'replace');
    }
  }

  async take(p: Principal, m: MachineRow, paths: string[], ctx: Pick<JobContext, 'signal' | 'stopping'>): Promise<BackupRow> {
    const now = Date.now();
    const row: BackupRow = {
      id: newId('bak'),
      machine_id: m.id,
      owner_id: m.owner_id,
      consistency: 'hot',
      method: 'hot-copy',
      paths: JSON.stringify(paths),
      size_bytes: 0,
      status: 'running',
      blob_key: `machine-backups/${m.owner_id}/${m.id}/${newId('obj')}.tar.gz`,
      error: null,
      created_at: now,
      expires_at: now + this.core.deps.config.machines.backupKeepMs,
    };
    await this.core.repo.insertBackup(row);
    try {
      const out = await this.sbx.work.exec(p, m.sandbox_id, { command: `exec bash -c ${q(backupScript(row.id, paths))}`, timeoutSeconds: 600 });
      if (out.exitCode !== 0) throw new Error(`the copy failed: ${out.stderr.slice(-500)}`);
      const [method, size] = out.stdout.trim().split('\n');
      if (Number(size) > MAX_BACKUP_BYTES) throw new Error(`the backup is larger than ${MAX_BACKUP_BYTES} bytes`);
      const file = `${WORK}/${row.id}.tar.gz`;
      // In pieces from the box to the store: a backup is never whole in memory.
      const stored = await this.store().put(row.blob_key, Readable.from(this.sbx.work.readFrom(p, m.sandbox_id, file)), { contentType: 'application/gzip' });
      await this.sbx.work.exec(p, m.sandbox_id, { command: `rm -f ${file}`, timeoutSeconds: 60 });
      const done: Partial<BackupRow> = {
        status: 'completed',
        method: method as BackupRow['method'],
        consistency: method === 'hot-copy' ? 'hot' : 'consistent',
        size_bytes: stored.size,
      };
      await this.core.repo.updateBackup(row.id, done);
      return { ...row, ...done };
    } catch (e) {
      if (cutShort(ctx)) {
        await this.core.repo.deleteBackup(row.id).catch(() => {});
        throw e;
      }
      const error = (e as Error).message;
      this.core.deps.log.warn({ err: e, machine: m.id }, 'machine backup failed');
      await this.core.repo.updateBackup(row.id, { status: 'failed', error });
      return { ...row, status: 'failed', error };
    }
  }

  async prune(machineId: string, all = false): Promise<void> {
    const now = Date.now();
    for (const b of await this.core.repo.backups(machineId)) {
      if (!all && b.expires_at > now) continue;
      await this.store().delete(b.blob_key);
      await this.core.repo.deleteBackup(b.id);
    }
  }

  /** Stops the app, replaces each path the backup holds with its copy, starts the app again. */
  async restore(p: Principal, id: string, backupId: string) {
    const m = await this.apps.ready(p, id);
    const b = (await this.core.repo.backups(m.id)).find((x) => x.id === backupId);
    if (!b) throw errors.notFound('backup');
    if (b.status !== 'completed') throw errors.conflict(`backup is ${b.status}`, 'BackupNotRestorable');
    const file = `${WORK}/restore-${b.id}.tar.gz`;
    const got = await this.store().get(b.blob_key);
    await this.sbx.work.writeFrom(p, m.sandbox_id, file, got.stream);
    const paths = JSON.parse(b.paths) as string[];
    await this.apps.stop(p, m);
    const out = await this.sbx.work.exec(p, m.sandbox_id, {
      command: `set -e; for p in ${paths.map(q).join(' ')}; do if tar -tzf ${file} ".$p" >/dev/null 2>&1; then rm -rf "$p"; fi; done; tar -xzf ${file} -C / --no-same-owner; rm -f ${file}`,
      timeoutSeconds: 600,
    });
    if (out.exitCode !== 0) throw errors.conflict(`restore failed: ${out.stderr.slice(-500)}`, 'RestoreFailed');
    if (m.supervisor_exec_id) await this.apps.restart(p, m.id);
    return { ok: true as const, machineId: m.id, backupId: b.id, restoredPaths: paths };
  }
}

/** Copies the paths under WORK/<id>/root (SQLite via its backup API, the rest with the app frozen) and tars them. */
function backupScript(id: string, paths: string[]): string {
  return `set -e
out=${WORK}/${id}; rm -rf "$out"; mkdir -p "$out/root"
paths=(${paths.map(q).join(' ')})
is_sqlite() { [ "$(head -c 15 "$1" 2>/dev/null)" = "SQLite format 3" ]; }
plain=0
for p in "\${paths[@]}"; do
  [ -e "$p" ] || continue
  while IFS= read -r -d '' f; do
    case "$f" in *-wal|*-shm|*-journal) continue ;; esac
    is_sqlite "$f" || plain=1
  done < <(find "$p" -type f -print0)
done
pgid=$(cat /opt/nube/app.pgid 2>/dev/null || true)
# A copy cut short (its exec killed) cannot thaw the app: the next backup does it first.
if [ -n "$pgid" ]; then kill -CONT -- "-$pgid" 2>/dev/null || true; fi
method=sqlite-backup-api
if [ "$plain" = 1 ]; then
  if [ -n "$pgid" ] && kill -STOP -- "-$pgid" 2>/dev/null; then
    method=app-paused
    trap 'kill -CONT -- "-$pgid" 2>/dev/null || true' EXIT
  elif [ -n "$pgid" ]; then method=hot-copy
  else method=app-stopped; fi
fi
for p in "\${paths[@]}"; do
  [ -e "$p" ] || continue
  cp -a --parents "$p" "$out/root/"
  while IFS= read -r -d '' f; do
    case "$f" in *-wal|*-shm|*-journal) rm -f "$out/root$f"; continue ;; esac
    if is_sqlite "$f"; then
      rm -f "$out/root$f"
      python3 -c 'import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close(); s.close()' "$f" "$out/root$f"
    fi
  done < <(find "$p" -type f -print0)
done
if [ "$method" = app-paused ]; then kill -CONT -- "-$pgid" 2>/dev/null || true; trap - EXIT; fi
tar -czf "$out.tar.gz" -C "$out/root" .
rm -rf "$out"
echo "$method"
stat -c %s "$out.tar.gz"`;
}
