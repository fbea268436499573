// What the sandbox store takes of the host and how close the host is to the operator's reserve
// (NUBE_STORE_RESERVE_GB): read by `nube doctor` and /metrics. Read-only: it makes and mounts nothing.
import { existsSync } from 'node:fs';
import { statfs } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Config } from '../../platform/config-shape.js';
import { inspectStore, type StoreStatus } from './runtime/namespaces/store.js';
import { runtimeDataDir } from './runtime-dir.js';

export interface StoreUsage {
  /** The image's status (kind, fs, quota); null when no image was made (copies, or not yet). */
  status: StoreStatus | null;
  mounted: boolean;
  /** The image's apparent size: how far it may grow. */
  sizeBytes: number;
  /** What the image takes on the host now. */
  allocatedBytes: number;
  /** Free space of the filesystem holding the data dir (what a non-root writer gets). */
  hostFreeBytes: number;
  reserveBytes: number;
  /** Host free space beyond the reserve; negative once the host is inside its reserve. */
  headroomBytes: number;
  /** How much more the image may take before it is full. */
  growthBytes: number;
  /** How much of what the store may still take the host could not give beyond its reserve (0: none). */
  overcommitBytes: number;
  /** The host's free space is within half a reserve of the reserve, or inside it: time to act. */
  nearReserve: boolean;
}

/** The nearest existing directory (the data dir may not exist before the first sandbox). */
export function existing(dir: string): string {
  let d = dir;
  while (!existsSync(d) && d !== dirname(d)) d = dirname(d);
  return d;
}

export async function storeUsage(config: Config): Promise<StoreUsage> {
  const dataDir = runtimeDataDir(config);
  const { status, mounted, allocatedBytes = 0 } = await inspectStore(dataDir);
  const fs = await statfs(existing(dataDir));
  const hostFreeBytes = fs.bavail * fs.bsize;
  const reserveBytes = config.sandboxes.storeReserveBytes;
  const headroomBytes = hostFreeBytes - reserveBytes;
  const sizeBytes = status?.image?.sizeBytes ?? 0;
  const growthBytes = Math.max(0, sizeBytes - allocatedBytes);
  return {
    status,
    mounted,
    sizeBytes,
    allocatedBytes,
    hostFreeBytes,
    reserveBytes,
    headroomBytes,
    growthBytes,
    overcommitBytes: Math.max(0, growthBytes - Math.max(0, headroomBytes)),
    nearReserve: headroomBytes < reserveBytes / 2,
  };
}
