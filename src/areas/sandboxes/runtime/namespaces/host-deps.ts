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
];

async function missingPackages(): Promise<string[]> {
  const res = await run('dpkg-query', ['-W', '-f=\u0024{Package} \u0024{Status}\n', ...HOST_PACKAGES], {
    allowFailure: true,
  });
  const installed = new Set(
    res.stdout
      .split('\n')
      .filter((l) => l.endsWith('install ok installed'))
      .map((l) => l.split(' ')[0]),
  );
  return HOST_PACKAGES.filter((p) => !installed.has(p));
}

/** Install what is missing with apt (root only). Returns the packages it installed. */
export async function ensureHostPackages(onProgress?: (line: string) => void): Promise<string[]> {
  const missing = await missingPackages();
  if (missing.length === 0) return [];
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  await run('apt-get', ['update', '-qq'], { env, onLine: onProgress });
  await run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], {
    env,
    onLine: onProgress,
  });
  return missing;
}
