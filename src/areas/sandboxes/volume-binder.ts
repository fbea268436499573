// How sandboxes get volumes (issue 33) without knowing the volumes area: it plugs a binder in
// (`core.volumes`) that owns which sandbox holds which volume. Sandboxes ask it where the volumes are
// (placement), record the mounts before a start, ask for the host paths at each start, and release
// them when the record goes.
import type { VolumeMount } from './runtime/driver.js';

export interface SandboxVolume {
  volumeId: string;
  /** Absolute, normalized path inside the sandbox (checked by the schema). */
  path: string;
  readOnly: boolean;
}

export interface VolumeBinder {
  /** The node holding every one of them (404 for an unknown or another account's volume; 400 when on several nodes). */
  nodeOf(ownerId: string, mounts: SandboxVolume[]): Promise<string | null>;
  /**
   * Records the sandbox's mounts: 409 `VolumeBusy` when a writer holds one it writes or a second writer
   * asks. With `holder` (a machine or an agent), the mounts are its holder's: they take no writer slot.
   */
  attach(ownerId: string, sandboxId: string, mounts: SandboxVolume[], holder?: string): Promise<void>;
  /**
   * A machine or an agent holds the volumes across its boxes (checked as attach checks; the volume
   * cannot be deleted while held); the node holding them.
   */
  hold(ownerId: string, holderId: string, mounts: SandboxVolume[]): Promise<string | null>;
  release(holderId: string): Promise<void>;
  /** The driver's mounts for a start. */
  mountsOf(sandboxId: string): Promise<VolumeMount[]>;
  /** Its mounts (or a holder's holds), as the API shows them. */
  listOf(sandboxId: string): Promise<SandboxVolume[]>;
  detach(sandboxId: string): Promise<void>;
}

/** Paths no volume may cover or sit in: the kernel's and nube's own. */
const RESERVED = ['/proc', '/sys', '/dev', '/.nube'];

const inside = (path: string, dir: string) => path === dir || path.startsWith(`${dir}/`);

/** Why a volume's mount path is refused, or null. `path` is already absolute and normalized. */
export function mountPathProblem(path: string): string | null {
  if (path === '/') return 'a volume cannot be mounted on /';
  for (const r of RESERVED)
    if (inside(path, r) || inside(r, path)) return `a volume cannot be mounted on or over ${r}`;
  return null;
}

/** Index pairs of mounts whose paths overlap (one is the other or inside it). */
export function overlappingMounts(paths: string[]): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < paths.length; i++)
    for (let j = i + 1; j < paths.length; j++)
      if (inside(paths[i]!, paths[j]!) || inside(paths[j]!, paths[i]!)) out.push([i, j]);
  return out;
}
