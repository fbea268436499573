// A real OCI registry on loopback (Debian's docker-registry, CNCF distribution) for the template
// tests, images the tests make themselves as OCI layouts (layers from tar entries, gzip or zstd) pushed
// to it with skopeo, and a front server speaking Docker Hub's token flow (or lying about blobs).
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { pack } from 'tar-stream';
import { freePort } from '../services.js';

export interface RunningRegistry {
  origin: string;
  host: string;
  stop(): void;
}

/** Starts docker-registry on a free loopback port with its storage in a temporary dir. */
export async function startRegistry(): Promise<RunningRegistry> {
  const dir = mkdtempSync(join(tmpdir(), 'nube-registry-'));
  const port = await freePort();
  writeFileSync(
    `${dir}/config.yml`,
    [
      'version: 0.1',
      'log: { level: error }',
      'storage:',
      `  filesystem: { rootdirectory: ${dir}/data }`,
      '  delete: { enabled: true }',
      'http:',
      `  addr: 127.0.0.1:${port}`,
      '',
    ].join('\n'),
  );
  const child: ChildProcess = spawn('docker-registry', ['serve', `${dir}/config.yml`], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr?.on('data', (c: Buffer) => {
    err += c.toString();
  });
  const origin = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const ok = await fetch(`${origin}/v2/`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) break;
    if (i > 100 || child.exitCode !== null)
      throw new Error(`docker-registry did not start: ${err.slice(-1000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    origin,
    host: `127.0.0.1:${port}`,
    stop() {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface TarEntry {
  name: string;
  type?: 'file' | 'directory' | 'symlink' | 'link';
  mode?: number;
  uid?: number;
  gid?: number;
  content?: Buffer | string;
  /** A file of this many zero bytes (content ignored). */
  zeros?: number;
  linkname?: string;
}

export async function tarOf(entries: TarEntry[]): Promise<Buffer> {
  const p = pack();
  const chunks: Buffer[] = [];
  p.on('data', (c) => chunks.push(c as Buffer));
  const done = new Promise<void>((r) => p.on('end', () => r()));
  for (const e of entries) {
    const type = e.type ?? 'file';
    const body = e.zeros !== undefined ? Buffer.alloc(e.zeros) : Buffer.from(e.content ?? '');
    const header = {
      name: e.name,
      type,
      mode: e.mode ?? (type === 'directory' ? 0o755 : 0o644),
      uid: e.uid ?? 0,
      gid: e.gid ?? 0,
      linkname: e.linkname,
    };
    await new Promise<void>((resolve, reject) => {
      if (type === 'file')
        p.entry({ ...header, size: body.length }, body, (err) => (err ? reject(err) : resolve()));
      else p.entry(header, (err) => (err ? reject(err) : resolve()));
    });
  }
  p.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** A host file as an image entry (its bytes and mode). */
export function hostFile(from: string, name: string): TarEntry {
  return { name, content: readFileSync(from), mode: 0o755 };
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

export interface Layer {
  tar: Buffer;
  compression: 'gzip' | 'zstd' | 'none';
}

function compress(l: Layer): { blob: Buffer; mediaType: string } {
  if (l.compression === 'gzip')
    return { blob: gzipSync(l.tar), mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip' };
  if (l.compression === 'zstd')
    return {
      blob: execFileSync('zstd', ['-q', '-c'], { input: l.tar }),
      mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd',
    };
  return { blob: l.tar, mediaType: 'application/vnd.oci.image.layer.v1.tar' };
}

/**
 * Writes an OCI layout with one linux/amd64 image (and, with `otherArch`, an index naming an arm64
 * one too) and pushes it with skopeo to `registry/repo:tag`. Returns the amd64 manifest's digest.
 */
export function pushImage(
  registryHost: string,
  repo: string,
  tag: string,
  layers: Layer[],
  config: { Env?: string[]; Cmd?: string[]; WorkingDir?: string; User?: string } = {},
  o: { otherArch?: boolean } = {},
): string {
  const dir = mkdtempSync(join(tmpdir(), 'nube-oci-'));
  try {
    mkdirSync(`${dir}/blobs/sha256`, { recursive: true });
    const put = (b: Buffer) => {
      const d = sha(b);
      writeFileSync(`${dir}/blobs/sha256/${d}`, b);
      return { digest: `sha256:${d}`, size: b.length };
    };
    const made = layers.map(compress);
    const image = (arch: string) => {
      const cfg = Buffer.from(
        JSON.stringify({
          architecture: arch,
          os: 'linux',
          config,
          rootfs: { type: 'layers', diff_ids: layers.map((l) => `sha256:${sha(l.tar)}`) },
        }),
      );
      const manifest = Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: 'application/vnd.oci.image.manifest.v1+json',
          config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...put(cfg) },
          layers: made.map((m) => ({ mediaType: m.mediaType, ...put(m.blob) })),
        }),
      );
      return {
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        ...put(manifest),
        platform: { architecture: arch, os: 'linux' },
      };
    };
    const amd64 = image('amd64');
    const manifests = o.otherArch ? [image('arm64'), amd64] : [amd64];
    let top = manifests;
    if (o.otherArch) {
      // The layout's index names the multi-platform index, which names both images.
      const inner = Buffer.from(
        JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.index.v1+json', manifests }),
      );
      top = [
        { mediaType: 'application/vnd.oci.image.index.v1+json', ...put(inner) } as (typeof manifests)[0],
      ];
    }
    const withRef = top.map((m) => ({ ...m, annotations: { 'org.opencontainers.image.ref.name': tag } }));
    writeFileSync(`${dir}/index.json`, JSON.stringify({ schemaVersion: 2, manifests: withRef }));
    writeFileSync(`${dir}/oci-layout`, JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    execFileSync(
      'skopeo',
      [
        'copy',
        '--quiet',
        ...(o.otherArch ? ['--all'] : []),
        '--dest-tls-verify=false',
        `oci:${dir}:${tag}`,
        `docker://${registryHost}/${repo}:${tag}`,
      ],
      {
        stdio: 'pipe',
      },
    );
    return amd64.digest;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface FrontServer {
  origin: string;
  host: string;
  /** Requests that reached the token endpoint. */
  tokenRequests: number;
  close(): Promise<void>;
}

/**
 * A registry front on loopback: with `token`, Docker Hub's flow (401 with `WWW-Authenticate: Bearer
 * realm=<its /token>`, a token for the right Basic credentials, then the registry behind); with `lie`,
 * every blob's bytes come back altered.
 */
export async function startFront(
  upstream: string,
  o: { token?: { username: string; password: string }; lie?: boolean },
): Promise<FrontServer> {
  const issued = `tok-${Math.random().toString(36).slice(2)}`;
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const state: FrontServer = { origin, host: `127.0.0.1:${port}`, tokenRequests: 0, close: async () => {} };
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', origin);
    if (url.pathname === '/token') {
      state.tokenRequests++;
      const want = o.token
        ? `Basic ${Buffer.from(`${o.token.username}:${o.token.password}`).toString('base64')}`
        : '';
      if (req.headers.authorization !== want || !url.searchParams.get('scope')?.startsWith('repository:')) {
        res
          .writeHead(401, { 'content-type': 'application/json' })
          .end('{"errors":[{"code":"UNAUTHORIZED"}]}');
        return;
      }
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ token: issued, expires_in: 300 }));
      return;
    }
    if (o.token && req.headers.authorization !== `Bearer ${issued}`) {
      res
        .writeHead(401, {
          'www-authenticate': `Bearer realm="${origin}/token",service="front.test",scope="repository:${url.pathname.split('/').slice(2, -2).join('/')}:pull"`,
        })
        .end();
      return;
    }
    const up = httpRequest(
      `${upstream}${req.url}`,
      { method: req.method, headers: { accept: req.headers.accept ?? '*/*' } },
      (ur) => {
        const blob = o.lie && /\/blobs\/sha256:/.test(url.pathname) && ur.statusCode === 200;
        const headers = { ...ur.headers };
        if (!blob) {
          res.writeHead(ur.statusCode ?? 502, headers);
          ur.pipe(res);
          return;
        }
        const chunks: Buffer[] = [];
        ur.on('data', (c: Buffer) => chunks.push(c));
        ur.on('end', () => {
          const b = Buffer.concat(chunks);
          if (b.length > 600) b[b.length - 100] = (b[b.length - 100]! + 1) % 256;
          res.writeHead(200, headers).end(b);
        });
      },
    );
    up.on('error', () => res.writeHead(502).end());
    req.pipe(up);
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  state.close = () => new Promise((r) => server.close(() => r()));
  return state;
}

