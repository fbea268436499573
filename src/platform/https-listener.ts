// nube's HTTPS port: TLS terminated here, then every request and upgrade goes through the same Fastify
// app as the HTTP port (API, port proxy, sites, custom domains). The certificate is picked per
// handshake by SNI from a source the wiring provides (the domains area's certificates); a name with
// no certificate fails the handshake rather than being answered with a certificate for another name.
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { SecureContext } from 'node:tls';
import type { FastifyInstance } from 'fastify';

export interface CertificateSource {
  contextFor(servername: string): Promise<SecureContext | null>;
  /** Certificate and key (PEM) for a handshake without SNI, if any. */
  readonly fallback: { cert: string; key: string } | null;
}

export class HttpsListener {
  private server: Server | null = null;

  constructor(
    private readonly app: FastifyInstance,
    private readonly certs: CertificateSource,
  ) {}

  async listen(host: string, port: number): Promise<number> {
    const server = createServer({
      // Without SNI (an IP literal) the file certificate, if one was given; else the handshake fails.
      ...(this.certs.fallback ?? {}),
      SNICallback: (name, cb) => {
        this.certs.contextFor(name).then(
          (ctx) => (ctx ? cb(null, ctx) : cb(new Error(`no certificate for ${name}`))),
          (err: Error) => cb(err),
        );
      },
    });
    const handler = this.app.routing.bind(this.app);
    server.on('request', handler);
    // Upgrades (WebSockets) reach the HTTP server's listeners: the port proxy and the agents' endpoint.
    server.on('upgrade', (req, socket, head) => this.app.server.emit('upgrade', req, socket, head));
    server.on('tlsClientError', () => {});
    server.keepAliveTimeout = this.app.server.keepAliveTimeout;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    this.server = server;
    return (server.address() as AddressInfo).port;
  }

  /** Stops listening; responses still open after `graceMs` have their connections cut. */
  async close(graceMs: number): Promise<void> {
    const s = this.server;
    if (!s) return;
    this.server = null;
    s.closeIdleConnections();
    const cut = setTimeout(() => s.closeAllConnections(), graceMs);
    cut.unref();
    await new Promise<void>((resolve) => s.close(() => resolve()));
    clearTimeout(cut);
  }
}
