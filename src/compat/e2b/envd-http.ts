// envd's plain HTTP side: GET /files (download), POST /files (upload: multipart or octet-stream,
// optionally gzip-encoded, with `X-Metadata-*` headers), GET /health. As envd's, files are read and
// written as root and what is written belongs to the call's user (`username`), whose home relative
// paths start from. Errors as envd writes them: `{code, message}` with the HTTP status.
import { posix } from 'node:path';
import { createGzip, gunzipSync } from 'node:zlib';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { Principal } from '../../platform/auth.js';
import { ApiError } from '../../platform/errors.js';
import { ConnectError } from './connect-rpc.js';
import { absolute, ENSURE_DIRS } from './filesystem.js';
import { metadataArgs, metadataFromHeaders, SET_METADATA_SCRIPT } from './metadata.js';
import { boundaryOf, parseMultipart } from './multipart.js';
import type { E2bUser } from './users.js';

export type FilesReq = FastifyRequest<{ Querystring: { path?: string; username?: string } }>;

const MISSING = 44;
const IS_DIR = 21;

const READ = `[ -e "$1" ] || exit ${MISSING}; [ -d "$1" ] && exit ${IS_DIR}; exec cat -- "$1"`;
// $1 path, $2 uid:gid, then the metadata's key=hex pairs.
const WRITE = `${ENSURE_DIRS}
f=$1; u=$2; shift 2
[ -d "$f" ] && exit ${IS_DIR}
ensure "$(dirname -- "$f")" "$u" || exit 1
# Owned by the user before a byte is written (as envd does), then written.
[ -e "$f" ] || : > "$f" || exit 1
chown "$u" -- "$f" && cat > "$f" || exit 1
set -- "$f" "$@"
${SET_METADATA_SCRIPT}`;

type Log = { error(o: object, m: string): void };

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function fail(reply: FastifyReply, status: number, message: string) {
  return reply.code(status).send({ code: status, message });
}

export class EnvdHttp {
  constructor(
    private readonly sandboxes: SandboxesService,
    /** Decompressed uploads past this many bytes are refused (a gzip bomb is cut short). */
    private readonly maxUploadBytes: number,
  ) {}

