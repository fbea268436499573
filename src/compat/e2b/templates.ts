// E2B's template builds (`Template.build(t, {alias})` of the `e2b` SDK) on nube's templates area. The
// SDK asks for a build (POST /v3/templates), uploads each `copy`'s files as a .tar.gz to the link it is
// given unless the link says they are present already (GET /templates/{id}/files/{hash}), starts the
// build with its steps (POST /v2/templates/{id}/builds/{buildID}) and polls its status and log lines
// (GET .../status?logsOffset=n). Here the steps become a Dockerfile (template-steps.ts), the uploads
// (kept by files hash in nube's blob store, per owner) its context, and the build the templates area's
// create or rebuild of the template named by the alias: its step cache makes an unchanged build fast.
// The E2B templateID is the alias itself, so `Sandbox.create(alias)` starts the owner's template.
import { createHmac, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { extract, pack } from 'tar-stream';
import { z } from 'zod';
import type { CreateTemplateInput, TemplateSettings, TemplatesService } from '../../areas/templates/service.js';
import { type BlobStores, BlobError, receiveUpload, UrlTokenSigner } from '../../blob/index.js';
import type { PlatformDeps } from '../../areas/deps.js';
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import type { Route } from './control-route.js';
import { parseBody, parseQuery } from './query.js';
import { failureOf, translate } from './template-steps.js';

export const UPLOAD_PATH = '/e2b/template-files';
/** The templates area's name rule (its REST schema's). */
const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const MAX_UPLOAD = 512 * 1024 * 1024;
const UPLOAD_SECONDS = 3600;
/** Log lines per status answer, as E2B's API gives at most. */
const LOG_PAGE = 100;

const RequestBody = z
  .object({
    name: z.string().min(1).max(128).optional(),
    alias: z.string().min(1).max(128).optional(),
    tags: z.array(z.string().max(128)).max(32).optional(),
    cpuCount: z.number().min(0.25).max(64).optional(),
    memoryMB: z.number().int().min(128).max(262_144).optional(),
    minFreeDiskMb: z.number().int().min(16).max(1_048_576).optional(),
    teamID: z.string().optional(),
  })
  .strict();

const Step = z
  .object({
    type: z.string().min(1).max(32),
    args: z.array(z.string().max(65_536)).max(1024).optional(),
    filesHash: z.string().max(128).optional(),
    force: z.boolean().optional(),
  })
  .strict();
const BuildStart = z
  .object({
    fromImage: z.string().min(1).max(512).optional(),
    fromTemplate: z.string().min(1).max(200).optional(),
    fromImageRegistry: z
      .object({ type: z.string(), username: z.string().min(1).max(256).optional(), password: z.string().min(1).max(4096).optional() })
      .passthrough()
      .optional(),
    startCmd: z.string().max(8192).optional(),
    readyCmd: z.string().max(8192).optional(),
    steps: z.array(Step).max(1000).optional(),
    force: z.boolean().optional(),
  })
  .strict();
const StatusQuery = z.object({
  logsOffset: z.coerce.number().int().min(0).optional(),
  limit: z.coerce.number().int().min(1).max(LOG_PAGE).optional(),
  level: z.enum(['debug', 'info', 'warn', 'error']).optional(),
});
/** What a build request fixed for the build it names (carried in its id: nothing is kept meanwhile). */
const Requested = z.object({ c: z.number().optional(), m: z.number().int().optional(), d: z.number().int().optional(), r: z.string() }).strict();

/** A template name of E2B's `name[:tag]`; tags other than `default` are not nube's. */
function nameOf(raw: string): string {
  const [name, tag, ...more] = raw.split(':');
  if (more.length || (tag !== undefined && tag !== 'default')) throw errors.notImplemented('template tags on nube (build without a :tag)');
  if (!NAME.test(name!))
    throw errors.badRequest(`${name} is not a template name: lowercase letters, digits, . _ - (at most 63, starting with a letter or digit)`, [
      { path: ['body', 'name'], message: 'not a template name' },
    ]);
  return name!;
}

const uploadKey = (ownerId: string, hash: string) => `e2b-template-files/${ownerId}/${hash}`;

export class E2bTemplates {
  private readonly signer: UrlTokenSigner;

  constructor(
    private readonly templates: TemplatesService,
    private readonly stores: BlobStores | undefined,
    private readonly deps: PlatformDeps,
  ) {
    this.signer = new UrlTokenSigner({ signingKey: createHmac('sha256', deps.config.secret).update('nube/e2b-template-files').digest() });
  }

  private store() {
    if (!this.stores) throw errors.notImplemented("E2B template files without nube's file storage");
    return this.stores.at();
  }

  /** The owner's template by name, or null. */
  private async existing(p: Principal, name: string) {
    return this.templates.own(p, name).catch((e: unknown) => {
      if (e instanceof ApiError && e.status === 404) return null;
      throw e;
    });
  }

  request(raw: unknown) {
    const b = parseBody(RequestBody, raw);
    const given = b.name ?? b.alias;
    if (!given) throw errors.badRequest('name is required', [{ path: ['body', 'name'], message: 'required' }]);
    const name = nameOf(given);
    if (b.tags?.some((t) => t !== 'default')) throw errors.notImplemented('template tags on nube');
    const requested: z.output<typeof Requested> = { c: b.cpuCount, m: b.memoryMB, d: b.minFreeDiskMb, r: randomBytes(6).toString('hex') };
    const buildID = Buffer.from(JSON.stringify(requested)).toString('base64url');
    return { templateID: name, buildID, names: [name], aliases: [name], tags: ['default'], public: false };
  }

  async fileLink(p: Principal, id: string, hash: string) {
    nameOf(id);
    if (!/^[a-f0-9]{64}$/.test(hash)) throw errors.badRequest('the files hash is a SHA-256 in hex', [{ path: ['hash'], message: 'not a SHA-256' }]);
    const store = this.store();
    const key = uploadKey(p.ownerId, hash);
    if (await store.head(key)) return { present: true };
    const token = this.signer.sign({ method: 'PUT', location: store.location, key, maxBytes: MAX_UPLOAD, expiresInSeconds: UPLOAD_SECONDS });
    return { present: false, url: `${this.deps.publicUrl()}${UPLOAD_PATH}/${token}` };
  }

  async start(p: Principal, id: string, buildID: string, raw: unknown) {
    const name = nameOf(id);
    let requested: z.output<typeof Requested>;
    try {
      requested = Requested.parse(JSON.parse(Buffer.from(buildID, 'base64url').toString('utf8')));
    } catch {
      throw errors.notFound(`build ${buildID}`);
    }
    const b = parseBody(BuildStart, raw);
    const t = translate(b);
    // A template to build on is one of the owner's (nube's built-in ones are not layers to build on).
    if (b.fromTemplate !== undefined && !(await this.existing(p, b.fromTemplate)))
      throw errors.badRequest(`fromTemplate ${b.fromTemplate}: you have no template by that name (nube's own templates cannot be built on: use fromImage)`, [
        { path: ['body', 'fromTemplate'], message: 'unknown template' },
      ]);
    let registryAuth: CreateTemplateInput['registryAuth'];
    if (b.fromImageRegistry) {
      const r = b.fromImageRegistry;
      if (r.type !== 'registry') throw errors.notImplemented(`${r.type} registry credentials on nube (give a username and password)`);
      if (!r.username || !r.password)
        throw errors.badRequest('registry credentials need a username and a password', [{ path: ['body', 'fromImageRegistry'], message: 'username and password' }]);
      registryAuth = { username: r.username, password: r.password };
    }
    const context = t.hashes.length ? { bytes: await this.context(p, t.hashes) } : undefined;
    const settings: TemplateSettings = {
      cpuCount: requested.c,
      memoryMB: requested.m,
      diskMB: requested.d,
      startCmd: b.startCmd || undefined,
      readyCmd: b.readyCmd || undefined,
    };
    const had = await this.existing(p, name);
    if (!had) await this.templates.create(p, { name, dockerfile: t.dockerfile, context, registryAuth, ...settings });
    else await this.templates.rebuild(p, had.id, { dockerfile: t.dockerfile, context }, settings);
  }

  /** The uploads as one context: each upload's entries under `<hash>/`. */
  private async context(p: Principal, hashes: string[]): Promise<Buffer> {
    const store = this.store();
    const out = pack();
    const chunks: Buffer[] = [];
    out.on('data', (c: unknown) => chunks.push(c as Buffer));
    const ended = new Promise<void>((r) => out.on('end', () => r()));
    let total = 0;
    for (const hash of hashes.sort()) {
      let got: Awaited<ReturnType<typeof store.get>>;
      try {
        got = await store.get(uploadKey(p.ownerId, hash));
      } catch (e) {
        if (e instanceof BlobError && e.code === 'NotFound')
          throw errors.badRequest(`the files of hash ${hash} were never uploaded`, [{ path: ['body', 'steps'], message: 'upload missing' }]);
        throw e;
      }
      const parts: Buffer[] = [];
      for await (const c of got.stream) parts.push(c as Buffer);
      const bytes = Buffer.concat(parts);
      total += bytes.length;
      if (total > MAX_UPLOAD) throw errors.badRequest(`the files of this build are larger than ${MAX_UPLOAD} bytes`, [{ path: ['body', 'steps'], message: 'too large' }]);
      await this.repack(bytes, hash, out);
    }
    out.finalize();
    await ended;
    return Buffer.concat(chunks);
  }

  private async repack(bytes: Buffer, hash: string, out: ReturnType<typeof pack>): Promise<void> {
    const ex = extract();
    const done = new Promise<void>((resolve, reject) => {
      ex.on('entry', (h, stream, next) => {
        const name = `${hash}/${h.name.replace(/^(\.\/)+/, '')}`;
        if (h.type !== 'file' && h.type !== 'directory' && h.type !== 'symlink') {
          stream.resume();
          stream.on('end', next);
          return;
        }
        const parts: Buffer[] = [];
        stream.on('data', (c: unknown) => parts.push(c as Buffer));
        stream.on('end', () => {
          const body = Buffer.concat(parts);
          const header = { name, type: h.type, mode: h.mode, mtime: new Date(0), linkname: h.linkname ?? undefined };
          const written = (e?: Error | null) => (e ? reject(e) : next());
          if (h.type === 'file') out.entry({ ...header, size: body.length }, body, written);
          else out.entry(header, written);
        });
      });
      ex.on('finish', () => resolve());
      ex.on('error', (e) => reject(errors.badRequest(`the upload ${hash} is not a tar archive: ${e.message}`, [{ path: ['body', 'steps'], message: 'not a tar' }])));
    });
    const gz = bytes[0] === 0x1f && bytes[1] === 0x8b;
    const src = Readable.from([bytes]);
    if (gz) {
      const gunzip = createGunzip();
      gunzip.on('error', (e) => ex.destroy(e));
      src.pipe(gunzip).pipe(ex);
    } else src.pipe(ex);
    await done;
  }

  async status(p: Principal, id: string, q: z.output<typeof StatusQuery>) {
    const name = nameOf(id);
    const { template: t, lines } = await this.templates.logs(p, name, q.logsOffset ?? 0, q.limit ?? LOG_PAGE);
    const status = t.status === 'building' ? 'building' : t.status === 'ready' ? 'ready' : 'error';
    const failure = status === 'error' ? failureOf(t.dockerfile, t.error ?? `the build was ${t.status}`, t.errorCode) : undefined;
    return {
      templateID: name,
      buildID: '',
      status,
      logEntries: lines.map((l) => ({
        timestamp: new Date(l.at).toISOString(),
        level: /^build failed/.test(l.line) ? 'error' : 'info',
        message: l.line,
      })),
      logs: [],
      ...(failure ? { reason: { message: failure.message, ...(failure.step ? { step: failure.step } : {}), logEntries: [] } } : {}),
    };
  }

  async delete(p: Principal, name: string): Promise<void> {
    await this.templates.delete(p, nameOf(name));
  }

  mount(route: Route): void {
    type WithParams = { params: Record<string, string> };
    route('POST', '/v3/templates', async (_p, req) => ({ status: 202, body: this.request(req.body) }));
    route('GET', '/templates/:id/files/:hash', async (p, req) => ({
      status: 201,
      body: await this.fileLink(p, req.params.id, (req as unknown as WithParams).params.hash!),
    }));
    route('POST', '/v2/templates/:id/builds/:buildID', async (p, req) => {
      await this.start(p, req.params.id, (req as unknown as WithParams).params.buildID!, req.body);
      return { status: 202 };
    });
    route('GET', '/templates/:id/builds/:buildID/status', async (p, req) => {
      const body = await this.status(p, req.params.id, parseQuery(StatusQuery, req.query));
      return { status: 200, body: { ...body, buildID: (req as unknown as WithParams).params.buildID } };
    });
    route('GET', '/templates/aliases/:id', async (p, req) => {
      const t = await this.templates.own(p, nameOf(req.params.id));
      return { status: 200, body: { templateID: t.name, public: false } };
    });
  }

  /** Where the SDK PUTs a `copy`'s archive: a URL signed for one owner's key, the body streamed to the store. */
  mountUploads(app: FastifyInstance): void {
    void app.register(async (scope) => {
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
      scope.put(`${UPLOAD_PATH}/:token`, async (req, reply) => {
        try {
          const grant = { ...this.signer.verify((req.params as { token: string }).token, 'PUT'), method: 'PUT' as const };
          const body = (req.body as Readable | undefined) ?? req.raw;
          const r = await receiveUpload(this.store(), grant, body, req.headers);
          return reply.code(200).header('etag', `"${r.etag}"`).send();
        } catch (e) {
          if (e instanceof BlobError) {
            return reply.code(e.httpStatus).send({ code: e.httpStatus, message: e.message });
          }
          if (e instanceof ApiError) return reply.code(e.status).send({ code: e.status, message: e.message });
          this.deps.log.error({ err: e }, 'e2b template upload failed');
          return reply.code(500).send({ code: 500, message: 'internal error' });
        }
      });
    });
  }
}

