// /console: the web console's pages and its sign-in. The pages call the public REST API (/api/v2) with
// the session cookie, which auth accepts only from this host's own pages (platform/auth.ts sameOrigin).
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { readCookie, sameOrigin } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { labelRequest } from '../../platform/metrics-http.js';
import { parseOr400 } from '../../platform/validate.js';
import { z } from 'zod';
import type { ConsoleFiles } from './static-files.js';
import { type ConsoleSessions, SESSION_COOKIE } from './sessions.js';

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

function cookie(req: FastifyRequest, value: string, maxAgeS: number): string {
  const secure = req.protocol === 'https' ? '; Secure' : '';
  return `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${secure}`;
}

function checkOrigin(req: FastifyRequest): void {
  if (!sameOrigin({ stateChanging: true, host: req.headers.host, origin: req.headers.origin, secFetchSite: req.headers['sec-fetch-site'] }))
    throw errors.forbidden('sign-in and sign-out are accepted only from nube\'s own pages (Origin must be this host)', 'CrossSiteRequest');
}

function sendFile(req: FastifyRequest, reply: FastifyReply, files: ConsoleFiles, rel: string) {
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
  if (f.br && /\bbr\b/.test(accept)) return reply.header('content-encoding', 'br').send(f.br);
  if (f.gzip && /\bgzip\b/.test(accept)) return reply.header('content-encoding', 'gzip').send(f.gzip);
  return reply.send(f.body);
}

export function mountConsole(app: FastifyInstance, sessions: ConsoleSessions, files: ConsoleFiles): void {
  app.post('/console/session', async (req, reply) => {
    labelRequest(req, 'console.signIn');
    checkOrigin(req);
    const { key } = parseOr400(SignIn, req.body ?? {}, 'body');
    const s = await sessions.signIn(key);
    const maxAge = Math.floor((s.expiresAt - Date.now()) / 1000);
    return reply
      .header('set-cookie', cookie(req, s.token, maxAge))
      .header('cache-control', 'no-store')
      .send({ ok: true, plan: s.principal.plan, expiresAt: new Date(s.expiresAt).toISOString() });
  });
  app.delete('/console/session', async (req, reply) => {
    labelRequest(req, 'console.signOut');
    checkOrigin(req);
    const token = readCookie(req.headers.cookie, SESSION_COOKIE);
    const revoked = token ? await sessions.signOut(token) : false;
    return reply.header('set-cookie', cookie(req, '', 0)).send({ ok: true, revoked });
  });
  app.get('/console', (req, reply) => sendFile(req, reply, files, 'index.html'));
  app.get('/console/*', (req, reply) => {
    const rel = (req.params as { '*': string })['*'];
    if (rel.split('/').some((s) => s === '..' || s.startsWith('.'))) throw errors.notFound('file');
    return sendFile(req, reply, files, rel || 'index.html');
  });
}
