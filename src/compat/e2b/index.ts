// E2B compatibility: E2B's SDKs (`e2b`, `@e2b/code-interpreter`) run unchanged against nube with
// E2B_API_URL=<nube>/e2b, E2B_SANDBOX_URL=<nube> and E2B_API_KEY=<nube key>. Three surfaces:
// the control plane under /e2b (control.ts); envd at the root, told apart by its E2b-Sandbox-Id header
// (Connect RPC for processes and files, /files, /health); the code interpreter's /execute and /contexts.
// Without E2B_SANDBOX_URL the SDK reaches envd at `49983-<id>.<domain>`: that port host is served
// here as the same envd. Template builds of E2B's SDK become the templates area's (templates.ts). It calls
// the sandboxes, volumes and templates areas' services only; no area knows it exists.
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { PlatformDeps } from '../../areas/deps.js';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { VolumesService } from '../../areas/volumes/service.js';
import type { TemplatesService } from '../../areas/templates/service.js';
import type { BlobStores } from '../../blob/index.js';
import { UPSTREAM_HOST } from '../../areas/sandboxes/proxy.js';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import type { PlanName } from '../../platform/plans.js';
import { Access, ENVD_PORT, INTERPRETER_PORT, type SignedRequest, toNubeId } from './access.js';
import { ConnectError, sendUnaryError } from './connect-rpc.js';
import { ControlPlane, e2bError } from './control.js';
import { EnvdHttp, type FilesReq } from './envd-http.js';
import { EnvdRpc } from './envd-rpc.js';
import { Filesystem } from './filesystem.js';
import { Interpreter } from './interpreter.js';
import { Processes } from './processes.js';
import { Users } from './users.js';
import { E2bTemplates } from './templates.js';
import { E2bVolumes } from './volumes.js';
import { AUTO_RESUME, E2B_MARKER, MASK_HOST, PUBLIC_TRAFFIC } from './views.js';
import { Watcher } from './watch.js';

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** In E2B's maskRequestHost, the port asked for. */
const PORT_PLACEHOLDER = '$' + '{PORT}';
/** What an auto-resumed sandbox lives for at least, as on E2B (its own timeout if longer). */
const AUTO_RESUME_MIN_S = 300;

/** E2B's proxy's answer for a sandbox that is not there (or paused, with no auto-resume). */
function notFound(reply: FastifyReply, e2bId: string) {
  return reply.code(502).send({ sandboxId: e2bId, message: 'The sandbox was not found', code: 502 });
}

