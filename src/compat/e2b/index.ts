// E2B compatibility: E2B's SDKs (`e2b`, `@e2b/code-interpreter`) run unchanged against nube with
// E2B_API_URL=<nube>/e2b, E2B_SANDBOX_URL=<nube> and E2B_API_KEY=<nube key>. Three surfaces:
// the control plane under /e2b (control.ts); envd at the root, told apart by its E2b-Sandbox-Id header
// (Connect RPC for processes and files, /files, /health); the code interpreter's /execute and /contexts.
// It calls the sandboxes area's facade only; no area knows it exists.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { PlatformDeps } from '../../areas/deps.js';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { Access } from './access.js';
import { ConnectError, sendUnaryError } from './connect-rpc.js';
import { ControlPlane, e2bError } from './control.js';
import { EnvdHttp } from './envd-http.js';
import { EnvdRpc } from './envd-rpc.js';
import { Filesystem } from './filesystem.js';
import { Interpreter } from './interpreter.js';
import { Processes } from './processes.js';
import { E2B_MARKER } from './views.js';

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export function mountE2b(app: FastifyInstance, sandboxes: SandboxesService, deps: PlatformDeps): void {
  const access = new Access(deps);
  const control = new ControlPlane(sandboxes, access, deps);
  const rpc = new EnvdRpc(new Processes(sandboxes), new Filesystem(sandboxes), deps.log);
  const files = new EnvdHttp(sandboxes);
  const interpreter = new Interpreter(sandboxes);

  // Every port of an E2B sandbox is public, as on E2B (getHost(port) needs no expose call): a request
  // for `<port>-<id>.<public host>` exposes the port of a sandbox created here, then the port proxy
  // (registered after this hook) carries it.
  const portHost = new RegExp(`^(\\d{1,5})-(sbx[_-][a-z0-9]{1,40})\\.${escapeRe(deps.config.sandboxes.publicHost)}(?::\\d+)?$`, 'i');
  app.addHook('onRequest', (req, _reply, done) => {
    const m = req.headers.host ? portHost.exec(req.headers.host) : null;
    if (!m) return done();
    sandboxes.exposeIfMarked(m[2]!.toLowerCase().replace('-', '_'), Number(m[1]), E2B_MARKER).then(
      () => done(),
      (e: Error) => done(e),
    );
  });

  void app.register(async (scope) => {
    // Raw bodies: Connect envelopes, multipart uploads and JSON are read by the handlers themselves.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
    control.mount(scope);

    /** The in-sandbox caller, or an answer already sent (no E2B header: not ours, a plain 404). */
    const inSandbox = (req: FastifyRequest, reply: FastifyReply, rpcStyle: boolean) => {
      if (!req.headers['e2b-sandbox-id']) {
        const e = errors.notFound('route');
        void reply.code(404).send(e.toBody());
        return null;
      }
      const who = access.sandbox(req.headers);
      if (!who) {
        if (rpcStyle) {
          reply.hijack();
          sendUnaryError(reply.raw, new ConnectError('unauthenticated', 'missing or invalid X-Access-Token for this sandbox'));
        } else void reply.code(401).send({ code: 401, message: 'missing or invalid access token for this sandbox' });
        return null;
      }
      return who;
    };
    const guarded =
      (fn: (p: Principal, id: string, req: FastifyRequest, reply: FastifyReply) => Promise<unknown>) =>
      async (req: FastifyRequest, reply: FastifyReply) => {
        const who = inSandbox(req, reply, false);
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
        const who = inSandbox(req, reply, true);
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
        if (streaming && service === 'process') await rpc.stream(method, who.principal, who.id, req, reply);
        else await rpc.unary(service, method, who.principal, who.id, req, reply);
        return reply;
      });
    }
    scope.get('/files', guarded((p, id, req, reply) => files.download(p, id, req as never, reply)));
    scope.post('/files', guarded((p, id, req, reply) => files.upload(p, id, req as never, reply)));
    scope.get(
      '/health',
      guarded(async (p, id, _req, reply) => {
        const s = await sandboxes.get(p, id);
        return reply.code(s.status === 'running' ? 204 : 502).send();
      }),
    );

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
      });
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
