// E2B's control plane (api.e2b.app) under /e2b: create, connect (resuming a paused sandbox), list,
// get, timeout, pause, resume, kill, on both path families the SDK uses (/sandboxes and /v2/sandboxes).
// Errors leave as E2B's `{code, message}` with the HTTP status as code.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { PlatformDeps } from '../../areas/deps.js';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import { SandboxCreate } from '../../areas/sandboxes/schemas.js';
import type { SandboxView } from '../../areas/sandboxes/views.js';
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { type Access, toNubeId } from './access.js';
import { HOME } from './filesystem.js';
import { created, detail, E2B_MARKER, e2bState, listed, nubeTemplate } from './views.js';

export const E2B_PREFIX = '/e2b';
/** How long create and connect wait for a sandbox still starting (a template building). */
const START_WAIT_MS = 50_000;

const CreateBody = z.object({
  templateID: z.string().min(1).max(128),
  timeout: z.number().int().min(1).optional(),
  metadata: z.record(z.string(), z.string()).optional(),
  envVars: z.record(z.string(), z.string()).optional(),
});
const TimeoutBody = z.object({ timeout: z.number().int().min(0) });
const ConnectBody = z.object({ timeout: z.number().int().min(1).optional() });
const RefreshBody = z.object({ duration: z.number().int().min(0).max(3600).optional() });

function issues(e: z.ZodError) {
  return e.issues.map((i) => ({ path: ['body', ...i.path.map(String)], message: i.message }));
}

/** Bodies arrive raw (the adapter's scope parses nothing): JSON, or nothing. */
function parse<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  let value: unknown = body;
  if (Buffer.isBuffer(body)) {
    try {
      value = body.length ? JSON.parse(body.toString('utf8')) : {};
    } catch {
      throw errors.badRequest('body is not JSON', [{ path: ['body'], message: 'not JSON' }]);
    }
  }
  const r = schema.safeParse(value ?? {});
  if (!r.success) throw errors.validation(issues(r.error));
  return r.data;
}

/** E2B's error body; nube's `issues` ride along for 400s. */
export function e2bError(reply: FastifyReply, e: unknown, log: PlatformDeps['log']) {
  if (e instanceof ApiError) {
    return reply.code(e.status).headers(e.headers).send({ code: e.status, message: e.message, ...(e.issues ? { issues: e.issues } : {}) });
  }
  log.error({ err: e }, 'e2b adapter: unexpected error');
  return reply.code(500).send({ code: 500, message: 'internal error' });
}

export class ControlPlane {
  constructor(
    private readonly sandboxes: SandboxesService,
    private readonly access: Access,
    private readonly deps: PlatformDeps,
  ) {}

  /** What the SDK puts after `<port>-<id>.` in getHost(port): nube's public host for sandbox ports. */
  private domain(): string {
    const host = this.deps.config.sandboxes.publicHost;
    const port = new URL(this.deps.publicUrl()).port;
    return port ? `${host}:${port}` : host;
  }

