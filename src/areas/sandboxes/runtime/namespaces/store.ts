// Where sandbox upper dirs and snapshot layers live: on a filesystem that can share blocks between
// files (reflinks), so a snapshot or a fork copies metadata, not data. See docs/decisions.md, issue 18.
// Each sandbox's disk is limited there (store-quota.ts, issue 28): XFS project quotas where the kernel
// has them, else btrfs qgroups.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { link, mkdir, open as openFile, readdir, readFile, rm, stat, statfs, unlink, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { SandboxRuntimeError } from '../driver.js';
import { run } from './proc.js';
import type { DiskQuotaKind } from './store-quota.js';

/** `auto`: a reflink-capable store (the data dir's own filesystem, else an XFS image); `copy`: plain copies. */
export type StoreMode = 'auto' | 'copy';

export interface StoreStatus {
  /** `image`: an XFS image in the data dir, loop-mounted; `native`: the data dir's filesystem reflinks; `copy`: neither. */
  kind: 'image' | 'native' | 'copy';
  /** The directory that holds `sandboxes/` and `snapshots/`. */
  root: string;
  /** Filesystem type of `root` (xfs, btrfs, ext2/ext3, ...). */
  fsType: string;
  /** Why copies are made (kind `copy`). */
  reason?: string;
  image?: { path: string; sizeBytes: number };
  /** How each sandbox's disk is limited (store-quota.ts); null: not limited, `quotaReason` says why. */
  quota: DiskQuotaKind | null;
  quotaReason?: string;
}

export function storePaths(dataDir: string) {
  const d = resolve(dataDir);
  return { image: `${d}/store.img`, mount: `${d}/store` };
}

/** Mount points of the host (field 5 of mountinfo, octal escapes decoded). */
async function mountPoints(): Promise<Set<string>> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  return new Set(
    text
      .split('\n')
      .filter(Boolean)
      .map((l) => (l.split(' ')[4] ?? '').replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)))),
  );
}

export async function fsType(path: string): Promise<string> {
  return (await run('stat', ['-f', '-c', '%T', path])).stdout.trim();
}

/** Whether `dir`'s filesystem makes reflink copies (xfs with reflink=1, btrfs): one tiny file cloned. */
async function reflinks(dir: string): Promise<boolean> {
  const a = `${dir}/.reflink-probe-${randomBytes(4).toString('hex')}`;
  try {
    await writeFile(a, 'probe');
    return (await run('cp', ['--reflink=always', a, `${a}.copy`], { allowFailure: true })).code === 0;
  } finally {
    await Promise.all([rm(a, { force: true }), rm(`${a}.copy`, { force: true })]);
  }
}

async function nonEmpty(dir: string): Promise<boolean> {
  return existsSync(dir) && (await readdir(dir)).length > 0;
}

/**
 * A sparse file (it only takes what is written) as large as the host can spare: the free space of
 * the data dir's filesystem less the operator's reserve (NUBE_STORE_RESERVE_GB), and never more than
 * NUBE_SANDBOX_STORE_SIZE when that is set. A full store then fails the sandboxes' writes, never the
 * host's. An image made before (bigger) is kept as it is.
 */
export async function spareBytes(dataDir: string, reserveBytes: number): Promise<number> {
  const s = await statfs(dataDir);
  return s.bavail * s.bsize - reserveBytes;
}

/** Smallest store worth making: mkfs itself takes ~300 MB on a small XFS (log), btrfs less. */
const MIN_STORE_BYTES = 1024 ** 3;

