import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startS3rver } from '../../src/blob/s3rver-harness.js';
import type { BusEvent } from '../../src/platform/events.js';
import type { DialectName } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';

export type BlobBackend = 'local' | 's3';
export interface Setup {
  dialect: DialectName;
  backend: BlobBackend;
}
/** Both metadata dialects and both blob backends, without running the full 2x2 product. */
export const SETUPS: Setup[] = [
  { dialect: 'sqlite', backend: 'local' },
  { dialect: 'postgres', backend: 'local' },
  { dialect: 'sqlite', backend: 's3' },
];
export const setupName = (s: Setup) => `${s.dialect} + ${s.backend}`;

export interface FilesNube extends TestNube {
  events: BusEvent[];
  ownerId: string;
  api: FilesApi;
}

/** A nube with the chosen dialect and blob backend (s3rver on loopback for s3), recording bus events. */
export async function startFilesNube(setup: Setup, env: Record<string, string> = {}): Promise<FilesNube> {
  let stopS3: (() => Promise<void>) | undefined;
  const extra: Record<string, string> = { ...env };
  if (setup.backend === 's3') {
    const dir = mkdtempSync(join(tmpdir(), 'nube-files-s3-'));
    const s3 = await startS3rver(dir, ['nube-files']);
    stopS3 = async () => {
      await s3.stop();
      rmSync(dir, { recursive: true, force: true });
    };
    Object.assign(extra, {
      NUBE_BLOB_BACKEND: 's3',
      NUBE_S3_ENDPOINT: s3.endpoint,
      NUBE_S3_BUCKET: 'nube-files',
      NUBE_S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
      NUBE_S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
    });
  }
  const t = await startNube({ dialect: setup.dialect, env: extra });
  const events: BusEvent[] = [];
  t.nube.deps.bus.subscribe((e) => {
    events.push(e);
  });
  const api = filesApi(t);
  const ownerId = (await json(await api('/account'))).id as string;
  return {
    ...t,
    events,
    ownerId,
    api,
    async close() {
      await t.close();
      await stopS3?.();
    },
  };
}

export type FilesApi = (path: string, init?: RequestInit & { key?: string }) => Promise<Response>;

/** fetch under /api/v2 with the owner's key (or `key`); `baseUrl` is read per request (a cluster's client spreads them). */
export function filesApi(t: { readonly baseUrl: string; ownerKey: string }): FilesApi {
  return (path, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set('authorization', `Bearer ${init.key ?? t.ownerKey}`);
    if (init.body !== undefined && !headers.has('content-type')) headers.set('content-type', 'application/json');
    return fetch(`${t.baseUrl}/api/v2${path}`, { ...init, headers });
  };
}

/** POST /files then PUT the bytes; returns the created file as the PUT answered it. */
export async function upload(
  t: { api: FilesApi },
  name: string,
  data: Buffer,
  extra: Record<string, unknown> = {},
  key?: string,
  // biome-ignore lint/suspicious/noExplicitAny: test JSON
): Promise<any> {
  const created = await t.api('/files', {
    method: 'POST',
    key,
    body: JSON.stringify({ fileName: name, contentType: 'text/plain', size: data.byteLength, ...extra }),
  });
  if (created.status !== 201) throw new Error(`POST /files answered ${created.status}: ${await created.text()}`);
  const { putUrl } = await json(created);
  const put = await fetch(putUrl, { method: 'PUT', body: data, headers: { 'content-type': String(extra.contentType ?? 'text/plain') } });
  if (put.status !== 200) throw new Error(`PUT answered ${put.status}: ${await put.text()}`);
  return (await json(put)).file;
}

/**
 * An OpenAI-compatible embeddings server: each word of the input is hashed into one of 256
 * dimensions, so texts sharing words ("invoice" and "invoice-march.pdf") have a high cosine.
 */
export async function startEmbeddingsServer(): Promise<{ baseUrl: string; requests: string[][]; keys: string[]; server: Server }> {
  const requests: string[][] = [];
  const keys: string[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/embeddings') {
        res.writeHead(404).end();
        return;
      }
      keys.push(String(req.headers.authorization));
      const { input } = JSON.parse(body) as { input: string | string[]; model: string };
      const inputs = Array.isArray(input) ? input : [input];
      requests.push(inputs);
      const data = inputs.map((text, index) => ({ object: 'embedding', index, embedding: bagOfWords(text) }));
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ object: 'list', data, model: 'bow' }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, requests, keys, server };
}

function bagOfWords(text: string): number[] {
  const v = new Array<number>(256).fill(0);
  for (const word of text.toLowerCase().split(/[^a-z0-9]+/).filter(Boolean)) {
    let h = 2166136261;
    for (const ch of word) h = Math.imul(h ^ ch.charCodeAt(0), 16777619) >>> 0;
    v[h % 256]! += 1;
  }
  return v;
}
