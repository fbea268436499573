// The internal channel between nodes: a request for a resource held by another node is forwarded to it
// (bodies streamed both ways, so SSE streams and downloads flow as they are produced), a create placed
// on another node is relayed there, and WebSocket upgrades are spliced through. Connections go only to
// addresses nodes registered for themselves in the nodes table, never to a host a user chose; each
// request carries a credential derived from NUBE_SECRET, which the receiving node checks.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { connect as netConnect, type Socket } from 'node:net';
import { pipeline } from 'node:stream';
import { connect as tlsConnect } from 'node:tls';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Agent } from 'undici';
import { replayOriginOf } from './audit-context.js';
import { boxSource } from './box-source.js';
import { errors } from './errors.js';
import type { NodeRegistry } from './nodes.js';
import { NODE_ORIGIN_HEADER, ProxyTrust } from './request-origin.js';
import { injectTraceContext, inSpan, SpanKind } from './tracing.js';

/** Header carrying the internal credential; a request with a valid one was relayed by another node. */
export const NODE_TOKEN_HEADER = 'x-nube-node-token';
const FROM_HEADER = 'x-nube-node-from';
/** How many nodes relayed a request already (absent: one): a resource that moved is followed once. */
const HOPS_HEADER = 'x-nube-node-hops';
/** Most relays of one request: the first node's guess, then the node the resource moved to. */
const MAX_HOPS = 2;
/** On a relayed create: the receiving node already counted it against the caller's rate limit. */
const COUNTED_HEADER = 'x-nube-node-counted';
const RELAYED = Symbol('relayedByNode');
/**
 * On a request relayed from the box API: the id of the minted key the relaying node found bound to the
 * box it came from (Authenticator.vouchBox). Believed only with the node credential; taken off any other.
 */
const BOX_KEY_HEADER = 'x-nube-node-box-key';
const BOX_VOUCHED = Symbol('boxVouchedByNode');

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** Finds the resource a request addresses, and the node holding it. */
export interface Locator {
  /** What the resource is called in errors (`sandbox`, `database`). */
  what: string;
  /** The resource id the request addresses, or undefined when it addresses none of this kind. */
  match(path: string, host: string | undefined): string | undefined;
  /** The node holding it (null: a row from before nodes; undefined: no such resource here). */
  locate(id: string): Promise<string | null | undefined>;
}

/** The credential nodes present to each other: an HMAC of a fixed label under the shared secret. */
export function nodeToken(secret: string): string {
  return createHmac('sha256', secret).update('nube-node-forward-v1').digest('base64url');
}

/** True while serving a request another node relayed here (placement keeps it here; no re-forward). */
export function isRelayed(req: FastifyRequest | IncomingMessage): boolean {
  return (req as unknown as Record<symbol, unknown>)[RELAYED] === true;
}

/** On a relayed request from a box: the minted key the relaying node vouched for (AuthUse.boxVouched). */
export function boxVouched(req: IncomingMessage): string | undefined {
  return (req as unknown as Record<symbol, string | undefined>)[BOX_VOUCHED];
}

/** Checks, on the node a box's request arrived at, that its minted key is bound to that box. */
export type BoxVoucher = (req: IncomingMessage, box: string) => Promise<string | undefined>;

/**
 * Marks a request as relayed by a node, and takes the internal credential off it: what the request
 * reaches next (a sandbox's port, behind the port proxy) must never see the cluster's credential.
 */
function markRelayed(req: FastifyRequest | IncomingMessage): void {
  (req as unknown as Record<symbol, unknown>)[RELAYED] = true;
  const vouched = req.headers[BOX_KEY_HEADER];
  if (typeof vouched === 'string') (('raw' in req ? req.raw : req) as unknown as Record<symbol, unknown>)[BOX_VOUCHED] = vouched;
  delete req.headers[NODE_TOKEN_HEADER];
  delete req.headers[BOX_KEY_HEADER];
  const raw = 'raw' in req ? req.raw.rawHeaders : req.rawHeaders;
  for (let i = raw.length - 2; i >= 0; i -= 2) if ([NODE_TOKEN_HEADER, BOX_KEY_HEADER].includes(raw[i]!.toLowerCase())) raw.splice(i, 2);
}

