// One nube as an operating-system process on either metadata store, for fault rounds: started, stopped
// with SIGTERM (nube's own shutdown) or killed with SIGKILL mid-work, and started again on the same data
// directory and database, as a host's service manager would.
import type { ChildProcess } from 'node:child_process';
import { request } from 'node:http';
import { mkdirSync, rmSync } from 'node:fs';
import { createTempDatabase, type DialectName } from './pg.js';
import { exited, freePort, spawnNube } from './process.js';
import { callJson, newOwnerKey } from './server.js';

export interface NubeProcess {
  readonly base: string;
  readonly port: number;
  readonly ownerKey: string;
  readonly dataDir: string;
  /** The PostgreSQL database's URL (postgres only). */
  readonly databaseUrl: string | undefined;
  /** A call with the owner's key (or `key`). */
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  call(method: string, path: string, body?: unknown, key?: string): Promise<{ status: number; body: any }>;
  /** Starts nube (again), from `root` (another checkout, built) or this one; resolves once it answers. */
  start(root?: string): Promise<void>;
  /** Sends the signal and waits for the process to end. */
  stop(signal: NodeJS.Signals): Promise<void>;
  readonly running: boolean;
  /** Stops it (SIGTERM), drops its database and removes its data directory. */
  close(): Promise<void>;
}

export async function nubeProcess(dialect: DialectName, dataDir: string, env: Record<string, string>): Promise<NubeProcess> {
  mkdirSync(dataDir, { recursive: true });
  const pg = dialect === 'postgres' ? await createTempDatabase('proc') : undefined;
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const ownerKey = newOwnerKey();
  const full: Record<string, string> = {
    NUBE_DATA_DIR: dataDir,
    NUBE_PORT: String(port),
    NUBE_HOST: '127.0.0.1',
    NUBE_OWNER_KEY: ownerKey,
    NUBE_LOG_LEVEL: process.env.NUBE_TEST_NODE_LOG ?? 'silent',
    NUBE_JOB_POLL_MS: '50',
    ...(pg ? { DATABASE_URL: pg.url } : {}),
    ...env,
  };
  let child: ChildProcess | null = null;
  const p: NubeProcess = {
    base,
    port,
    ownerKey,
    dataDir,
    databaseUrl: pg?.url,
    call: (method, path, body, key) => callJson(base, method, path, body, { authorization: `Bearer ${key ?? ownerKey}` }),
    async start(root) {
      // Under a loaded machine tsx compiles the whole server per process: minutes are possible.
      child = await spawnNube(full, base, { startMs: 300_000, root });
    },
    async stop(signal) {
      const c = child;
      if (!c) return;
      child = null;
      c.kill(signal);
      await exited(c);
    },
    get running() {
      return child !== null;
    },
    async close() {
      const c = child;
      if (c) {
        const force = setTimeout(() => c.kill('SIGKILL'), 30_000);
        await p.stop('SIGTERM');
        clearTimeout(force);
      }
      await pg?.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return p;
}

/** A machine's or sandbox's app through the child's port proxy (its URL's Host; no DNS for *.localhost needed). */
export function viaPortProxy(n: NubeProcess, url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: n.port, path: '/', headers: { host: new URL(url).host } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => {
        body += c.toString();
      });
      res.on('end', () => resolve(res.statusCode === 200 ? body.trim() : `HTTP ${res.statusCode}: ${body}`));
    });
    req.on('error', reject);
    req.end();
  });
}