async function makeImage(image: string, sizeBytes: number, fs: 'xfs' | 'btrfs'): Promise<void> {
  // Made under a private name and linked into place: a crash leaves no half-made image, and of two
  // processes making one at once the first link wins (link never replaces a file, rename would).
  const tmp = `${image}.${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    // Every sandbox's files are in it: root only, whatever the data dir's own mode.
    await writeFile(tmp, '', { mode: 0o600 });
    await run('truncate', ['-s', String(sizeBytes), tmp]);
    if (fs === 'xfs') await run('mkfs.xfs', ['-q', '-m', 'reflink=1', '-L', 'nube-store', tmp]);
    else await run('mkfs.btrfs', ['-q', '-L', 'nube-store', tmp]);
    await link(tmp, image).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'EEXIST') throw e;
    });
  } finally {
    await unlink(tmp).catch(() => {});
  }
}

/** `xfs` or `btrfs`, from the image's superblock magic; null for neither. */
export async function imageFs(image: string): Promise<'xfs' | 'btrfs' | null> {
  const f = await openFile(image, 'r');
  try {
    const head = Buffer.alloc(4);
    await f.read(head, 0, 4, 0);
    if (head.toString('latin1') === 'XFSB') return 'xfs';
    const magic = Buffer.alloc(8);
    await f.read(magic, 0, 8, 0x10040);
    return magic.toString('latin1') === '_BHRfS_M' ? 'btrfs' : null;
  } finally {
    await f.close();
  }
}

/**
 * Mounts the image (XFS with project quotas when the kernel has them) and says how sandboxes' disks
 * are limited on it. Already mounted (nube restarted while sandboxes ran): as it is.
 */
async function mountImage(
  image: string,
  mount: string,
  fs: 'xfs' | 'btrfs',
): Promise<Pick<StoreStatus, 'quota' | 'quotaReason'>> {
  await mkdir(mount, { recursive: true });
  const mountIt = async (opts: string) => {
    if ((await mountOptions(mount)) !== null) return true;
    const res = await run('mount', ['-t', fs, '-o', opts, image, mount], { allowFailure: true });
    // Another process on the same data dir may have mounted it meanwhile.
    if (res.code === 0 || (await mountOptions(mount)) !== null) return true;
    lastMountError = res.stderr.trim();
    return false;
  };
  let lastMountError = '';
  if (fs === 'btrfs') {
    if (!(await mountIt('loop')))
      throw new SandboxRuntimeError(
        'HostUnsupported',
        `cannot mount the sandbox store ${image}: ${lastMountError}`,
      );
    return btrfsQuotas(mount);
  }
  if (await mountIt('loop,prjquota')) {
    if ((await mountOptions(mount))?.includes('prjquota')) return { quota: 'xfs-project' };
    return {
      quota: null,
      quotaReason: `the store was mounted without prjquota (before nube limited disks): limits apply once it is mounted again with no sandbox running (nube cleanup, then start nube)`,
    };
  }
  if (!(await mountIt('loop')))
    throw new SandboxRuntimeError(
      'HostUnsupported',
      `cannot mount the sandbox store ${image}: ${lastMountError}`,
    );
  return {
    quota: null,
    quotaReason: `this kernel has no XFS quotas (CONFIG_XFS_QUOTA): sandboxes' disks are not limited on this XFS store`,
  };
}

/** Turns btrfs quotas (qgroups) on; idempotent. */
async function btrfsQuotas(mount: string): Promise<Pick<StoreStatus, 'quota' | 'quotaReason'>> {
  const r = await run('btrfs', ['quota', 'enable', mount], { allowFailure: true }).catch((e: Error) => ({
    code: -1,
    stderr: e.message,
  }));
  if (r.code === 0) return { quota: 'btrfs-qgroup' };
  return { quota: null, quotaReason: `btrfs quota enable failed: ${r.stderr.trim().slice(0, 200)}` };
}

/** The mount options of `path` when it is a mount point (super options included), else null. */
export async function mountOptions(path: string): Promise<string[] | null> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  for (const l of text.split('\n')) {
    const f = l.split(' ');
    if (f[4] !== path) continue;
    const sep = f.indexOf('-');
    return [...(f[5] ?? '').split(','), ...(f[sep + 3] ?? '').split(',')];
  }
  return null;
}

/** Whether this kernel mounts an XFS with project quotas (some build XFS without CONFIG_XFS_QUOTA). */
async function xfsQuotasInKernel(dir: string): Promise<boolean> {
  const probe = `${dir}/.quota-probe-${randomBytes(4).toString('hex')}`;
  const mnt = `${probe}.mnt`;
  try {
    await writeFile(probe, '', { mode: 0o600 });
    await run('truncate', ['-s', '300M', probe]);
    await run('mkfs.xfs', ['-q', probe]);
    await mkdir(mnt);
    const r = await run('mount', ['-t', 'xfs', '-o', 'loop,prjquota', probe, mnt], { allowFailure: true });
    if (r.code === 0) await run('umount', [mnt], { allowFailure: true });
    return r.code === 0;
  } catch {
    return false;
  } finally {
    await rm(mnt, { recursive: true, force: true }).catch(() => {});
    await unlink(probe).catch(() => {});
  }
}

