import { request } from 'node:http';
import { createGzip } from 'node:zlib';
import { pack } from 'tar-stream';
import { ZipFile } from 'yazl';

export interface SiteResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  text: string;
}

/**
 * A request to a published site through nube's own listener with the site's Host header (what a
 * browser sends for `http://<slug>.sites.localhost:<port>`), so no DNS is involved.
 */
export function siteRequest(
  siteUrl: string,
  baseUrl: string,
  path = '/',
  opts: { method?: string; headers?: Record<string, string> } = {},
): Promise<SiteResponse> {
  const host = new URL(siteUrl).host;
  const base = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: base.hostname,
        port: base.port,
        path,
        method: opts.method ?? 'GET',
        headers: { ...opts.headers, host },
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => {
          const body = Buffer.concat(parts);
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body, text: body.toString('utf8') });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** A zip of `files` (path -> content). */
export function zipOf(files: Record<string, string | Buffer>): Promise<Buffer> {
  const zip = new ZipFile();
  for (const [path, content] of Object.entries(files)) zip.addBuffer(Buffer.from(content), path);
  zip.end();
  return collect(zip.outputStream);
}

export interface TarEntry {
  name: string;
  content?: string | Buffer;
  type?: 'file' | 'directory' | 'symlink';
  linkname?: string;
}

/** A gzipped tar (or a plain one) of the entries, written as given (so hostile names survive). */
export function tarOf(entries: TarEntry[], gzip = true): Promise<Buffer> {
  const p = pack();
  for (const e of entries) {
    if (e.type === 'symlink')
      p.entry({ name: e.name, type: 'symlink', linkname: e.linkname ?? '/etc/passwd' });
    else if (e.type === 'directory') p.entry({ name: e.name, type: 'directory' });
    else p.entry({ name: e.name }, e.content ?? '');
  }
  p.finalize();
  return collect(gzip ? p.pipe(createGzip()) : p);
}

async function collect(stream: AsyncIterable<unknown>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of stream) parts.push(c as Buffer);
  return Buffer.concat(parts);
}