/** Polls a template until its build ends (or `ms` pass). */
export async function waitBuilt(
  t: { call(method: string, path: string): Promise<{ status: number; body: any }> },
  id: string,
  ms = 180_000,
) {
  const end = Date.now() + ms;
  let r = await t.call('GET', `/templates/${id}`);
  while (r.body.status === 'building' && Date.now() < end) {
    await new Promise((res) => setTimeout(res, 200));
    r = await t.call('GET', `/templates/${id}`);
  }
  return r.body;
}

/** Deletes every template through the API (then the caller stops nube) and stops the registry. */
export async function dropTemplates(
  t: { call(method: string, path: string): Promise<{ status: number; body: any }> } | undefined,
): Promise<void> {
  if (!t) return;
  for (const x of (await t.call('GET', '/templates')).body?.templates ?? [])
    await t.call('DELETE', `/templates/${x.id}`);
}

const APPLETS = ['sh', 'cat', 'mkdir', 'chmod', 'chown', 'ln', 'su', 'id', 'ls', 'httpd', 'wget', 'stat', 'pwd', 'rm', 'sleep', 'true', 'echo'];

/** An image layer of busybox (busybox-static on the host): a shell, the tools a build needs, user `app` (1000). */
export function busyboxLayer(): Promise<Buffer> {
  return tarOf([
    { name: 'bin/', type: 'directory' },
    hostFile('/bin/busybox', 'bin/busybox'),
    ...APPLETS.map((a) => ({ name: `bin/${a}`, type: 'symlink' as const, linkname: 'busybox' })),
    { name: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n' },
    { name: 'etc/group', content: 'root:x:0:\napp:x:1000:\n' },
    { name: 'home/app/', type: 'directory', uid: 1000, gid: 1000 },
  ]);
}
