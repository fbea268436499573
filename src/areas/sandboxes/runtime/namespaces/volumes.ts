// Volumes on the sandbox store (issue 33): one quota-limited directory per volume, as a sandbox's disk
// dir (store-quota.ts) but outliving every sandbox: a btrfs subvolume with a qgroup limit, or a
// directory with an XFS project quota. Copies share blocks with their source: a btrfs snapshot (a
// metadata operation whatever the size), or a reflinked copy on XFS. Snapshots are read-only copies.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, chown, lstat, mkdir, readdir, rm } from 'node:fs/promises';
import { PassThrough, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { SandboxRuntimeError, type VolumeStore } from '../driver.js';
import { run } from './proc.js';
import type { Spawner } from './spawner.js';
import type { StoreStatus } from './store.js';
import { shiftOwnership } from './templates.js';

/** zstd on all cores at its default level: faster than gzip at a better ratio (backups, issue 33). */
const ZSTD = 'zstd -T0 -3';

/** Settles when `tar` exits: rejects with the end of what it said unless it succeeded. */
function tarExit(child: ReturnType<typeof spawn>): Promise<void> {
  let said = '';
  child.stderr?.on('data', (c: Buffer) => {
    said = (said + c.toString('utf8')).slice(-2000);
  });
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`tar failed (${code}): ${said.trim().slice(-500)}`)),
    );
  });
}

const ID_RE = /^[a-z0-9][a-z0-9_-]{0,80}$/i;

/** XFS projects of volumes: far above sandboxes' (lease index + 1), from the id so restarts agree. */
function projectOf(id: string): number {
  return 0x1000_0000 + (createHash('sha256').update(id).digest().readUInt32BE(0) % 0x6000_0000);
}

/** Blocks taken under `root` (what a quota counts), each inode once. */
async function allocatedBytes(root: string): Promise<number> {
  const seen = new Set<string>();
  let total = 0;
  const walk = async (path: string): Promise<void> => {
    const st = await lstat(path, { bigint: true });
    const key = `${st.ino}`;
    if (seen.has(key)) return;
    seen.add(key);
    total += Number(st.blocks) * 512;
    if (st.isDirectory()) await Promise.all((await readdir(path)).map((n) => walk(`${path}/${n}`)));
  };
  await walk(root);
  return total;
}

/** What a volume's tree takes, less its top directory (not the volume's data). */
async function dataBytes(dir: string): Promise<number> {
  if (!existsSync(dir)) throw new SandboxRuntimeError('NotFound', `${dir} not found`);
  return Math.max(0, (await allocatedBytes(dir)) - Number((await lstat(dir, { bigint: true })).blocks) * 512);
}

export class StoreVolumes implements VolumeStore {
  constructor(
    private readonly open: () => Promise<{ store: StoreStatus; spawner: Spawner }>,
    readonly uidBase: number,
    private readonly uidCount: number,
  ) {}

  get ids() {
    return { base: this.uidBase, count: this.uidCount };
  }

  private async where(): Promise<{ store: StoreStatus; spawner: Spawner; dir: string; snaps: string }> {
    const o = await this.open();
    if (!o.store.quota) {
      throw new SandboxRuntimeError(
        'HostUnsupported',
        `volumes need a sandbox store with disk quotas: ${o.store.quotaReason ?? 'none here'}`,
      );
    }
    return { ...o, dir: `${o.store.root}/volumes`, snaps: `${o.store.root}/volume-snapshots` };
  }

  private check(id: string): void {
    if (!ID_RE.test(id)) throw new SandboxRuntimeError('InvalidInput', `invalid volume id ${id}`);
  }

  async path(id: string): Promise<string> {
    this.check(id);
    return `${(await this.where()).dir}/${id}`;
  }

  private async limit(w: { store: StoreStatus; spawner: Spawner }, dir: string, id: string, bytes: number) {
    const kind = w.store.quota === 'xfs-project' ? 'x' : 'b';
    await w.spawner.request(['L:1', `d:${kind}:${Math.max(1, Math.round(bytes))}:${projectOf(id)}:${dir}`]);
  }

  async create(id: string, bytes: number, from?: { volume: string } | { snapshot: string }): Promise<void> {
    this.check(id);
    const w = await this.where();
    // Traversable, not listable (as the sandboxes' dir): only the helper and root bind them.
    await mkdir(w.dir, { recursive: true, mode: 0o711 });
    const dir = `${w.dir}/${id}`;
    if (existsSync(dir)) throw new SandboxRuntimeError('AlreadyExists', `volume ${id} exists`);
    const src = from ? ('volume' in from ? `${w.dir}/${from.volume}` : `${w.snaps}/${from.snapshot}`) : null;
    if (src && !existsSync(src)) throw new SandboxRuntimeError('NotFound', `source ${src} is gone`);
    if (src && w.store.quota === 'btrfs-qgroup') {
      await run('btrfs', ['-q', 'subvolume', 'snapshot', src, dir]);
      await this.limit(w, dir, id, bytes);
      return;
    }
    // A new subvolume (btrfs) or a project directory (XFS), then the copy lands inside its quota.
    await this.limit(w, dir, id, bytes);
    if (src) await run('cp', ['-a', '--reflink=always', `${src}/.`, `${dir}/`]);
    else {
      await chown(dir, this.uidBase, this.uidBase);
      await chmod(dir, 0o755);
    }
  }