async function hasCommand(cmd: string): Promise<boolean> {
  return (await run('sh', ['-c', `command -v ${cmd}`], { allowFailure: true })).code === 0;
}

/** XFS with project quotas when the kernel has them; else btrfs (qgroups) when it can; else XFS without limits. */
async function imageFsFor(dataDir: string): Promise<'xfs' | 'btrfs'> {
  if (await xfsQuotasInKernel(dataDir)) return 'xfs';
  const fss = await readFile('/proc/filesystems', 'utf8').catch(() => '');
  if (/\bbtrfs\b/.test(fss) && (await hasCommand('mkfs.btrfs')) && (await hasCommand('btrfs')))
    return 'btrfs';
  return 'xfs';
}

const opening = new Map<string, Promise<StoreStatus>>();

/**
 * Idempotent, at every start: an existing image is mounted (again after a reboot); otherwise the data
 * dir's own filesystem is used when it reflinks; otherwise an image is made, unless the data dir
 * already holds sandboxes or snapshots outside one (they stay where they are, and forks copy).
 */
export interface StoreOptions {
  mode?: StoreMode;
  /** Upper bound of a new image's size (NUBE_SANDBOX_STORE_SIZE). */
  sizeBytes?: number;
  /** What the host keeps free: a new image is at most its free space less this (NUBE_STORE_RESERVE_GB). */
  reserveBytes?: number;
}

export async function openStore(dataDir: string, o: StoreOptions = {}): Promise<StoreStatus> {
  const key = resolve(dataDir);
  let p = opening.get(key);
  // Opened before in this process, but unmounted since (`nube cleanup`, an operator's umount): the
  // image's sandboxes are only seen once it is mounted again, so it is opened again.
  if (p) {
    const s = await p.catch(() => null);
    if (s?.kind === 'image' && (await mountOptions(s.root)) === null && opening.get(key) === p) opening.delete(key);
  }
  p = opening.get(key);
  if (!p) {
    p = open(key, o);
    opening.set(key, p);
    p.catch(() => opening.delete(key));
  }
  return p;
}

const UNLIMITED_COPY =
  "plain copies in the data dir: sandboxes' disks are not limited (a sandbox can fill the data dir's filesystem)";
const UNLIMITED_NATIVE =
  "the data dir's own filesystem is the store: sandboxes' disks are not limited (a data dir on another filesystem gets an image with limits)";

async function open(dataDir: string, o: StoreOptions): Promise<StoreStatus> {
  const { image, mount } = storePaths(dataDir);
  await mkdir(dataDir, { recursive: true });
  if (existsSync(image)) {
    const fs = (await imageFs(image)) ?? 'xfs';
    const q = await mountImage(image, mount, fs);
    return {
      kind: 'image',
      root: mount,
      fsType: fs,
      image: { path: image, sizeBytes: (await stat(image)).size },
      ...q,
    };
  }
  const type = await fsType(dataDir);
  const copy = (reason: string): StoreStatus => ({
    kind: 'copy',
    root: dataDir,
    fsType: type,
    reason,
    quota: null,
    quotaReason: UNLIMITED_COPY,
  });
  if (o.mode === 'copy') return copy('NUBE_SANDBOX_STORE=copy');
  if ((type === 'xfs' || type === 'btrfs') && (await reflinks(dataDir)))
    return { kind: 'native', root: dataDir, fsType: type, quota: null, quotaReason: UNLIMITED_NATIVE };
  const legacy = (await nonEmpty(`${dataDir}/sandboxes`)) || (await nonEmpty(`${dataDir}/snapshots`));
  if (legacy) return copy(`sandboxes or snapshots made before the store are in ${dataDir} (${type})`);
  if (!(await hasCommand('mkfs.xfs')))
    return copy(`${type} makes no reflinks and mkfs.xfs is missing (Debian package xfsprogs)`);
  const spare = await spareBytes(dataDir, o.reserveBytes ?? 0);
  const sizeBytes = Math.min(o.sizeBytes ?? Number.POSITIVE_INFINITY, spare);
  if (sizeBytes < MIN_STORE_BYTES) {
    throw new SandboxRuntimeError(
      'HostUnsupported',
      `the host cannot spare room for the sandbox store: ${Math.round(spare / 1024 ** 2)} MB free beyond the reserve (NUBE_STORE_RESERVE_GB); free disk space or lower the reserve`,
    );
  }
  // A whole number of MiB (mkfs wants a multiple of its block size).
  const bytes = Math.floor(sizeBytes / 1024 ** 2) * 1024 ** 2;
  const fs = await imageFsFor(dataDir);
  try {
    await makeImage(image, bytes, fs);
    const q = await mountImage(image, mount, fs);
    return { kind: 'image', root: mount, fsType: fs, image: { path: image, sizeBytes: bytes }, ...q };
  } catch (e) {
    // No loop device (some containers) or no XFS in the kernel: plain copies, said by doctor.
    await unlink(image).catch(() => {});
    return copy(`cannot make an ${fs} image: ${(e as Error).message.slice(0, 300)}`);
  }
}

