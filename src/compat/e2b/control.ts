// E2B's control plane (api.e2b.app) under /e2b: sandboxes (create, connect, list, get, timeout, pause,
// resume, kill, fork, metrics, network) on both path families the SDK uses (/sandboxes, /v2/...), and
// snapshots (nube's derived templates). Errors leave as E2B's `{code, message}` with the status as code.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { PlatformDeps } from '../../areas/deps.js';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import { CREATE_RATE, SandboxCreate } from '../../areas/sandboxes/schemas.js';
import type { SandboxView } from '../../areas/sandboxes/views.js';
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { type Access, toE2bId, toNubeId } from './access.js';
import { ControlExtras } from './control-extras.js';
import type { E2bTemplates } from './templates.js';
import type { Route, SettledSandboxes } from './control-route.js';
import { list, metadataFilter, page, parseBody, parseQuery, readPageToken, single } from './query.js';
import { DEFAULT_HOME } from './users.js';
import { type E2bMount, type E2bVolumes, MountsBody } from './volumes.js';
import { AUTO_RESUME, created, detail, E2B_MARKER, e2bState, e2bTemplate, listed, MASK_HOST, nubeTemplate, PUBLIC_TRAFFIC } from './views.js';

export const E2B_PREFIX = '/e2b';
/** How long create and connect wait for a sandbox still starting (a template building). */
const START_WAIT_MS = 50_000;

const Rules = z.array(z.string().min(1).max(255)).max(256);
const Network = z
  .object({
    allowOut: Rules.optional(),
    denyOut: Rules.optional(),
    allowPublicTraffic: z.boolean().optional(),
    maskRequestHost: z.string().min(1).max(255).regex(/^[A-Za-z0-9.:${}_-]+$/, `a host name, with $\{PORT} for the port`).optional(),
  })
  .strict();
const CreateBody = z
  .object({
    templateID: z.string().min(1).max(128),
    timeout: z.number().int().min(0).optional(),
    metadata: z.record(z.string(), z.string()).optional(),
    envVars: z.record(z.string(), z.string()).optional(),
    // envd always takes this sandbox's token on nube: every sandbox is "secure".
    secure: z.boolean().optional(),
    allow_internet_access: z.boolean().optional(),
    network: Network.optional(),
    autoPause: z.boolean().optional(),
    autoPauseMemory: z.boolean().optional(),
    autoResume: z.object({ enabled: z.boolean() }).strict().optional(),
    // The SDK starts an MCP gateway itself (a command in the sandbox): nube has no mcp-gateway template,
    // so that command fails and the SDK says so (`Failed to start MCP gateway`).
    mcp: z.record(z.string(), z.unknown()).nullable().optional(),
    // Parts of E2B nube has no counterpart for: refused when asked for, not ignored.
    iam: z.null({ error: 'workload identity (iam) is not available on nube' }).optional(),
    // Mounted read-write, by name (volumes.ts).
    volumeMounts: MountsBody.optional(),
  })
  .strict();
const TimeoutBody = z.object({ timeout: z.number().int().min(0) });
const ConnectBody = z.object({ timeout: z.number().int().min(0).optional() });
const RefreshBody = z.object({ duration: z.number().int().min(0).max(3600).optional() });
const PauseBody = z.object({ memory: z.boolean().optional() });

const ListQuery = z.object({
  metadata: single.optional(),
  state: list.pipe(z.array(z.enum(['running', 'paused']))).optional(),
  order: z.enum(['asc', 'desc']).optional(),
  startedAfter: z.iso.datetime({ offset: true }).optional(),
  template: single.optional(),
  nextToken: single.optional(),
  limit: z.coerce.number().int().min(1).max(100).optional(),
});
const LegacyListQuery = z.object({ metadata: single.optional() });

/** E2B's error body; nube's `issues` ride along for 400s, and a validation error's say why in `message` (all the SDK shows). */
export function e2bError(reply: FastifyReply, e: unknown, log: PlatformDeps['log']) {
  if (e instanceof ApiError) {
    const why = e.code === 'ValidationError' && e.issues?.length ? `: ${e.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}` : '';
    return reply.code(e.status).headers(e.headers).send({ code: e.status, message: e.message + why, ...(e.issues ? { issues: e.issues } : {}) });
  }
  log.error({ err: e }, 'e2b adapter: unexpected error');
  return reply.code(500).send({ code: 500, message: 'internal error' });
}

