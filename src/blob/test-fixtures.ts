import { createHash, randomFillSync } from 'node:crypto';
import { access, mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { BlobError } from './errors.js';
import { startS3rver } from './s3rver-harness.js';
import { receiveUpload, serveBlob } from './serve.js';
import { type BlobStores, createBlobStores } from './stores.js';

/** Test-only clock: presign/verify read it, tests move it forward to test expiry. */
export class Clock {
  offsetMs = 0;
  now = (): number => Date.now() + this.offsetMs;
}

export interface Backend {
  stores: BlobStores;
  clock: Clock;
  /** Files or multipart leftovers of aborted writes in a location (local: its temp dir). */
  leftovers(location: string): Promise<string[]>;
  /** Whether the object is physically in the given location's directory or bucket. */
  physicallyIn(location: string, key: string): Promise<boolean>;
  close(): Promise<void>;
}

export const REGIONS = ['LATAM', 'US', 'EU'] as const;
const SIGNING_KEY = 'test-signing-key-0123456789abcdef-0123456789';

/** The route a Fastify handler will be: verify, claim the nonce once, then serve or receive. */
export async function startBlobHttp(getStores: () => BlobStores): Promise<{ baseUrl: string; server: Server }> {
  const usedNonces = new Set<string>();
  const server = createServer(async (req, res) => {
    try {
      const token = decodeURIComponent((req.url ?? '').replace(/^\/blob\//, '').split('?')[0]);
      const stores = getStores();
      const grant = stores.verify(token, req.method ?? '');
      const store = stores.at(grant.location);
      if (grant.method === 'PUT') {
        if (!grant.nonce || usedNonces.has(grant.nonce)) {
          res.writeHead(403, { connection: 'close' }).end('UsedToken');
          req.resume();
          return;
        }
        usedNonces.add(grant.nonce);
        const out = await receiveUpload(store, { ...grant, method: 'PUT' }, req, req.headers);
        res.writeHead(200, { 'content-type': 'application/json', etag: `"${out.etag}"` }).end(JSON.stringify(out));
        return;
      }
      const out = await serveBlob(store, grant.key, req.headers, req.method ?? 'GET');
      res.writeHead(out.status, out.headers);
      if (out.body) await pipeline(out.body, res);
      else res.end();
    } catch (err) {
      const status = err instanceof BlobError ? err.httpStatus : 500;
      if (!res.headersSent) res.writeHead(status, { connection: 'close' }).end(err instanceof BlobError ? err.code : 'Internal');
      else res.destroy();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { baseUrl: `http://127.0.0.1:${port}/blob`, server };
}

export async function localBackend(publicBaseUrl: string, parentDir = tmpdir()): Promise<Backend> {
  const root = await mkdtemp(join(parentDir, 'nube-blob-local-'));
  const clock = new Clock();
  const stores = createBlobStores({
    defaultLocation: 'US',
    locations: Object.fromEntries(REGIONS.map((r) => [r, { backend: 'local', dir: join(root, r.toLowerCase()) }])),
    local: { publicBaseUrl, signingKey: SIGNING_KEY },
    now: clock.now,
  });
  return {
    stores,
    clock,
    async leftovers(location) {
      return readdir(join(root, location.toLowerCase(), '~tmp')).catch(() => []);
    },
    async physicallyIn(location, key) {
      const path = join(root, location.toLowerCase(), `${key}~`);
      return access(path).then(
        () => true,
        () => false,
      );
    },
    async close() {
      stores.close();
      await rm(root, { recursive: true, force: true });
    },
  };
}

export async function s3Backend(): Promise<Backend> {
  const root = await mkdtemp(join(tmpdir(), 'nube-blob-s3rver-'));
  const buckets = REGIONS.map((r) => `nube-${r.toLowerCase()}`);
  const server = await startS3rver(root, buckets);
  const clock = new Clock();
  const stores = createBlobStores({
    defaultLocation: 'US',
    locations: Object.fromEntries(REGIONS.map((r) => [r, { backend: 's3', bucket: `nube-${r.toLowerCase()}` }])),
    s3: { endpoint: server.endpoint, credentials: server.credentials, region: 'us-east-1' },
    now: clock.now,
  });
  return {
    stores,
    clock,
    async leftovers(location) {
      // s3rver stages multipart uploads in `<bucket>/._S3rver_uploads/<uploadId>/` until completed.
      return readdir(join(root, `nube-${location.toLowerCase()}`, '._S3rver_uploads')).catch(() => []);
    },
    async physicallyIn(location, key) {
      // s3rver keeps an object's bytes in `<bucket>/<key>._S3rver_object`.
      const path = join(root, `nube-${location.toLowerCase()}`, `${key}._S3rver_object`);
      return access(path).then(
        () => true,
        () => false,
      );
    },
    async close() {
      stores.close();
      await server.stop();
      await rm(root, { recursive: true, force: true });
    },
  };
}

/** `total` bytes of random data in 1 MiB chunks, generated on demand; `digest()` once it is consumed. */
export function generated(total: number, chunk = 1 << 20): { stream: Readable; digest: () => string } {
  const hash = createHash('sha256');
  let sent = 0;
  const stream = new Readable({
    read() {
      if (sent >= total) {
        this.push(null);
        return;
      }
      const n = Math.min(chunk, total - sent);
      const buf = randomFillSync(Buffer.allocUnsafe(n));
      hash.update(buf);
      sent += n;
      this.push(buf);
    },
  });
  return { stream, digest: () => hash.digest('hex') };
}

export async function readAll(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of stream) parts.push(c as Buffer);
  return Buffer.concat(parts);
}
