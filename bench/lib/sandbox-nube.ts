// An in-process nube with sandboxes for the benches that need them (agents, fleet, machines): its own
// data directory and bridge, the shared template builds, silent logs, a fast job poll.
import { mkdirSync } from 'node:fs';
import { loadConfig } from '../../src/config.js';
import { BASE62, randomToken } from '../../src/platform/ids.js';
import { buildServer, type Nube } from '../../src/server.js';

export const BENCH_ROOT = process.env.NUBE_BENCH_DATA ?? '/var/lib/nube-test';

/** Starts it listening on a loopback port; `bridge` is `name:cidr`, distinct per bench. */
export async function startSandboxNube(
  name: string,
  bridge: string,
  env: Record<string, string>,
): Promise<{ nube: Nube; key: string; dataDir: string; baseUrl: string }> {
  const dataDir = `${BENCH_ROOT}/bench-${name}-${process.pid}`;
  mkdirSync(dataDir, { recursive: true });
  const key = `nube_sk_live_${randomToken(40, BASE62)}`;
  const nube = await buildServer(
    loadConfig({
      NUBE_DATA_DIR: dataDir,
      NUBE_PORT: '0',
      NUBE_OWNER_KEY: key,
      NUBE_LOG_LEVEL: 'silent',
      NUBE_JOB_POLL_MS: '50',
      NUBE_TEMPLATES_DIR: `${BENCH_ROOT}/templates`,
      NUBE_SANDBOX_BRIDGE: bridge,
      NUBE_SANDBOX_CGROUP: 'nube-bench',
      // No store image: these benches remove their data dirs without unmounting one (bench/sandboxes
      // measures the store).
      NUBE_SANDBOX_STORE: 'copy',
      ...env,
    }),
  );
  return { nube, key, dataDir, baseUrl: await nube.listen() };
}
