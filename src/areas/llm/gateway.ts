// The gateway's own listener, on the sandbox bridge's host address (10.77.0.1:<port> by default): it
// serves only the OpenAI-compatible routes, authenticated by a scoped `nube_llm_` credential, so a
// sandbox that reaches it reaches nothing else of nube. The sandbox network opens exactly this port of
// the host to sandboxes (an nftables set); the rest of the host stays closed to them.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { LlmCredentials } from './credentials.js';
import { type ChatBody, GatewayError, type RelayResult, type RelaySink } from './relay.js';

/** What the gateway's listener needs of the LLM service (declared here so it does not import it). */
export interface GatewayBackend {
  resolveCredential(secret: string): ReturnType<LlmCredentials['resolve']>;
  modelFor(ownerId: string): Promise<string>;
  complete(ownerId: string, body: ChatBody, sink: RelaySink, signal?: AbortSignal, meter?: { subject?: string }): Promise<RelayResult>;
}

/** The host side of the sandbox network (the sandboxes area provides it). */
export interface HostNetwork {
  /** The host's address on the sandbox bridge (the bridge is set up if needed). */
  hostAddress(): Promise<string>;
  /** Lets every sandbox reach this TCP port at hostAddress(); nothing else of the host. */
  openHostPort(port: number): Promise<void>;
  closeHostPort(port: number): Promise<void>;
}

const MAX_BODY = 8 * 1024 * 1024;

export class GatewayServer {
  private constructor(
    private readonly server: Server,
    private readonly host: HostNetwork,
    readonly port: number,
    readonly url: string,
  ) {}

  static async start(svc: GatewayBackend, host: HostNetwork, port: number): Promise<GatewayServer> {
    const address = await host.hostAddress();
    const server = createServer((req, res) => {
      handle(svc, req, res).catch((e: unknown) => fail(res, e));
    });
    server.keepAliveTimeout = 30_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, address, () => resolve());
    });
    const bound = (server.address() as AddressInfo).port;
    await host.openHostPort(bound);
    return new GatewayServer(server, host, bound, `http://${address}:${bound}/v1`);
  }

  private reassertedAt = Date.now();

  /**
   * Opens the port again (idempotent) at most every 10 s: the sandbox network's rules can be rebuilt
   * under a running gateway (a bridge reconfigured at another nube's start), which would close it.
   */
  async reassert(): Promise<void> {
    if (Date.now() - this.reassertedAt < 10_000) return;
    this.reassertedAt = Date.now();
    await this.host.openHostPort(this.port);
  }

  async close(): Promise<void> {
    await this.host.closeHostPort(this.port).catch(() => {});
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function fail(res: ServerResponse, e: unknown): void {
  if (e instanceof GatewayError) send(res, e.status, e.body());
  else send(res, 500, { error: { message: 'internal error', type: 'nube_gateway_error', code: 'InternalError' } });
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_BODY) throw new GatewayError(413, 'PayloadTooLarge', `request body over ${MAX_BODY} bytes`);
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}

/** The peer's IPv4 address (an IPv4-mapped IPv6 form unwrapped). */
function remoteAddress(req: IncomingMessage): string {
  const a = req.socket.remoteAddress ?? '';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

async function handle(svc: GatewayBackend, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0];
  const route =
    path === '/v1/chat/completions' && req.method === 'POST' ? 'chat' : path === '/v1/models' && req.method === 'GET' ? 'models' : null;
  if (!route) throw new GatewayError(404, 'NotFound', 'the LLM gateway serves POST /v1/chat/completions and GET /v1/models only');
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
  const cred = m ? await svc.resolveCredential(m[1]!) : null;
  if (!cred) throw new GatewayError(401, 'Unauthorized', 'missing or invalid gateway credential');
  // A sandbox's credential from any other address (read out of its sandbox, used from another): refused
  // as if it did not exist. Addresses on the bridge cannot be forged (the sandbox network drops frames
  // whose source is not their port's own address).
  if (cred.address !== null && remoteAddress(req) !== cred.address) throw new GatewayError(401, 'Unauthorized', 'missing or invalid gateway credential');
  if (route === 'models') {
    const model = await svc.modelFor(cred.ownerId).catch(() => 'unconfigured');
    send(res, 200, { object: 'list', data: [{ id: model, object: 'model', owned_by: 'nube' }] });
    return;
  }
  let body: unknown;
  try {
    body = JSON.parse((await readBody(req)).toString('utf8'));
  } catch (e) {
    if (e instanceof GatewayError) throw e;
    throw new GatewayError(400, 'InvalidJson', 'the body is not JSON');
  }
  if (!body || typeof body !== 'object' || !Array.isArray((body as { messages?: unknown }).messages)) {
    throw new GatewayError(400, 'ValidationError', '`messages` (an array) is required');
  }
  const ac = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) ac.abort();
  });
  await svc.complete(
    cred.ownerId,
    body as ChatBody,
    {
      start: (status, contentType) =>
        res.writeHead(status, { 'content-type': contentType, 'cache-control': 'no-cache', 'x-accel-buffering': 'no' }),
      write: (chunk) => {
        res.write(chunk);
      },
      end: () => res.end(),
    },
    ac.signal,
    { subject: cred.subject },
  );
}