export function mountE2b(
  app: FastifyInstance,
  sandboxes: SandboxesService,
  volumes: VolumesService | undefined,
  deps: PlatformDeps,
  planOf: (ownerId: string) => Promise<PlanName>,
  templateAreas?: { templates?: TemplatesService; stores?: BlobStores },
): void {
  const access = new Access(deps, planOf);
  const templates = templateAreas?.templates ? new E2bTemplates(templateAreas.templates, templateAreas.stores, deps) : undefined;
  templates?.mountUploads(app);
  const processes = new Processes(sandboxes);
  // A pause that keeps no processes ends the ones this adapter runs there (their streams drop).
  const control = new ControlPlane(
    sandboxes,
    access,
    deps,
    new E2bVolumes(volumes, access, deps.config.bodyLimitBytes * 8),
    (id) => processes.ended(id),
    templates,
  );
  const users = new Users(sandboxes);
  const fs = new Filesystem(sandboxes);
  const rpc = new EnvdRpc(processes, fs, new Watcher(sandboxes, fs), users, deps.log);
  const files = new EnvdHttp(sandboxes, deps.config.bodyLimitBytes * 8);
  const interpreter = new Interpreter(sandboxes);

  /** Traffic to a sandbox paused with autoResume wakes it, for its timeout (at least 5 minutes), as on E2B. */
  const autoResume = async (id: string, ownerId: string) => {
    const p = await access.principalOf(ownerId);
    const s = await sandboxes.get(p, id);
    if (s.status !== 'suspended') return;
    await sandboxes.action(p, id, 'resume', {});
    await sandboxes.manage.setTimeout(p, id, Math.max(s.timeoutSeconds, AUTO_RESUME_MIN_S));
  };

  // Every port of an E2B sandbox is public, as on E2B (getHost(port) needs no expose call): a request
  // for `<port>-<id>.<public host>` exposes the port of a sandbox created here, then the port proxy
  // (registered after this hook) carries it. envd's and the interpreter's ports are this adapter.
  const portHost = new RegExp(`^(\\d{1,5})-(sbx[_-][a-z0-9]{1,40})\\.${escapeRe(deps.config.sandboxes.publicHost)}(?::\\d+)?$`, 'i');
  app.addHook('onRequest', (req, reply, done) => {
    const m = req.headers.host ? portHost.exec(req.headers.host) : null;
    if (!m) return done();
    const e2bId = m[2]!.toLowerCase();
    const id = toNubeId(e2bId.replace('_', '-'));
    const port = Number(m[1]);
    sandboxes.peek(id).then(
      async (s) => {
        // nube's own spelling (`sbx_`) keeps nube's answers; E2B's (`sbx-`) gets E2B's proxy's.
        if (!s) return e2bId.startsWith('sbx-') ? notFound(reply, e2bId) : done();
        if (s.metadata[E2B_MARKER] !== 'true') return done();
        if (port === ENVD_PORT || port === INTERPRETER_PORT) {
          req.headers['e2b-sandbox-id'] = e2bId;
          req.headers.host = new URL(deps.publicUrl()).host;
          return done();
        }
        if (s.status === 'suspended' && s.metadata[AUTO_RESUME] !== 'true') return notFound(reply, e2bId);
        if (s.status === 'suspended') await autoResume(id, s.ownerId);
        // allowPublicTraffic: false: only requests carrying the sandbox's traffic token get through.
        if (s.metadata[PUBLIC_TRAFFIC] === 'false' && !access.opensTraffic(req.headers['e2b-traffic-access-token'], s.ownerId, id)) {
          return reply.code(403).send({ sandboxId: e2bId, message: 'a valid e2b-traffic-access-token header is required for this sandbox', code: 403 });
        }
        const mask = s.metadata[MASK_HOST];
        if (mask) (req.raw as IncomingMessage & { [UPSTREAM_HOST]?: string })[UPSTREAM_HOST] = mask.replaceAll(PORT_PLACEHOLDER, String(port));
        await sandboxes.exposeIfMarked(id, port, E2B_MARKER);
        done();
      },
      (e: Error) => done(e),
    );
  });

  void app.register(async (scope) => {
    // Raw bodies: Connect envelopes, multipart uploads and JSON are read by the handlers themselves.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
    control.mount(scope);

    /**
     * The in-sandbox caller, or an answer already sent (no E2B header: not ours, a plain 404). A
     * sandbox paused without auto-resume answers as E2B's proxy does (502); one with it wakes.
     */
    const inSandbox = async (req: FastifyRequest, reply: FastifyReply, rpcStyle: boolean, port = false) => {
      if (!req.headers['e2b-sandbox-id']) {
        void reply.code(404).send(errors.notFound('route').toBody());
        return null;
      }
      const who = await access.sandbox(req.headers, port);
      if (!who) {
        if (rpcStyle) {
          reply.hijack();
          sendUnaryError(reply.raw, new ConnectError('unauthenticated', 'missing or invalid X-Access-Token for this sandbox'));
        } else void reply.code(401).send({ code: 401, message: 'missing or invalid access token for this sandbox' });
        return null;
      }
      const s = await sandboxes.peek(who.id);
      // /health only answers whether it runs: it wakes nothing.
      const wakes = s?.metadata[AUTO_RESUME] === 'true' && req.url !== '/health';
      if (!s || (s.status === 'suspended' && !wakes)) {
        if (rpcStyle) {
          reply.hijack();
          sendUnaryError(reply.raw, new ConnectError('unavailable', `sandbox ${who.id} is not running`));
        } else void notFound(reply, String(req.headers['e2b-sandbox-id']));
        return null;
      }
      if (s.status === 'suspended') await autoResume(who.id, s.ownerId);
      return who;
    };
    /** `port`: the interpreter's routes, which its traffic token opens too (see Access.sandbox). */
    const guarded =
      (fn: (p: Principal, id: string, req: FastifyRequest, reply: FastifyReply) => Promise<unknown>, port = false) =>
      async (req: FastifyRequest, reply: FastifyReply) => {
        const who = await inSandbox(req, reply, false, port);
        if (!who) return reply;
        try {
          await access.limit(who.principal, 'e2b.envd');
          return await fn(who.principal, who.id, req, reply);
        } catch (e) {
          return files.error(reply, e, deps.log);
        }
      };

    for (const service of ['process', 'filesystem'] as const) {
      const prefix = service === 'process' ? '/process.Process' : '/filesystem.Filesystem';
      scope.post(`${prefix}/:method`, async (req, reply) => {
        const who = await inSandbox(req, reply, true);
        if (!who) return reply;
        const method = (req.params as { method: string }).method;
        try {
          await access.limit(who.principal, 'e2b.envd');
        } catch (e) {
          reply.hijack();
          sendUnaryError(reply.raw, new ConnectError('resource_exhausted', (e as Error).message));
          return reply;
        }
        const streaming = service === 'process' ? method === 'Start' || method === 'Connect' : method === 'WatchDir';
        if (streaming) await rpc.stream(method, who.principal, who.id, req, reply);
        else await rpc.unary(service, method, who.principal, who.id, req, reply);
        return reply;
      });
    }

    /**
     * /files: the sandbox's token (the SDK's calls), or a signed URL (downloadUrl/uploadUrl), which with
     * E2B_SANDBOX_URL set names no sandbox: the one whose token signed it is the one.
     */
    const filesRoute = (operation: 'read' | 'write') => async (req: FastifyRequest, reply: FastifyReply) => {
      const q = req.query as FilesReq['query'] & { signature?: string; signature_expiration?: string };
      if (q.signature === undefined || req.headers['x-access-token']) {
        return guarded(async (p, id, r, rep) => {
          const user = await users.resolve(p, id, q.username);
          return operation === 'read' ? files.download(p, id, user, r as FilesReq, rep, deps.log) : files.upload(p, id, user, r as FilesReq, rep);
        })(req, reply);
      }
      const signed: SignedRequest = { path: q.path ?? '', operation, username: q.username ?? '', signature: q.signature, expiration: q.signature_expiration };
      // Nobody is known yet, and finding the signer reads this node's E2B sandboxes: limited per address.
      const rl = await deps.rateLimiter.consume(`ip:${req.ip}:e2b.signed`, { points: deps.config.rateLimitPerMinute, windowSeconds: 60 });
      if (!rl.allowed) return reply.code(429).header('retry-after', String(rl.retryAfterSec)).send({ code: 429, message: 'too many signed requests; retry later' });
      const named = req.headers['e2b-sandbox-id'];
      const candidates = named
        ? await sandboxes.peek(toNubeId(String(named))).then((s) => (s ? [{ id: toNubeId(String(named)), ownerId: s.ownerId }] : []))
        : await sandboxes.markedHere(E2B_MARKER);
      const signer = access.signer(signed, candidates);
      if (!signer) return reply.code(401).send({ code: 401, message: 'invalid signature' });
      if (signed.expiration !== undefined && !(Number(signed.expiration) >= Math.floor(Date.now() / 1000))) {
        return reply.code(401).send({ code: 401, message: 'signature is already expired' });
      }
      try {
        const p = await access.principalOf(signer.ownerId);
        await access.limit(p, 'e2b.envd');
        const user = await users.resolve(p, signer.id, q.username);
        return operation === 'read'
          ? await files.download(p, signer.id, user, req as FilesReq, reply, deps.log)
          : await files.upload(p, signer.id, user, req as FilesReq, reply);
      } catch (e) {
        return files.error(reply, e, deps.log);
      }
    };
    scope.get('/files', filesRoute('read'));
    scope.post('/files', filesRoute('write'));
    scope.get('/health', async (req, reply) => {
      const who = await inSandbox(req, reply, false);
      if (!who) return reply;
      const s = await sandboxes.peek(who.id);
      return s?.status === 'running' ? reply.code(204).send() : notFound(reply, String(req.headers['e2b-sandbox-id']));
    });

    const json = (req: FastifyRequest) => {
      const b = req.body as Buffer | undefined;
      if (!b?.length) return {};
      try {
        return JSON.parse(b.toString('utf8')) as unknown;
      } catch {
        throw errors.badRequest('body is not JSON');
      }
    };
    const ipy = (fn: (p: Principal, id: string, req: FastifyRequest, reply: FastifyReply) => Promise<unknown>) =>
      guarded(async (p, id, req, reply) => {
        try {
          return await fn(p, id, req, reply);
        } catch (e) {
          return e2bError(reply, e, deps.log);
        }
      }, true);
    scope.post('/execute', ipy((p, id, req, reply) => interpreter.execute(p, id, json(req), reply)));
    scope.get('/contexts', ipy(async (p, id, _req, reply) => {
      await sandboxes.get(p, id);
      return reply.send(interpreter.list(id));
    }));
    scope.post('/contexts', ipy(async (p, id, req, reply) => {
      await sandboxes.get(p, id);
      return reply.send(interpreter.create(id, json(req)));
    }));
    scope.delete('/contexts/:ctx', ipy(async (p, id, req, reply) => {
      await sandboxes.get(p, id);
      interpreter.remove(id, (req.params as { ctx: string }).ctx);
      return reply.code(204).send();
    }));
    scope.post('/contexts/:ctx/restart', ipy(async (p, id, req, reply) => {
      await interpreter.restart(p, id, (req.params as { ctx: string }).ctx);
      return reply.code(204).send();
    }));
  });
}
