// `nube doctor`'s look at the sandbox store (runtime/namespaces/store.ts): whether forks and snapshots
// share blocks (reflinks) or copy, and what the image takes. Read-only: it makes and mounts nothing.
import { existsSync } from 'node:fs';
import { readdir, statfs } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Config } from '../../platform/config-shape.js';
import { type CheckResult, ok, warn } from '../../platform/doctor.js';
import { run } from './runtime/namespaces/proc.js';
import { fsType, inspectStore } from './runtime/namespaces/store.js';
import { runtimeDataDir } from './runtime-dir.js';

const GB = 1024 ** 3;
const gb = (n: number) => `${(n / GB).toFixed(n < 10 * GB ? 1 : 0)} GB`;

/** The nearest existing directory (the data dir may not exist before the first sandbox). */
function existing(dir: string): string {
  let d = dir;
  while (!existsSync(d) && d !== dirname(d)) d = dirname(d);
  return d;
}

async function nonEmpty(dir: string): Promise<boolean> {
  return existsSync(dir) && (await readdir(dir)).length > 0;
}

export async function storeCheck(config: Config): Promise<CheckResult> {
  const dataDir = runtimeDataDir(config);
  if (config.sandboxes.store === 'copy') {
    return ok('NUBE_SANDBOX_STORE=copy: snapshots and forks copy the sandbox files (a fork of 100 MB writes 100 MB)');
  }
  const { status, mounted, allocatedBytes } = await inspectStore(dataDir);
  const hostFree = async (dir: string) => {
    const s = await statfs(dir);
    return s.bavail * s.bsize;
  };
  if (status?.image) {
    const free = await hostFree(dataDir);
    const line = `XFS image ${status.image.path}: ${gb(status.image.sizeBytes)} sparse, ${gb(allocatedBytes ?? 0)} taken, ${
      mounted ? `mounted at ${status.root}` : 'not mounted now (nube mounts it when it starts)'
    }; forks and snapshots share blocks (reflinks)`;
    // The image grows as sandboxes write; past the host's free space its writes fail.
    const room = status.image.sizeBytes - (allocatedBytes ?? 0);
    if (free < room && free < 5 * GB) {
      return warn(`${line}; the host has only ${gb(free)} free`, 'free disk space on the host, or delete sandboxes and snapshots (their blocks go back to the host)');
    }
    return ok(line);
  }
  const dir = existing(dataDir);
  const type = await fsType(dir).catch(() => 'unknown');
  if (type === 'xfs' || type === 'btrfs') {
    return ok(`the data dir is on ${type}: used directly when it makes reflinks (xfs needs reflink=1), else copies`);
  }
  if ((await nonEmpty(`${dataDir}/sandboxes`)) || (await nonEmpty(`${dataDir}/snapshots`))) {
    return warn(
      `the data dir (${type}) holds sandboxes from before the store: snapshots and forks copy their files`,
      `start nube on a new NUBE_DATA_DIR (or delete every sandbox and snapshot) to get the XFS image; NUBE_SANDBOX_STORE=copy silences this`,
    );
  }
  const mkfs = await run('sh', ['-c', 'command -v mkfs.xfs'], { allowFailure: true });
  if (mkfs.code !== 0) {
    return warn(`the data dir is on ${type} (no reflinks) and mkfs.xfs is missing: forks will copy`, 'apt-get install -y xfsprogs (or sh scripts/install-host-deps.sh)');
  }
  return ok(`the data dir is on ${type} (no reflinks): the first sandbox makes a sparse XFS image for forks to share blocks`);
}
