// The box API: nube's own API on the sandbox bridge's host address (10.77.0.1:7072 by default), the
// NUBE_BASE_URL of a box holding a key nube minted. Sandboxes reach neither the host's other ports nor
// nube's public URL when it is loopback or private, so the sandbox network opens exactly this port to
// them, as it does the LLM gateway's. Requests go to the same Fastify app (routes, auth, audit, rate
// limits unchanged), stamped with the bridge address they came from: a minted key is accepted only
// there, from its own box (Authenticator), and this listener accepts nothing but such keys.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { markBoxSource } from './box-source.js';
import { API_PREFIX } from './rest.js';

/** The host side of the sandbox network (the sandboxes area provides it). */
export interface BoxNetwork {
  hostAddress(): Promise<string>;
  openHostPort(port: number): Promise<void>;
  closeHostPort(port: number): Promise<void>;
}

/** The peer's IPv4 address (an IPv4-mapped IPv6 form unwrapped). */
function peer(req: IncomingMessage): string {
  const a = req.socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

function refuse(res: ServerResponse, status: number, code: string, message: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: message, code }));
}

export class BoxApiListener {
  private reassertedAt = Date.now();

  private constructor(
    private readonly server: Server,
    private readonly net: BoxNetwork,
    readonly port: number,
    /** What a box's NUBE_BASE_URL is (the SDKs add /api/v2 themselves). */
    readonly url: string,
  ) {}

  static async start(app: FastifyInstance, net: BoxNetwork, port: number): Promise<BoxApiListener> {
    const warn = (e: unknown) => app.log.warn({ err: e }, 'could not re-open the box API port');
    const address = await net.hostAddress();
    const handler = app.routing.bind(app);
    let self: BoxApiListener | undefined;
    const server = createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0]!;
      // Only the REST API and MCP, where a scoped key is checked per operation; not the console, E2B,
      // libSQL, the port proxy or metrics, which take other credentials or none.
      if (!path.startsWith(`${API_PREFIX}/`) && path !== '/api/mcp') {
        refuse(res, 404, 'NotFound', 'the box API serves /api/v2 and /api/mcp only');
        return;
      }
      if (!req.headers.authorization && !req.headers['x-api-key']) {
        refuse(res, 401, 'Unauthorized', 'the box API takes the key nube minted for this box (NUBE_API_KEY)');
        return;
      }
      markBoxSource(req, peer(req));
      // Its own host, so no host-routed surface (a sandbox port's host, a custom domain) is reached.
      req.headers.host = self ? new URL(self.url).host : `${address}:${port}`;
      handler(req, res);
    });
    server.keepAliveTimeout = app.server.keepAliveTimeout;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, address, () => resolve());
    });
    const bound = (server.address() as AddressInfo).port;
    await net.openHostPort(bound);
    self = new BoxApiListener(server, net, bound, `http://${address}:${bound}`);
    self.keepOpen(warn);
    return self;
  }

  private timer: NodeJS.Timeout | undefined;

  /**
   * Opens the port again at most every 10 s: the sandbox network's rules can be rebuilt under it (a
   * bridge reconfigured at another nube's start). Unlike the LLM gateway, whose URL is asked for on
   * every turn, nothing asks for this one after the key is minted: a timer reasserts it too.
   */
  async reassert(): Promise<void> {
    if (Date.now() - this.reassertedAt < 10_000) return;
    this.reassertedAt = Date.now();
    await this.net.openHostPort(this.port);
  }

  private keepOpen(log: (e: unknown) => void): void {
    this.timer = setInterval(() => void this.reassert().catch(log), 10_000);
    this.timer.unref();
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.net.closeHostPort(this.port).catch(() => {});
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
