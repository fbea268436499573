// Where sandbox upper dirs and snapshot layers live: on a filesystem that can share blocks between
// files (reflinks), so a snapshot or a fork copies metadata, not data. See docs/decisions.md, issue 18.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { link, mkdir, readdir, readFile, rm, stat, statfs, unlink, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { SandboxRuntimeError } from '../driver.js';
import { run } from './proc.js';

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

/** A sparse file as large as the filesystem holding the data dir: it only takes what is written. */
async function defaultImageSize(dataDir: string): Promise<number> {
  const s = await statfs(dataDir);
  return s.blocks * s.bsize;
}

async function makeImage(image: string, sizeBytes: number): Promise<void> {
  // Made under a private name and linked into place: a crash leaves no half-made image, and of two
  // processes making one at once the first link wins (link never replaces a file, rename would).
  const tmp = `${image}.${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    // Every sandbox's files are in it: root only, whatever the data dir's own mode.
    await writeFile(tmp, '', { mode: 0o600 });
    await run('truncate', ['-s', String(sizeBytes), tmp]);
    await run('mkfs.xfs', ['-q', '-m', 'reflink=1', '-L', 'nube-store', tmp]);
    await link(tmp, image).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'EEXIST') throw e;
    });
  } finally {
    await unlink(tmp).catch(() => {});
  }
}

async function mountImage(image: string, mount: string): Promise<void> {
  await mkdir(mount, { recursive: true });
  if ((await mountPoints()).has(mount)) return;
  const res = await run('mount', ['-t', 'xfs', '-o', 'loop', image, mount], { allowFailure: true });
  // Another process on the same data dir may have mounted it meanwhile.
  if (res.code !== 0 && !(await mountPoints()).has(mount)) {
    throw new SandboxRuntimeError('HostUnsupported', `cannot mount the sandbox store ${image}: ${res.stderr.trim()}`);
  }
}

const opening = new Map<string, Promise<StoreStatus>>();

/**
 * Idempotent, at every start: an existing image is mounted (again after a reboot); otherwise the data
 * dir's own filesystem is used when it reflinks; otherwise an image is made, unless the data dir
 * already holds sandboxes or snapshots outside one (they stay where they are, and forks copy).
 */
export function openStore(dataDir: string, o: { mode?: StoreMode; sizeBytes?: number } = {}): Promise<StoreStatus> {
  const key = resolve(dataDir);
  let p = opening.get(key);
  if (!p) {
    p = open(key, o);
    opening.set(key, p);
    p.catch(() => opening.delete(key));
  }
  return p;
}

async function open(dataDir: string, o: { mode?: StoreMode; sizeBytes?: number }): Promise<StoreStatus> {
  const { image, mount } = storePaths(dataDir);
  await mkdir(dataDir, { recursive: true });
  if (existsSync(image)) {
    await mountImage(image, mount);
    return { kind: 'image', root: mount, fsType: 'xfs', image: { path: image, sizeBytes: (await stat(image)).size } };
  }
  const type = await fsType(dataDir);
  const copy = (reason: string): StoreStatus => ({ kind: 'copy', root: dataDir, fsType: type, reason });
  if (o.mode === 'copy') return copy('NUBE_SANDBOX_STORE=copy');
  if ((type === 'xfs' || type === 'btrfs') && (await reflinks(dataDir))) return { kind: 'native', root: dataDir, fsType: type };
  const legacy = (await nonEmpty(`${dataDir}/sandboxes`)) || (await nonEmpty(`${dataDir}/snapshots`));
  if (legacy) return copy(`sandboxes or snapshots made before the store are in ${dataDir} (${type})`);
  const mkfs = await run('sh', ['-c', 'command -v mkfs.xfs'], { allowFailure: true });
  if (mkfs.code !== 0) return copy(`${type} makes no reflinks and mkfs.xfs is missing (Debian package xfsprogs)`);
  const sizeBytes = o.sizeBytes ?? (await defaultImageSize(dataDir));
  try {
    await makeImage(image, sizeBytes);
    await mountImage(image, mount);
  } catch (e) {
    // No loop device (some containers) or no XFS in the kernel: plain copies, said by doctor.
    await unlink(image).catch(() => {});
    return copy(`cannot make an XFS image: ${(e as Error).message.slice(0, 300)}`);
  }
  return { kind: 'image', root: mount, fsType: 'xfs', image: { path: image, sizeBytes } };
}

/** Read-only view for `nube doctor` (a separate process): what `openStore` would use, without making anything. */
export async function inspectStore(dataDir: string): Promise<{ status: StoreStatus | null; mounted: boolean; allocatedBytes?: number }> {
  const { image, mount } = storePaths(dataDir);
  if (existsSync(image)) {
    const s = await stat(image);
    return {
      status: { kind: 'image', root: mount, fsType: 'xfs', image: { path: image, sizeBytes: s.size } },
      mounted: (await mountPoints()).has(mount),
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
