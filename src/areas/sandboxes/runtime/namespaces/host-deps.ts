import { run } from './proc.js';

/** Debian packages the namespaces driver needs on the host (kept in sync with scripts/install-host-deps.sh). */
export const HOST_PACKAGES = [
  'mmdebstrap',
  'bubblewrap',
  'uidmap',
  'nftables',
  'iproute2',
  'util-linux',
  'libseccomp-dev',
  'gcc',
  'libc6-dev',
  'patch',
  'rsync',
  // mkfs.xfs for the reflink store's image (store.ts): forks share blocks instead of copying them.
  'xfsprogs',
  // The store is btrfs where the kernel's XFS has no quotas (CONFIG_XFS_QUOTA): qgroups limit each sandbox's disk.
  'btrfs-progs',
];

/** What the gVisor driver needs on top (Debian's runsc; scripts/install-host-deps.sh takes it from bookworm-backports). */
// make and curl: scripts/install-static-sh.sh builds the static sh gVisor sandboxes start commands with.
export const GVISOR_PACKAGES = ['runsc', 'make', 'curl'];

export async function missingPackages(wanted: string[]): Promise<string[]> {
  const res = await run('dpkg-query', ['-W', '-f=\u0024{Package} \u0024{Status}\n', ...wanted], {
    allowFailure: true,
  });
  const installed = new Set(
    res.stdout
      .split('\n')
      .filter((l) => l.endsWith('install ok installed'))
      .map((l) => l.split(' ')[0]),
  );
  return wanted.filter((p) => !installed.has(p));
}

/** Install what is missing with apt (root only), runsc too for the gVisor driver. Returns what it installed. */
export async function ensureHostPackages(
  onProgress?: (line: string) => void,
  driver: 'namespaces' | 'gvisor' = 'namespaces',
): Promise<string[]> {
  const missing = await missingPackages(driver === 'gvisor' ? [...HOST_PACKAGES, ...GVISOR_PACKAGES] : HOST_PACKAGES);
  if (missing.length === 0) return [];
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  await run('apt-get', ['update', '-qq'], { env, onLine: onProgress });
  await run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], {
    env,
    onLine: onProgress,
  });
  return missing;
}
