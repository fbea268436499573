// Each sandbox's disk limit on the store (issue 28): its upper and work dirs live in one directory,
// `<sandbox>/disk`, that the kernel limits, so a sandbox that fills its disk gets a write error at
// its own limit and leaves the store (and the host) to the others. Set up by the helper with ioctls
// (helper/disk.c) in one spawner request:
//   xfs-project  an XFS project per sandbox (its address lease + 1: unique among the store's live
//                sandboxes, suspended ones included); writes past the limit fail with ENOSPC and
//                `df` inside the sandbox shows the limit. Needs an XFS kernel built with quotas.
//   btrfs-qgroup a btrfs subvolume per sandbox whose qgroup limits referenced bytes; writes past it
//                fail with EDQUOT ("Disk quota exceeded"); `df` inside shows the whole store.
// A snapshot is a reflinked copy outside the disk dir (not charged to the sandbox); a fork's child
// gets a disk of its own with the parent's limit; a resume finds its disk as it was.

export type DiskQuotaKind = 'xfs-project' | 'btrfs-qgroup';

/** The launch field (helper/launch.c `d:`) that makes `dir` a disk limited to `mb` MiB (0: unlimited). */
export function diskField(kind: DiskQuotaKind, dir: string, projectId: number, mb: number): string {
  return `d:${kind === 'xfs-project' ? 'x' : 'b'}:${Math.max(0, Math.round(mb)) * 1024 * 1024}:${projectId}:${dir}`;
}

/** The XFS project of a sandbox: its lease index (unique per bridge, hence per store) + 1; 0 is no project. */
export function projectIdOf(leaseIdx: number): number {
  return leaseIdx + 1;
}
