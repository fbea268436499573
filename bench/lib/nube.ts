import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { loadConfig } from '../../src/config.js';
import { buildServer, type Nube } from '../../src/server.js';
import { newOwnerKey } from '../../test/helpers/server.js';

export interface BenchNube {
  nube: Nube;
  /** Listen URL, e.g. http://127.0.0.1:41234. */
  base: string;
  key: string;
  /** Removes the data dir after closing. */
  close(): Promise<void>;
}

/**
 * nube in this process on a loopback port, with a fresh data dir under the working directory, warn-level
 * logs and outbound fetches to 127.0.0.1 allowed (the benches' local servers); `env` adds to or overrides that.
 */
export async function startBenchNube(tag: string, env: Record<string, string> = {}): Promise<BenchNube> {
  const dataDir = await mkdtemp(join(process.cwd(), `data-bench-${tag}-`));
  const key = newOwnerKey();
  const nube = await buildServer(
    loadConfig({
      NUBE_DATA_DIR: dataDir,
      NUBE_PORT: '0',
      NUBE_OWNER_KEY: key,
      NUBE_LOG_LEVEL: 'warn',
      NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
      ...env,
    }),
  );
  const base = await nube.listen();
  return {
    nube,
    base,
    key,
    async close() {
      await nube.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
