// /console: the web console's pages and its sign-in. The pages call the public REST API (/api/v2) with
// the session cookie and the session's CSRF token, which auth accepts only together and from this
// host's own pages (platform/auth.ts). Sign-in sets the cookie only at a host no tenant's server
// shares (console-host.ts).
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { readCookie, sameOrigin } from '../../platform/auth.js';
import type { Config } from '../../platform/config-shape.js';
import { errors } from '../../platform/errors.js';
import type { ProxyTrust, RequestOrigin } from '../../platform/request-origin.js';
import { labelRequest } from '../../platform/metrics-http.js';
import { parseOr400 } from '../../platform/validate.js';
import { z } from 'zod';
import type { ConsoleFiles } from './static-files.js';
import { consoleHostRefusal } from './console-host.js';
import { type ConsoleSessions, cookieName } from './sessions.js';

const SignIn = z.object({ key: z.string().min(1).max(200) });

/** Pages may reach only this host: no outside script, style, frame or connection. */
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  // xterm.js and the charts set style attributes.
  "style-src 'self' 'unsafe-inline'",
  // Presigned upload and read URLs point at the blob store, another host in scale-out (S3).
  "img-src 'self' data: blob: http: https:",
  "connect-src 'self' http: https:",
  "frame-src 'self' blob: data:",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'self'",
].join('; ');

/** `__Host-nube_console` with Secure over HTTPS (behind a trusted proxy too), `nube_console` over plain HTTP. */
function cookie(o: RequestOrigin, value: string, maxAgeS: number): string {
  return `${cookieName(o.secure)}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${o.secure ? '; Secure' : ''}`;
}

/** Over HTTPS the browser is told to use nothing else for this host, its other ports included. */
const HSTS = 'max-age=31536000';

function checkOrigin(req: FastifyRequest, o: RequestOrigin): void {
  if (!sameOrigin({ stateChanging: true, secure: o.secure, host: o.host, origin: req.headers.origin, secFetchSite: req.headers['sec-fetch-site'] }))
    throw errors.forbidden('sign-in and sign-out are accepted only from nube\'s own pages (Origin must be this host)', 'CrossSiteRequest');
}

function sendFile(req: FastifyRequest, reply: FastifyReply, files: ConsoleFiles, rel: string, o: RequestOrigin) {
  const f = files.get(rel);
  if (f === undefined) {
    return reply
      .code(503)
      .type('text/plain; charset=utf-8')
      .send('The web console is not built. Run `npm run build` (scripts/setup.sh does it), then reload.\n');
  }
  if (f === null) throw errors.notFound('file');
  const accept = String(req.headers['accept-encoding'] ?? '');
  reply
    .header('content-type', f.type)
    .header('cache-control', f.immutable ? 'public, max-age=31536000, immutable' : 'no-cache')
    .header('content-security-policy', CSP)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'same-origin')
    .header('vary', 'accept-encoding');
  if (o.secure) reply.header('strict-transport-security', HSTS);
  if (f.br && /\bbr\b/.test(accept)) return reply.header('content-encoding', 'br').send(f.br);
  if (f.gzip && /\bgzip\b/.test(accept)) return reply.header('content-encoding', 'gzip').send(f.gzip);
  return reply.send(f.body);
}

export interface ConsoleRouteDeps {
  sessions: ConsoleSessions;
  files: ConsoleFiles;
  proxy: ProxyTrust;
  config: Config;
}

export function mountConsole(app: FastifyInstance, { sessions, files, proxy, config }: ConsoleRouteDeps): void {
  const originOf = (req: FastifyRequest) => proxy.originOf(req.raw, false);
  app.post('/console/session', async (req, reply) => {
    labelRequest(req, 'console.signIn');
    const o = originOf(req);
    checkOrigin(req, o);
    const refusal = consoleHostRefusal(config, o, req.raw.socket.localAddress);
    if (refusal) throw errors.forbidden(`the console does not sign in here: ${refusal}`, 'ConsoleHostRefused');
    const { key } = parseOr400(SignIn, req.body ?? {}, 'body');
    const s = await sessions.signIn(key);
    const maxAge = Math.floor((s.expiresAt - Date.now()) / 1000);
    if (o.secure) reply.header('strict-transport-security', HSTS);
    return reply
      .header('set-cookie', cookie(o, s.token, maxAge))
      .header('cache-control', 'no-store')
      .send({ ok: true, plan: s.principal.plan, expiresAt: new Date(s.expiresAt).toISOString(), csrfToken: s.csrfToken });
  });
  app.delete('/console/session', async (req, reply) => {
    labelRequest(req, 'console.signOut');
    const o = originOf(req);
    checkOrigin(req, o);
    const token = readCookie(req.headers.cookie, cookieName(o.secure));
    const revoked = token ? await sessions.signOut(token) : false;
    return reply.header('set-cookie', cookie(o, '', 0)).send({ ok: true, revoked });
  });
  app.get('/console', (req, reply) => sendFile(req, reply, files, 'index.html', originOf(req)));
  app.get('/console/*', (req, reply) => {
    const rel = (req.params as { '*': string })['*'];
    if (rel.split('/').some((s) => s === '..' || s.startsWith('.'))) throw errors.notFound('file');
    return sendFile(req, reply, files, rel || 'index.html', originOf(req));
  });
}
