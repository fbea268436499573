// envd's plain HTTP side: GET /files (download), POST /files (multipart upload), GET /health. Errors
// as envd writes them: `{code, message}` with the HTTP status.
import { posix } from 'node:path';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { Principal } from '../../platform/auth.js';
import { ApiError } from '../../platform/errors.js';
import { ConnectError } from './connect-rpc.js';
import { absolute } from './filesystem.js';
import { boundaryOf, parseMultipart } from './multipart.js';

type Req = FastifyRequest<{ Querystring: { path?: string } }>;

function fail(reply: FastifyReply, status: number, message: string) {
  return reply.code(status).send({ code: status, message });
}

export class EnvdHttp {
  constructor(private readonly sandboxes: SandboxesService) {}

  async download(p: Principal, id: string, req: Req, reply: FastifyReply) {
    const path = absolute(req.query.path);
    const r = (await this.sandboxes.work.file(p, id, 'read', { path, encoding: 'base64' })) as { content: string };
    const data = Buffer.from(r.content, 'base64');
    return reply
      .code(200)
      .header('content-type', 'application/octet-stream')
      .header('content-disposition', `attachment; filename="${encodeURIComponent(posix.basename(path))}"`)
      .send(data);
  }

  async upload(p: Principal, id: string, req: Req, reply: FastifyReply) {
    const body = (req.body as Buffer | undefined) ?? Buffer.alloc(0);
    const type = req.headers['content-type'] ?? '';
    const files: { path: string; data: Buffer }[] = [];
    if (type.startsWith('multipart/form-data')) {
      const boundary = boundaryOf(type);
      if (!boundary) return fail(reply, 400, 'multipart body without a boundary');
      for (const part of parseMultipart(body, boundary)) {
        if (part.name !== 'file') continue;
        const target = req.query.path ?? part.filename;
        if (!target) return fail(reply, 400, 'a file part needs a path (query `path` or its filename)');
        files.push({ path: absolute(target), data: part.data });
      }
    } else if (type.startsWith('application/octet-stream')) {
      if (!req.query.path) return fail(reply, 400, 'query `path` is required');
      files.push({ path: absolute(req.query.path), data: body });
    } else return fail(reply, 400, `unsupported content type ${type || '(none)'}`);
    if (files.length === 0) return fail(reply, 400, 'no file in the upload');
    const out = [];
    for (const f of files) {
      await this.sandboxes.work.file(p, id, 'write', { path: f.path, content: f.data.toString('base64'), encoding: 'base64' });
      out.push({ name: posix.basename(f.path), type: 'file', path: f.path });
    }
    return reply.code(200).send(out);
  }

  /** Error to envd's shape: a missing file is 404, bad input 400, a stopped sandbox 502 (as E2B's proxy). */
  error(reply: FastifyReply, e: unknown, log: { error(o: object, m: string): void }) {
    if (e instanceof ConnectError) return fail(reply, e.code === 'invalid_argument' ? 400 : 500, e.message);
    if (e instanceof ApiError) return fail(reply, e.status, e.message);
    log.error({ err: e }, 'e2b adapter: unexpected error');
    return fail(reply, 500, 'internal error');
  }
}