  async resize(id: string, bytes: number): Promise<void> {
    const w = await this.where();
    const dir = await this.path(id);
    if (!existsSync(dir)) throw new SandboxRuntimeError('NotFound', `volume ${id} not found`);
    await this.limit(w, dir, id, bytes);
  }

  async usedBytes(id: string): Promise<number> {
    return dataBytes(await this.path(id));
  }

  async snapshotUsedBytes(snapshotId: string): Promise<number> {
    this.check(snapshotId);
    return dataBytes(`${(await this.where()).snaps}/${snapshotId}`);
  }

  private async drop(w: { store: StoreStatus }, dir: string): Promise<void> {
    if (!existsSync(dir)) return;
    if (w.store.quota === 'btrfs-qgroup') {
      await run('btrfs', ['-q', 'subvolume', 'delete', dir]);
      return;
    }
    await rm(dir, { recursive: true, force: true });
  }

  async remove(id: string): Promise<void> {
    const w = await this.where();
    await this.drop(w, await this.path(id));
  }

  async snapshot(id: string, snapshotId: string): Promise<void> {
    this.check(snapshotId);
    const w = await this.where();
    const src = await this.path(id);
    if (!existsSync(src)) throw new SandboxRuntimeError('NotFound', `volume ${id} not found`);
    await mkdir(w.snaps, { recursive: true, mode: 0o700 });
    const dst = `${w.snaps}/${snapshotId}`;
    if (w.store.quota === 'btrfs-qgroup') {
      await run('btrfs', ['-q', 'subvolume', 'snapshot', '-r', src, dst]);
      return;
    }
    await mkdir(dst);
    await run('cp', ['-a', '--reflink=always', `${src}/.`, `${dst}/`]);
  }

  async archive(snapshotId: string): Promise<{ stream: Readable; done: Promise<void> }> {
    this.check(snapshotId);
    const dir = `${(await this.where()).snaps}/${snapshotId}`;
    if (!existsSync(dir)) throw new SandboxRuntimeError('NotFound', `volume snapshot ${snapshotId} not found`);
    // Numeric owners as stored (uidBase-shifted): restore() shifts them onto its own store's base.
    const child = spawn('tar', ['-C', dir, '--numeric-owner', '--sparse', '-I', ZSTD, '-cf', '-', '.'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const done = tarExit(child);
    done.catch(() => {});
    // Piped at once: Node resumes (and so discards) a child's unread stdout when the child exits, and a
    // small volume's tar exits before the caller starts reading. The pipe keeps backpressure.
    const stream = new PassThrough();
    child.stdout!.pipe(stream);
    // A reader that gives up (destroys it) must not leave tar blocked on a full pipe.
    stream.on('close', () => child.stdout!.destroy());
    return { stream, done };
  }

  async restore(id: string, bytes: number, archive: Readable, uidBase: number): Promise<void> {
    await this.create(id, bytes);
    const dir = await this.path(id);
    try {
      // Into the volume's own quota: an archive larger than its limit fails here (EDQUOT), not later.
      const child = spawn('tar', ['-C', dir, '--numeric-owner', '--same-owner', '-p', '-I', ZSTD, '-xf', '-'], {
        stdio: ['pipe', 'ignore', 'pipe'],
      });
      const [fed, exited] = await Promise.allSettled([pipeline(archive, child.stdin!), tarExit(child)]);
      if (exited.status === 'rejected') throw exited.reason;
      if (fed.status === 'rejected') throw fed.reason;
      if (uidBase !== this.uidBase) await shiftOwnership(dir, this.uidBase - uidBase);
    } catch (e) {
      await this.remove(id).catch(() => {});
      throw e;
    }
  }

  async removeSnapshot(snapshotId: string): Promise<void> {
    this.check(snapshotId);
    const w = await this.where();
    const dir = `${w.snaps}/${snapshotId}`;
    if (w.store.quota === 'btrfs-qgroup' && existsSync(dir)) {
      // A read-only subvolume is deleted as any other (as root).
      await run('btrfs', ['-q', 'subvolume', 'delete', dir]);
      return;
    }
    await rm(dir, { recursive: true, force: true });
  }
}
