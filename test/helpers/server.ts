import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config.js';
import { BASE62, randomToken } from '../../src/platform/ids.js';
import { buildServer, type Nube } from '../../src/server.js';
import { createTempDatabase, type DialectName } from './pg.js';

export interface TestNube {
  nube: Nube;
  baseUrl: string;
  ownerKey: string;
  dataDir: string;
  /** Authorization header for the owner. */
  auth: { authorization: string };
  close(): Promise<void>;
}

export function newOwnerKey(): string {
  return `nube_sk_live_${randomToken(40, BASE62)}`;
}

/** Starts a real nube on a loopback port with a fresh data dir (and a fresh PostgreSQL database if asked). */
export async function startNube(opts: { dialect?: DialectName; env?: Record<string, string>; dataDir?: string; listen?: boolean } = {}): Promise<TestNube> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'nube-test-'));
  const pgdb = opts.dialect === 'postgres' ? await createTempDatabase('srv') : undefined;
  const ownerKey = opts.env?.NUBE_OWNER_KEY ?? newOwnerKey();
  const config = loadConfig({
    NUBE_DATA_DIR: dataDir,
    NUBE_PORT: '0',
    NUBE_OWNER_KEY: ownerKey,
    NUBE_LOG_LEVEL: 'silent',
    NUBE_JOB_POLL_MS: '50',
    ...(pgdb ? { DATABASE_URL: pgdb.url } : {}),
    ...opts.env,
  });
  const nube = await buildServer(config);
  const baseUrl = opts.listen === false ? '' : await nube.listen();
  return {
    nube,
    baseUrl,
    ownerKey,
    dataDir,
    auth: { authorization: `Bearer ${ownerKey}` },
    async close() {
      await nube.close();
      await pgdb?.drop();
      if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A JSON call under /api/v2 with the owner's key: status and parsed body. */
// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
export type JsonCall = (method: string, path: string, body?: unknown, headers?: Record<string, string>) => Promise<{ status: number; body: any }>;

/**
 * What a test body needs of a nube: JSON calls (a SandboxNube in this process, or a client that
 * spreads its calls over the nodes of a cluster: test/nodes/processes.ts).
 */
export interface JsonCaller {
  call: JsonCall;
}

/** A response's JSON body, loosely typed for assertions. */
// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
export const json = (r: Response): Promise<any> => r.json() as Promise<any>;

/** Plain HTTP against a test nube under /api/v2 with one owner's key (the owner's by default). */
/** `t.baseUrl` is read per request: a cluster client (test/nodes/processes.ts) spreads the calls. */
export function caller(t: { readonly baseUrl: string; ownerKey: string }) {
  return (method: string, path: string, body?: unknown, key?: string) =>
    fetch(`${t.baseUrl}/api/v2${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key ?? t.ownerKey}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
}

/** A JSON call under /api/v2: status, parsed body (or the text when it is not JSON) and headers. */
export async function callJson(baseUrl: string, method: string, path: string, body: unknown, headers: Record<string, string>) {
  const r = await fetch(`${baseUrl}/api/v2${path}`, {
    method,
    headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  let parsed: any = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: r.status, body: parsed, headers: r.headers };
}