/** True when a relayed request may be relayed once more (its resource moved while it travelled). */
export function mayRelayAgain(req: FastifyRequest): boolean {
  if (!isRelayed(req)) return true;
  return Number(req.headers[HOPS_HEADER] ?? 1) < MAX_HOPS;
}

/** A request relayed after the sending node applied the rate limit: not counted twice. */
export function alreadyCounted(req: FastifyRequest): boolean {
  return isRelayed(req) && req.headers[COUNTED_HEADER] === '1';
}

export class NodeForwarder {
  private readonly token: string;
  private readonly tokenBuf: Buffer;
  private readonly locators: Locator[] = [];
  private readonly agent = new Agent({ keepAliveTimeout: 30_000, connections: 128, pipelining: 1 });
  /** Set once auth exists (server.ts): a box's request is relayed with the key this node found bound to it. */
  voucher: BoxVoucher | null = null;

  constructor(
    private readonly nodes: NodeRegistry,
    secret: string,
    /** What this node believes of a request's scheme and host, passed on to the node it relays to. */
    private readonly proxy: ProxyTrust = new ProxyTrust(),
  ) {
    this.token = nodeToken(secret);
    this.tokenBuf = Buffer.from(this.token);
  }

  addLocator(l: Locator): void {
    this.locators.push(l);
  }

  /** Checks an internal credential when present: true if relayed by a node, throws 401 when forged. */
  private checkRelayed(headers: IncomingHttpHeaders): boolean {
    const given = headers[NODE_TOKEN_HEADER];
    if (given === undefined) return false;
    const buf = Buffer.from(String(given));
    if (buf.length !== this.tokenBuf.length || !timingSafeEqual(buf, this.tokenBuf)) {
      throw errors.unauthorized('invalid node credential');
    }
    return true;
  }

  /** The node a request must go to, or undefined to serve it here. */
  private async target(path: string, host: string | undefined): Promise<string | undefined> {
    for (const l of this.locators) {
      const id = l.match(path, host);
      if (id === undefined) continue;
      const nodeId = await l.locate(id);
      if (!nodeId || nodeId === this.nodes.id) return undefined;
      const node = await this.nodes.get(nodeId);
      // A down node's resources are answered here from the metadata (their status says so); work that
      // needs the node answers 503 from the area's service.
      return node && node.status === 'up' ? nodeId : undefined;
    }
    return undefined;
  }

  /** Forwards requests for resources held elsewhere before anything reads their bodies. */
  install(app: FastifyInstance): void {
    app.addHook('onRequest', async (req, reply) => {
      if (this.checkRelayed(req.headers)) {
        markRelayed(req);
        return;
      }
      // Only nodes count hops: a client's own header would only cut its request's relays short.
      delete req.headers[HOPS_HEADER];
      delete req.headers[BOX_KEY_HEADER];
      if (this.nodes.solo || this.locators.length === 0) return;
      const nodeId = await this.target(req.url.split('?')[0]!, req.headers.host);
      if (nodeId) {
        await this.forward(req, reply, nodeId, 'stream');
        return reply;
      }
    });
    this.installUpgrades(app);
  }