/** Read-only view for `nube doctor` (a separate process): what `openStore` would use, without making anything. */
export async function inspectStore(
  dataDir: string,
): Promise<{ status: StoreStatus | null; mounted: boolean; allocatedBytes?: number }> {
  const { image, mount } = storePaths(dataDir);
  if (existsSync(image)) {
    const s = await stat(image);
    const fs = (await imageFs(image).catch(() => null)) ?? 'xfs';
    const opts = await mountOptions(mount);
    const quota = fs === 'btrfs' ? 'btrfs-qgroup' : opts?.includes('prjquota') ? 'xfs-project' : null;
    return {
      status: {
        kind: 'image',
        root: mount,
        fsType: fs,
        image: { path: image, sizeBytes: s.size },
        quota: opts ? quota : null,
      },
      mounted: opts !== null,
      allocatedBytes: s.blocks * 512,
    };
  }
  return { status: null, mounted: false };
}

/**
 * Unmount the image (tests and benches before removing a data dir). The sandboxes on it must be gone:
 * a busy store is detached lazily and freed when its last overlay goes.
 */
export async function closeStore(dataDir: string): Promise<void> {
  const key = resolve(dataDir);
  opening.delete(key);
  const { mount } = storePaths(key);
  if (!(await mountPoints()).has(mount)) return;
  const res = await run('umount', [mount], { allowFailure: true });
  if (res.code !== 0) await run('umount', ['-l', mount], { allowFailure: true });
}

/**
 * Gives the blocks of deleted files back to the host: the loop device punches holes into the image on
 * `fstrim` (online `discard` only does it when XFS next writes its log, which may be much later).
 * XFS frees a deleted file's blocks in the background and keeps them busy until its log is on disk,
 * and fstrim skips busy blocks: measured here, a trim right after `rm` + `sync` freed nothing half the
 * time and one 2 s later always did. So each round trims twice, `SECOND_PASS_MS` apart. Coalesced: one
 * round at a time, another after it if more was deleted meanwhile.
 */
export class StoreTrimmer {
  static SECOND_PASS_MS = 3000;
  private running: Promise<void> | null = null;
  private again = false;
  private pause: { timer: NodeJS.Timeout; done: () => void } | null = null;
  constructor(private readonly mount: string) {}

  schedule(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    const trim = () => run('fstrim', [this.mount], { allowFailure: true }).catch(() => {});
    this.running = (async () => {
      do {
        this.again = false;
        await run('sync', ['-f', this.mount], { allowFailure: true }).catch(() => {});
        await trim();
        await new Promise<void>((done) => {
          this.pause = { timer: setTimeout(done, StoreTrimmer.SECOND_PASS_MS), done };
        });
        this.pause = null;
        await trim();
      } while (this.again);
    })().finally(() => {
      this.running = null;
    });
  }

  /** Resolves when no trim is running (tests, unmounting). */
  async settled(): Promise<void> {
    while (this.running) await this.running;
  }

  /** Skip the wait for a second pass (nube stopping): a later deletion trims again. */
  stop(): void {
    this.again = false;
    if (this.pause) {
      clearTimeout(this.pause.timer);
      this.pause.done();
    }
  }
}