/** Which of a create's E2B settings are kept in the sandbox's (hidden) metadata. */
function settingsMetadata(b: z.output<typeof CreateBody>): Record<string, string> {
  const m: Record<string, string> = { [E2B_MARKER]: 'true' };
  if (b.autoPause && b.autoResume?.enabled) m[AUTO_RESUME] = 'true';
  if (b.network?.allowPublicTraffic === false) m[PUBLIC_TRAFFIC] = 'false';
  if (b.network?.maskRequestHost) m[MASK_HOST] = b.network.maskRequestHost;
  return m;
}

export class ControlPlane implements SettledSandboxes {
  private readonly extras: ControlExtras;

  constructor(
    private readonly sandboxes: SandboxesService,
    private readonly access: Access,
    private readonly deps: PlatformDeps,
    private readonly volumes: E2bVolumes,
    /** Told when a sandbox was paused here without its memory (the processes this adapter runs in it ended). */
    private readonly paused: (id: string) => void = () => {},
    /** Template builds (absent: answered 501 like the rest of E2B's API nube has not). */
    private readonly templates?: E2bTemplates,
  ) {
    this.extras = new ControlExtras(sandboxes, this, templates && ((p, id) => templates.delete(p, id)));
  }

  /** What the SDK puts after `<port>-<id>.` in getHost(port): nube's public host for sandbox ports. */
  domain(): string {
    const host = this.deps.config.sandboxes.publicHost;
    // With HTTPS (a certificate for the public host) E2B's `https://<host>` links work: its port.
    const https = this.deps.httpsUrl(`8000-sbx-0.${host}`);
    const port = new URL(https ?? this.deps.publicUrl()).port;
    return port ? `${host}:${port}` : host;
  }