  /**
   * Sends the request to `nodeId` and streams its answer back. `stream` passes the request body on as
   * it arrives (nothing has read it yet); `parsed` sends the body Fastify parsed (a relayed create).
   */
  async forward(req: FastifyRequest, reply: FastifyReply, nodeId: string, body: 'stream' | 'parsed'): Promise<void> {
    const node = await this.nodes.get(nodeId);
    if (!node || node.status === 'down') throw errors.unavailable(`node ${nodeId} is down; retry later`, 30);
    const headers = this.outgoingHeaders(req.raw, req.ip, isRelayed(req));
    // A box's request (through the box API, or an MCP call of its replayed here) carries its key's binding.
    const box = boxSource(req.raw) ?? replayOriginOf(req.headers)?.box;
    // A request relayed once more (its resource moved) keeps what the box's node vouched for.
    const vouched = box !== undefined && this.voucher ? await this.voucher(req.raw, box) : boxVouched(req.raw);
    if (vouched !== undefined) headers[BOX_KEY_HEADER] = vouched;
    let payload: string | IncomingMessage | undefined;
    if (body === 'stream') {
      // Without a length (chunked, or an in-process inject), a method that may carry one streams what comes.
      const len = req.headers['content-length'];
      const hasBody = len !== undefined ? len !== '0' : req.method !== 'GET' && req.method !== 'HEAD';
      payload = hasBody ? req.raw : undefined;
    } else if (req.body !== undefined) {
      payload = JSON.stringify(req.body);
      headers[COUNTED_HEADER] = '1';
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(payload));
    } else {
      headers[COUNTED_HEADER] = '1';
      delete headers['content-length'];
    }
    const ac = new AbortController();
    const res = await inSpan(
      `forward to node ${nodeId}`,
      { 'nube.node': nodeId },
      () => {
        injectTraceContext(headers);
        return this.agent.request({ origin: node.address, path: req.url, method: req.method as 'GET', headers, body: payload, signal: ac.signal });
      },
      SpanKind.CLIENT,
    ).catch((err: unknown) => {
      req.log.warn({ err, node: nodeId }, 'forwarding to a node failed');
      throw errors.unavailable(`node ${nodeId} did not answer; retry later`, 5);
    });
    reply.hijack();
    const out = reply.raw;
    const resHeaders: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(res.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) resHeaders[k] = v;
    out.writeHead(res.statusCode, resHeaders);
    // Headers of a streamed answer (SSE) leave now, not with its first chunk.
    out.flushHeaders?.();
    out.on('close', () => {
      if (!out.writableFinished) ac.abort();
    });
    pipeline(res.body, out, () => {});
  }

  private outgoingHeaders(req: IncomingMessage, ip: string, relayed: boolean): Record<string, string | string[]> {
    const incoming = req.headers;
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(incoming)) if (v !== undefined && !HOP_BY_HOP.has(k)) headers[k] = v;
    // The host header passes unchanged: the port proxy routes by the host name the client used.
    headers['x-forwarded-for'] = incoming['x-forwarded-for'] ? `${incoming['x-forwarded-for']}, ${ip}` : ip;
    headers[NODE_TOKEN_HEADER] = this.token;
    // The scheme and host the browser used, as this node judged them (the console cookie's checks).
    headers[NODE_ORIGIN_HEADER] = ProxyTrust.describe(this.proxy.originOf(req, relayed));
    headers[FROM_HEADER] = this.nodes.id;
    // markRelayed keeps the incoming count; a fresh request starts at one hop.
    headers[HOPS_HEADER] = String(Number(incoming[HOPS_HEADER] ?? 0) + 1);
    delete headers[COUNTED_HEADER];
    delete headers[BOX_KEY_HEADER];
    return headers;
  }

  /**
   * WebSocket upgrades (exposed ports, terminals, agent streams): one dispatcher in front of the
   * areas' upgrade listeners splices an upgrade for a resource held elsewhere to its node.
   */
  private installUpgrades(app: FastifyInstance): void {
    app.addHook('onReady', async () => {
      const server = app.server;
      const local = server.listeners('upgrade') as ((req: IncomingMessage, socket: Socket, head: Buffer) => void)[];
      server.removeAllListeners('upgrade');
      server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
        const serveHere = () => {
          for (const l of local) l.call(server, req, socket, head);
        };
        let relayed = false;
        try {
          relayed = this.checkRelayed(req.headers);
        } catch {
          socket.end('HTTP/1.1 401 Unauthorized\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
          return;
        }
        if (relayed) {
          markRelayed(req);
          return serveHere();
        }
        if (this.nodes.solo) return serveHere();
        this.target((req.url ?? '/').split('?')[0]!, req.headers.host).then(
          async (nodeId) => {
            if (!nodeId) return serveHere();
            const node = await this.nodes.get(nodeId);
            if (!node) return serveHere();
            this.spliceUpgrade(req, socket, head, node.address);
          },
          () => socket.destroy(),
        );
      });
    });
  }

  private spliceUpgrade(req: IncomingMessage, socket: Socket, head: Buffer, address: string): void {
    const url = new URL(address);
    const tls = url.protocol === 'https:';
    const port = Number(url.port || (tls ? 443 : 80));
    const upstream = tls ? tlsConnect({ host: url.hostname, port, servername: url.hostname }) : netConnect({ host: url.hostname, port });
    const headers = this.outgoingHeaders(req, req.socket.remoteAddress ?? '', isRelayed(req));
    headers.connection = 'Upgrade';
    headers.upgrade = String(req.headers.upgrade ?? 'websocket');
    let text = `${req.method ?? 'GET'} ${req.url ?? '/'} HTTP/1.1\r\n`;
    for (const [k, v] of Object.entries(headers)) for (const one of Array.isArray(v) ? v : [v]) text += `${k}: ${one}\r\n`;
    upstream.once(tls ? 'secureConnect' : 'connect', () => {
      upstream.write(`${text}\r\n`);
      if (head.length) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    const end = () => {
      upstream.destroy();
      socket.destroy();
    };
    upstream.on('error', end);
    socket.on('error', end);
    upstream.on('close', () => socket.destroy());
    socket.on('close', () => upstream.destroy());
  }

  /**
   * An internal call from this node to another (not a user's request): JSON in and out, with the node
   * credential. For work one node asks of another, such as taking over a database.
   */
  async call(nodeId: string, method: 'POST' | 'GET', path: string, body?: unknown, timeoutMs = 120_000): Promise<{ status: number; body: unknown }> {
    const node = await this.nodes.get(nodeId);
    if (!node || node.status === 'down') throw errors.unavailable(`node ${nodeId} is down; retry later`, 30);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const res = await this.agent.request({
      origin: node.address,
      path,
      method,
      headers: {
        [NODE_TOKEN_HEADER]: this.token,
        [FROM_HEADER]: this.nodes.id,
        ...(payload === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: payload,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    const text = await res.body.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: the text is the answer
    }
    return { status: res.statusCode, body: parsed };
  }

  /**
   * A raw two-way connection to `path` on another node (an internal upgrade carrying the credential):
   * resolves once that node answered 101, with the socket paused for the caller to pipe. An area
   * serving such a path must check isRelayed() (only another node may open it), and the path must not
   * be one a locator forwards (or a client's request would be relayed with the credential).
   */
  async tunnel(nodeId: string, path: string, timeoutMs = 15_000): Promise<Socket> {
    const node = await this.nodes.get(nodeId);
    if (!node || node.status === 'down') throw errors.unavailable(`node ${nodeId} is down; retry later`, 30);
    const url = new URL(node.address);
    const tls = url.protocol === 'https:';
    const port = Number(url.port || (tls ? 443 : 80));
    const s: Socket = tls ? tlsConnect({ host: url.hostname, port, servername: url.hostname }) : netConnect({ host: url.hostname, port, noDelay: true });
    return new Promise<Socket>((resolve, reject) => {
      const timer = setTimeout(() => s.destroy(new Error(`node ${nodeId} did not open the tunnel in time`)), timeoutMs);
      let buf = Buffer.alloc(0);
      const fail = (e: Error) => {
        clearTimeout(timer);
        reject(e);
      };
      const onData = (chunk: Buffer) => {
        buf = Buffer.concat([buf, chunk]);
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) {
          if (buf.length > 16_384) s.destroy(new Error('tunnel answer too long'));
          return;
        }
        s.off('data', onData);
        s.off('error', fail);
        s.off('close', onClose);
        clearTimeout(timer);
        const head = buf.subarray(0, end).toString('latin1');
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
        if (status !== 101) {
          s.destroy();
          reject(new Error(`node ${nodeId} refused the tunnel: ${head.split('\r\n')[0]} ${buf.subarray(end + 4).toString().slice(0, 300)}`));
          return;
        }
        s.pause();
        const rest = buf.subarray(end + 4);
        if (rest.length) s.unshift(rest);
        resolve(s);
      };
      const onClose = () => fail(new Error(`node ${nodeId} closed the tunnel`));
      s.on('data', onData);
      s.once('error', fail);
      s.once('close', onClose);
      s.once(tls ? 'secureConnect' : 'connect', () => {
        s.write(
          `GET ${path} HTTP/1.1\r\nhost: ${url.host}\r\nconnection: Upgrade\r\nupgrade: nube-tunnel\r\n` +
            `${NODE_TOKEN_HEADER}: ${this.token}\r\n${FROM_HEADER}: ${this.nodes.id}\r\n\r\n`,
        );
      });
    });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}
