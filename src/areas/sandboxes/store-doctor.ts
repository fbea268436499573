// `nube doctor`'s look at the sandbox store (runtime/namespaces/store.ts): whether forks and snapshots
// share blocks (reflinks) or copy, and what the image takes. Read-only: it makes and mounts nothing.
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import type { Config } from '../../platform/config-shape.js';
import { type CheckResult, fail, ok, warn } from '../../platform/doctor.js';
import { run } from './runtime/namespaces/proc.js';
import { fsType } from './runtime/namespaces/store.js';
import { existing, storeUsage } from './store-usage.js';
import { runtimeDataDir } from './runtime-dir.js';

const GB = 1024 ** 3;
const gb = (n: number) => `${(n / GB).toFixed(n < 10 * GB ? 1 : 0)} GB`;

async function nonEmpty(dir: string): Promise<boolean> {
  return existsSync(dir) && (await readdir(dir)).length > 0;
}

export async function storeCheck(config: Config): Promise<CheckResult | CheckResult[]> {
  const dataDir = runtimeDataDir(config);
  if (config.sandboxes.store === 'copy') {
    return [
      ok('NUBE_SANDBOX_STORE=copy: snapshots and forks copy the sandbox files (a fork of 100 MB writes 100 MB)'),
      warn(
        "sandboxes' disks are not limited on plain copies: one sandbox can fill the data dir's filesystem",
        'unset NUBE_SANDBOX_STORE (auto): nube makes a store image with a disk limit per sandbox',
      ),
    ];
  }
  const u = await storeUsage(config);
  const { status, mounted } = u;
  if (status?.image) {
    const line = `${status.fsType} image ${status.image.path}: ${gb(u.sizeBytes)} sparse, ${gb(u.allocatedBytes)} taken, ${
      mounted ? `mounted at ${status.root}` : 'not mounted now (nube mounts it when it starts)'
    }; forks and snapshots share blocks (reflinks)`;
    const out: CheckResult[] = [];
    // The image grows as sandboxes write, up to its size: past the reserve, the host's own writes suffer.
    const over = u.overcommitBytes > 0 ? ` (${gb(u.overcommitBytes)} of it past the reserve: the host's own use grew since it was made)` : '';
    const room = `the host has ${gb(u.hostFreeBytes)} free, the reserve is ${gb(u.reserveBytes)} (NUBE_STORE_RESERVE_GB), the store may take ${gb(u.growthBytes)} more${over}`;
    const act = 'free disk space on the host, or delete sandboxes and snapshots (their blocks go back to the host)';
    if (u.headroomBytes < 0) out.push(warn(`${line}; ${room}: the host is inside its reserve`, act));
    else if (u.nearReserve) out.push(warn(`${line}; ${room}: the host nears its reserve`, act));
    else out.push(ok(`${line}; ${room}`));
    if (!mounted) out.push(ok("sandboxes' disk limits: told when nube mounts the store"));
    else if (status.quota) out.push(ok(`sandboxes' disk limits: ${status.quota === 'xfs-project' ? 'XFS project quotas (a write past a sandbox\'s diskMB fails with ENOSPC)' : 'btrfs qgroups (a write past a sandbox\'s diskMB fails with EDQUOT)'}`));
    else {
      out.push(
        warn(
          "sandboxes' disks are not limited: the store is mounted without project quotas (XFS without prjquota, or a kernel without XFS quotas)",
          'stop nube, run `nube cleanup` (unmounts the store when no sandbox runs) and start nube again; on a kernel without XFS quotas, a new data dir gets a btrfs store',
        ),
      );
    }
    return out;
  }
  const dir = existing(dataDir);
  const type = await fsType(dir).catch(() => 'unknown');
  if (type === 'xfs' || type === 'btrfs') {
    return [
      ok(`the data dir is on ${type}: used directly when it makes reflinks (xfs needs reflink=1), else copies`),
      warn("sandboxes' disks are not limited when the data dir's own filesystem is the store", 'put NUBE_DATA_DIR on another filesystem (ext4): nube makes a store image there with a disk limit per sandbox'),
    ];
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
  const spare = u.headroomBytes;
  if (spare < 1024 ** 3) {
    return fail(
      `the data dir is on ${type} with ${gb(u.hostFreeBytes)} free and a reserve of ${gb(u.reserveBytes)} (NUBE_STORE_RESERVE_GB): no room for the sandbox store`,
      'free disk space on the host or lower NUBE_STORE_RESERVE_GB',
    );
  }
  return ok(
    `the data dir is on ${type} (no reflinks): the first sandbox makes a sparse image of up to ${gb(spare)} (free space less the reserve) for forks to share blocks and each sandbox's disk to be limited`,
  );
}