  /** The sandbox once it left `starting` (a template build may hold a create for a while). */
  private async settled(p: Principal, id: string): Promise<SandboxView> {
    const until = Date.now() + START_WAIT_MS;
    for (;;) {
      const s = await this.sandboxes.get(p, id);
      if (s.status === 'failed') throw errors.unavailable(`sandbox failed to start: ${s.error ?? 'unknown reason'}`);
      if (s.status !== 'starting') return s;
      if (Date.now() > until) throw errors.unavailable('the sandbox is still starting (its template is building); retry shortly');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async create(p: Principal, raw: unknown) {
    const b = parse(CreateBody, raw);
    await this.access.limit(p, 'sandboxes.create', { points: 10, windowSeconds: 60 });
    const input = SandboxCreate.safeParse({
      template: nubeTemplate(b.templateID),
      timeoutSeconds: b.timeout ?? 300,
      metadata: { ...b.metadata, [E2B_MARKER]: 'true' },
      // E2B's home for everything in the sandbox (the code interpreter's kernel starts in $HOME).
      env: { HOME, ...b.envVars },
    });
    if (!input.success) throw errors.validation(issues(input.error));
    const s = await this.sandboxes.create(p, input.data);
    const ready = await this.settled(p, s.id);
    return created(ready, this.domain(), this.access.tokenFor(p, s.id));
  }

  /** Connect: a paused sandbox is resumed (201), a running one answered as is (200). */
  async connect(p: Principal, id: string, raw: unknown): Promise<{ status: number; body: unknown }> {
    const b = parse(ConnectBody, raw);
    let s = await this.settled(p, id);
    let status = 200;
    if (s.status === 'suspended') {
      await this.sandboxes.action(p, id, 'resume', {});
      s = await this.sandboxes.get(p, id);
      status = 201;
    }
    if (b.timeout !== undefined) await this.setTimeout(p, id, b.timeout, true);
    return { status, body: created(s, this.domain(), this.access.tokenFor(p, id)) };
  }

  async list(p: Principal, query: Record<string, string | undefined>) {
    const states = query.state ? query.state.split(',') : ['running', 'paused'];
    const wanted = metadataFilter(query.metadata);
    const { sandboxes } = await this.sandboxes.list(p);
    return sandboxes
      .filter((s) => s.status === 'running' || s.status === 'suspended')
      .filter((s) => states.includes(e2bState(s)))
      .filter((s) => Object.entries(wanted).every(([k, v]) => (s.metadata as Record<string, string>)[k] === v))
      .map(listed);
  }

  async get(p: Principal, id: string) {
    return detail(await this.sandboxes.get(p, id), this.domain(), this.access.tokenFor(p, id));
  }

  /**
   * E2B sets the end to now + timeout. nube's extend only lengthens, so a shorter timeout than what is
   * left is refused rather than pretended (`onlyLonger` skips it quietly for connect's timeout).
   */
  async setTimeout(p: Principal, id: string, seconds: number, onlyLonger = false) {
    const s = await this.sandboxes.get(p, id);
    if (!s.expiresAt) return;
    const left = Math.floor((Date.parse(s.expiresAt) - Date.now()) / 1000);
    if (seconds > left) await this.sandboxes.action(p, id, 'extend', { extendSeconds: seconds - left });
    else if (seconds < left && !onlyLonger) {
      throw errors.badRequest(`nube can lengthen a sandbox's timeout, not shorten it (${left} s left)`, [
        { path: ['body', 'timeout'], message: 'shorter than the time left' },
      ]);
    }
  }

  async pause(p: Principal, id: string): Promise<number> {
    const s = await this.settled(p, id);
    if (s.status === 'suspended') throw new ApiError(409, 'Conflict', `sandbox ${id} is already paused`);
    await this.sandboxes.action(p, id, 'suspend', {});
    return 204;
  }

  mount(app: FastifyInstance): void {
    const P = E2B_PREFIX;
    type Req = FastifyRequest<{ Params: { id: string }; Querystring: Record<string, string | undefined> }>;
    const route = (
      method: 'GET' | 'POST' | 'DELETE',
      path: string,
      fn: (p: Principal, req: Req) => Promise<{ status: number; body?: unknown }>,
    ) =>
      app.route({
        method,
        url: `${P}${path}`,
        handler: async (req, reply) => {
          try {
            const p = await this.access.owner(req.headers);
            await this.access.limit(p, 'e2b.control');
            const r = await fn(p, req as Req);
            return r.body === undefined ? reply.code(r.status).send() : reply.code(r.status).send(r.body);
          } catch (e) {
            return e2bError(reply, e, this.deps.log);
          }
        },
      });
    const id = (req: Req) => toNubeId(req.params.id);
    for (const base of ['/sandboxes', '/v2/sandboxes']) {
      route('POST', base, async (p, req) => ({ status: 201, body: await this.create(p, req.body) }));
      route('GET', base, async (p, req) => ({ status: 200, body: await this.list(p, req.query) }));
      route('POST', `${base}/:id/connect`, (p, req) => this.connect(p, id(req), req.body));
    }
    route('GET', '/sandboxes/:id', async (p, req) => ({ status: 200, body: await this.get(p, id(req)) }));
    route('DELETE', '/sandboxes/:id', async (p, req) => {
      await this.sandboxes.delete(p, id(req));
      return { status: 204 };
    });
    route('POST', '/sandboxes/:id/timeout', async (p, req) => {
      await this.setTimeout(p, id(req), parse(TimeoutBody, req.body).timeout);
      return { status: 204 };
    });
    route('POST', '/sandboxes/:id/refreshes', async (p, req) => {
      const d = parse(RefreshBody, req.body).duration;
      await this.setTimeout(p, id(req), d ?? 60, true);
      return { status: 204 };
    });
    route('POST', '/sandboxes/:id/pause', async (p, req) => ({ status: await this.pause(p, id(req)) }));
    route('POST', '/sandboxes/:id/resume', async (p, req) => {
      const r = await this.connect(p, id(req), req.body);
      return { status: 201, body: r.body };
    });
    // Everything else E2B's API has (templates, snapshots, volumes, metrics, secrets, fork) is not here.
    app.all(`${P}/*`, async (req, reply) => {
      try {
        await this.access.owner(req.headers);
        throw errors.notImplemented(`E2B API ${req.method} ${req.url.split('?')[0]} on nube`);
      } catch (e) {
        return e2bError(reply, e, this.deps.log);
      }
    });
  }
}

/** `metadata=k1%3Dv1%26k2%3Dv2` (URL-encoded pairs, as the SDK sends them). */
function metadataFilter(raw: string | undefined): Record<string, string> {
  if (!raw) return {};
  return Object.fromEntries(new URLSearchParams(raw).entries());
}