  /** The sandbox once it left `starting` (a template build may hold a create for a while). */
  async settled(p: Principal, id: string): Promise<SandboxView> {
    const until = Date.now() + START_WAIT_MS;
    for (;;) {
      const s = await this.sandboxes.get(p, id);
      if (s.status === 'failed') throw errors.unavailable(`sandbox failed to start: ${s.error ?? 'unknown reason'}`);
      if (s.status !== 'starting') return s;
      if (Date.now() > until) throw errors.unavailable('the sandbox is still starting (its template is building); retry shortly');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The create/connect answer for a sandbox of this caller. */
  answer(p: Principal, s: SandboxView) {
    return created(s, this.domain(), this.access.tokenFor(p.ownerId, s.id), this.access.trafficTokenFor(p.ownerId, s.id));
  }

  /** Where a templateID leads: a built-in template, or one of the caller's snapshots (derived templates). */
  private async source(p: Principal, templateID: string) {
    if (/^tpl_[a-z0-9]+$/.test(templateID)) {
      const t = await this.sandboxes.forks.getTemplate(p, templateID).catch(() => null);
      if (!t) throw errors.notFound(`template ${templateID}`);
      return { template: t.baseTemplate, templateKey: t.key, templateHash: t.hash };
    }
    return { template: nubeTemplate(templateID) };
  }

  async create(p: Principal, raw: unknown) {
    await this.access.limit(p, 'sandboxes.create', CREATE_RATE);
    const b = parseBody(CreateBody, raw);
    if (b.autoPauseMemory === false && b.autoResume?.enabled) {
      throw errors.badRequest('a filesystem-only auto-pause (autoPauseMemory: false) cannot be auto-resumed', [
        { path: ['body', 'autoResume'], message: 'needs autoPauseMemory' },
      ]);
    }
    const volumes = await this.volumes.resolve(p, b.volumeMounts ?? []);
    const input = SandboxCreate.safeParse({
      ...(await this.source(p, b.templateID)),
      timeoutSeconds: b.timeout ?? 15,
      // E2B's onTimeout: 'pause' is nube's suspend at the timeout.
      suspendOnIdle: b.autoPause === true,
      // E2B's pauses keep memory unless told otherwise (its lifecycle's keepMemory: false).
      suspendKeepsMemory: b.autoPauseMemory !== false,
      metadata: { ...b.metadata, ...settingsMetadata(b) },
      // E2B's home for everything in the sandbox (the code interpreter's kernel starts in $HOME).
      env: { HOME: DEFAULT_HOME, ...b.envVars },
      ...(volumes.length ? { volumes } : {}),
    });
    // nube's `volumes` are E2B's `volumeMounts`, in the same order.
    const field = (k: PropertyKey) => (k === 'volumes' ? 'volumeMounts' : String(k));
    if (!input.success) throw errors.validation(input.error.issues.map((i) => ({ path: ['body', ...i.path.map(field)], message: i.message })));
    const s = await this.sandboxes.create(p, input.data);
    try {
      const ready = await this.settled(p, s.id);
      const deny = [...(b.network?.denyOut ?? [])];
      if (b.network?.allowOut?.length || deny.length || b.allow_internet_access === false) {
        await this.sandboxes.action(p, s.id, 'network-policy', {
          internet: b.allow_internet_access !== false,
          allowOut: b.network?.allowOut ?? [],
          denyOut: deny,
        });
      }
      return this.answer(p, ready);
    } catch (e) {
      await this.sandboxes.delete(p, s.id).catch(() => {});
      throw e;
    }
  }

  /** Connect: a paused sandbox is resumed (201), a running one answered as is (200). */
  async connect(p: Principal, id: string, raw: unknown): Promise<{ status: number; body: unknown }> {
    const b = parseBody(ConnectBody, raw);
    let s = await this.settled(p, id);
    let status = 200;
    if (s.status === 'suspended') {
      await this.sandboxes.action(p, id, 'resume', {});
      s = await this.sandboxes.get(p, id);
      status = 201;
    }
    // Connect's timeout only ever lengthens (E2B: "TTL is only extended").
    if (b.timeout !== undefined && (!s.expiresAt || Date.parse(s.expiresAt) < Date.now() + b.timeout * 1000)) {
      await this.sandboxes.manage.setTimeout(p, id, b.timeout);
    }
    return { status, body: this.answer(p, s) };
  }

  async list(p: Principal, query: Record<string, string | string[] | undefined>, v2: boolean) {
    const q = v2 ? parseQuery(ListQuery, query) : { ...parseQuery(LegacyListQuery, query), state: ['running'] as const };
    const states = (q.state?.length ? q.state : ['running', 'paused']) as string[];
    const wanted = metadataFilter(q.metadata);
    const after = 'startedAfter' in q && q.startedAfter ? Date.parse(q.startedAfter) : undefined;
    const template = 'template' in q ? q.template : undefined;
    const { sandboxes } = await this.sandboxes.list(p);
    const matching = sandboxes
      .filter((s) => s.status === 'running' || s.status === 'suspended')
      .filter((s) => states.includes(e2bState(s)))
      .filter((s) => Object.entries(wanted).every(([k, v]) => (s.metadata as Record<string, string>)[k] === v))
      .filter((s) => after === undefined || Date.parse(s.createdAt) >= after)
      .filter((s) => template === undefined || s.template === template || e2bTemplate(s.template) === template);
    const v2q = q as z.output<typeof ListQuery>;
    const r = page(matching, (s) => ({ at: Date.parse(s.createdAt), id: s.id }), {
      order: v2q.order ?? 'desc',
      limit: v2 ? (v2q.limit ?? 100) : Number.MAX_SAFE_INTEGER,
      from: v2 ? readPageToken(v2q.nextToken) : undefined,
    });
    const mounts = await this.volumes.mountsBySandbox(p);
    return { body: r.items.map((s) => listed(s, mounts.get(s.id))), next: r.next, running: matching.filter((s) => s.status === 'running').length };
  }

  async get(p: Principal, id: string) {
    const s = await this.sandboxes.get(p, id);
    const mounts: E2bMount[] | undefined = (await this.volumes.mountsBySandbox(p)).get(id);
    return detail(s, this.domain(), this.access.tokenFor(p.ownerId, id), this.sandboxes.pauseKeeps(), mounts);
  }

  /** E2B sets the end to now + timeout: earlier or later than it was. */
  async setTimeout(p: Principal, id: string, seconds: number) {
    await this.sandboxes.manage.setTimeout(p, id, seconds);
  }

  async pause(p: Principal, id: string, raw: unknown): Promise<number> {
    const b = parseBody(PauseBody, raw);
    const s = await this.settled(p, id);
    if (s.status === 'suspended') throw new ApiError(409, 'Conflict', `sandbox ${id} is already paused`);
    const r = (await this.sandboxes.action(p, id, 'suspend', { keepMemory: b.memory ?? true })) as { sandbox: { memoryKept: boolean } };
    if (!r.sandbox.memoryKept) this.paused(id);
    return 204;
  }

  mount(app: FastifyInstance): void {
    const P = E2B_PREFIX;
    type Req = FastifyRequest<{ Params: { id: string }; Querystring: Record<string, string | string[] | undefined> }>;
    type Answer = { status: number; body?: unknown; headers?: Record<string, string> };
    const route = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, fn: (p: Principal, req: Req) => Promise<Answer>) =>
      app.route({
        method,
        url: `${P}${path}`,
        handler: async (req, reply) => {
          try {
            const p = await this.access.owner(req.headers);
            await this.access.limit(p, 'e2b.control');
            const r = await fn(p, req as Req);
            if (r.headers) void reply.headers(r.headers);
            return r.body === undefined ? reply.code(r.status).send() : reply.code(r.status).send(r.body);
          } catch (e) {
            return e2bError(reply, e, this.deps.log);
          }
        },
      });
    const id = (req: Req) => toNubeId(req.params.id);
    const noQuery = (req: Req) => parseQuery(z.object({}), req.query);
    for (const base of ['/sandboxes', '/v2/sandboxes']) {
      route('POST', base, async (p, req) => ({ status: 201, body: await this.create(p, req.body) }));
      route('GET', base, async (p, req) => {
        const r = await this.list(p, req.query, base === '/v2/sandboxes');
        return { status: 200, body: r.body, headers: { 'x-total-running': String(r.running), ...(r.next ? { 'x-next-token': r.next } : {}) } };
      });
      route('POST', `${base}/:id/connect`, (p, req) => this.connect(p, id(req), req.body));
    }
    route('GET', '/sandboxes/:id', async (p, req) => {
      noQuery(req);
      return { status: 200, body: await this.get(p, id(req)) };
    });
    route('DELETE', '/sandboxes/:id', async (p, req) => {
      await this.sandboxes.delete(p, id(req));
      return { status: 204 };
    });
    route('POST', '/sandboxes/:id/timeout', async (p, req) => {
      await this.setTimeout(p, id(req), parseBody(TimeoutBody, req.body).timeout);
      return { status: 204 };
    });
    route('POST', '/sandboxes/:id/refreshes', async (p, req) => {
      const d = parseBody(RefreshBody, req.body).duration ?? 60;
      const s = await this.sandboxes.get(p, id(req));
      if (!s.expiresAt || Date.parse(s.expiresAt) < Date.now() + d * 1000) await this.setTimeout(p, id(req), d);
      return { status: 204 };
    });
    route('POST', '/sandboxes/:id/pause', async (p, req) => ({ status: await this.pause(p, id(req), req.body) }));
    route('POST', '/sandboxes/:id/resume', async (p, req) => {
      const s = await this.settled(p, id(req));
      if (s.status !== 'suspended') throw new ApiError(409, 'Conflict', `sandbox ${id(req)} is not paused`);
      const r = await this.connect(p, id(req), req.body);
      return { status: 201, body: r.body };
    });
    this.extras.mount(route);
    this.templates?.mount(route);
    this.volumes.mount(route, app, P, (reply, e) => e2bError(reply, e, this.deps.log));
    // What else E2B's API has (template tags and listings, secrets, teams) is not here.
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


export { toE2bId };