  /** The file's bytes as they are read (gzip-encoded when the client takes it); 404 when missing. */
  async download(p: Principal, id: string, user: E2bUser, req: FilesReq, reply: FastifyReply, log: Log) {
    const path = absolute(req.query.path, user.home);
    const gzip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
    reply.hijack();
    const res = reply.raw;
    let body: NodeJS.WritableStream | undefined;
    const open = () => {
      if (body) return body;
      res.writeHead(200, {
        'content-type': 'application/octet-stream',
        'content-disposition': `attachment; filename="${encodeURIComponent(posix.basename(path))}"`,
        ...(gzip ? { 'content-encoding': 'gzip' } : {}),
      });
      if (gzip) {
        const z = createGzip();
        z.pipe(res);
        body = z;
      } else body = res;
      return body;
    };
    const err: Buffer[] = [];
    try {
      const r = await this.sandboxes.work.execStream(
        p,
        id,
        ['/bin/sh', '-c', READ, 'sh', path],
        { cwd: '/' },
        { stdout: (b) => open().write(b), stderr: (b) => err.push(b) },
      );
      if (!body && r.exitCode !== 0) {
        const why =
          r.exitCode === MISSING
            ? new HttpError(404, `path '${path}' does not exist`)
            : r.exitCode === IS_DIR
              ? new HttpError(400, `path '${path}' is a directory`)
              : new HttpError(500, Buffer.concat(err).toString('utf8').trim() || `reading ${path} failed`);
        res.writeHead(why.status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ code: why.status, message: why.message }));
        return;
      }
      // Failing halfway: the download cannot say so but by breaking off.
      if (r.exitCode !== 0) return void res.destroy();
      if (!body) {
        // An empty file: the SDK reads `content-length: 0` as one.
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': '0' });
        return void res.end();
      }
      body === res ? res.end() : body.end();
    } catch (e) {
      if (body) return void res.destroy();
      const why = this.statusOf(e, log);
      res.writeHead(why.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ code: why.status, message: why.message }));
    }
  }

  async upload(p: Principal, id: string, user: E2bUser, req: FilesReq, reply: FastifyReply) {
    let body = (req.body as Buffer | undefined) ?? Buffer.alloc(0);
    const encoding = String(req.headers['content-encoding'] ?? 'identity').toLowerCase();
    if (encoding === 'gzip') {
      try {
        body = gunzipSync(body, { maxOutputLength: this.maxUploadBytes });
      } catch (e) {
        return fail(reply, 400, `error decompressing request body: ${(e as Error).message}`);
      }
    } else if (encoding !== 'identity') return fail(reply, 400, `unsupported content encoding ${encoding}: gzip or identity`);
    let metadata: Record<string, string>;
    try {
      metadata = metadataFromHeaders(req.headers);
    } catch (e) {
      return fail(reply, 400, `invalid metadata: ${(e as Error).message}`);
    }
    const type = req.headers['content-type'] ?? '';
    const files: { path: string; data: Buffer }[] = [];
    if (type.startsWith('multipart/form-data')) {
      const boundary = boundaryOf(type);
      if (!boundary) return fail(reply, 400, 'multipart body without a boundary');
      for (const part of parseMultipart(body, boundary)) {
        if (part.name !== 'file') continue;
        const target = req.query.path ?? part.filename;
        if (!target) return fail(reply, 400, 'a file part needs a path (query `path` or its filename)');
        const path = absolute(target, user.home);
        if (files.some((f) => f.path === path)) {
          return fail(reply, 400, `you cannot upload multiple files to the same path '${path}' in one upload request`);
        }
        files.push({ path, data: part.data });
      }
    } else if (type.startsWith('application/octet-stream')) {
      if (!req.query.path) return fail(reply, 400, 'path query parameter is required for raw body upload');
      files.push({ path: absolute(req.query.path, user.home), data: body });
    } else return fail(reply, 400, `unsupported content type: ${type || '(none)'}, expected multipart/form-data or application/octet-stream`);
    if (files.length === 0) return fail(reply, 400, 'no file in the upload');
    const out = [];
    for (const f of files) {
      await this.write(p, id, user, f.path, f.data, metadata);
      out.push({ name: posix.basename(f.path), type: 'file', path: f.path, ...(Object.keys(metadata).length ? { metadata } : {}) });
    }
    return reply.code(200).send(out);
  }

  private async write(p: Principal, id: string, user: E2bUser, path: string, data: Buffer, metadata: Record<string, string>) {
    const err: Buffer[] = [];
    const r = await this.sandboxes.work.execStream(
      p,
      id,
      ['/bin/sh', '-c', WRITE, 'sh', path, `${user.uid}:${user.gid}`, ...metadataArgs(metadata)],
      { cwd: '/', stdin: data },
      { stdout: () => {}, stderr: (b) => err.push(b) },
    );
    if (r.exitCode === IS_DIR) throw new HttpError(400, `path is a directory: ${path}`);
    const why = Buffer.concat(err).toString('utf8').trim();
    if (r.exitCode !== 0) throw new HttpError(/No space left/.test(why) ? 507 : 500, why || `writing ${path} failed (exit ${r.exitCode})`);
  }

  /** An error in envd's terms: a missing file is 404, bad input 400. */
  statusOf(e: unknown, log: Log): { status: number; message: string } {
    if (e instanceof HttpError || e instanceof ApiError) return { status: e.status, message: e.message };
    if (e instanceof ConnectError) return { status: e.code === 'invalid_argument' ? 400 : e.code === 'not_found' ? 404 : 500, message: e.message };
    log.error({ err: e }, 'e2b adapter: unexpected error');
    return { status: 500, message: 'internal error' };
  }

  error(reply: FastifyReply, e: unknown, log: Log) {
    const why = this.statusOf(e, log);
    return fail(reply, why.status, why.message);
  }
}
