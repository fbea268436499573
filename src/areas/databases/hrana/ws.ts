import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { type RawData, type WebSocket, WebSocketServer } from 'ws';
import type { Principal } from '../../../platform/auth.js';
import { ApiError } from '../../../platform/errors.js';
import { claimedUpgrades } from '../../../platform/websocket.js';
import type { DatabasesService } from '../service.js';
import { type CursorEntry, cursorEntries } from './cursor.js';
import { runPipeline, type StreamOutcome } from './pipeline.js';
import type { HranaStreams } from './streams.js';
import { hranaJson, type StreamRequest, wsClientMsgSchema, type WsRequest } from './wire.js';

/*
 * libSQL's Hrana over WebSocket (subprotocols hrana3 and hrana2, JSON) on the database's libsqlUrl
 * path, what `@libsql/client` opens for `ws://`, `wss://` and `libsql://` URLs. The credential comes
 * in the `hello` message (a nube key or a database token, as `authToken`). Every stream request
 * goes through the same pipeline as Hrana over HTTP (hrana/pipeline.ts): same executors, authorizer,
 * size cap, time limit, result caps, fair share, rate limit and stream limits. A stream whose
 * requests up to its close arrive together (what the client sends for `execute`) runs on the
 * database's shared connection like a one-shot HTTP pipeline; any other stream gets a connection of
 * its own, addressed by the baton of its last answer, until it is closed or the socket goes away.
 */

const PATH = /^\/libsql\/(db_[A-Za-z0-9]+)\/?$/;
const SUBPROTOCOLS = ['hrana3', 'hrana2', 'hrana1'];
const HELLO_TIMEOUT_MS = 10_000;
const MAX_STREAMS = 128;
const MAX_CURSORS = 128;
const MAX_STORED_SQL = 1000;
/** Requests of one socket not answered yet; more close the socket (a client that does not read). */
const MAX_PENDING = 10_000;

interface Item {
  req: StreamRequest;
  requestId: number;
  cursor?: Cursor;
}

interface Stream {
  id: number;
  pending: Item[];
  running: boolean;
  /** Baton of the stream's own connection (null: it has none yet, or it ran one-shot). */
  baton: string | null;
  /** Ran at least once: from now on it needs its own connection. */
  ran: boolean;
}

interface Cursor {
  entries: CursorEntry[] | null;
  ready: Promise<void>;
  settle: () => void;
}

type Authorize = (authorization: string) => Promise<Principal>;
type Consume = (p: Principal) => Promise<void>;

export function mountLibsqlWs(
  app: FastifyInstance,
  databases: DatabasesService,
  streams: HranaStreams,
  opts: { authorize: Authorize; consume: Consume; maxPayload: number; log: FastifyBaseLogger },
): void {
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: opts.maxPayload,
    perMessageDeflate: false,
    handleProtocols: (offered) => SUBPROTOCOLS.find((p) => offered.has(p)) ?? false,
  });
  const sockets = new Set<WebSocket>();
  app.addHook('onClose', async () => {
    for (const ws of sockets) ws.terminate();
    wss.close();
  });
  app.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    const m = PATH.exec((req.url ?? '/').split('?')[0] as string);
    if (!m) return;
    claimedUpgrades.add(req);
    socket.on('error', () => socket.destroy());
    wss.handleUpgrade(req, socket, head, (ws) => {
      sockets.add(ws);
      ws.once('close', () => sockets.delete(ws));
      new HranaSocket(ws, m[1] as string, databases, streams, opts).start();
    });
  });
}

class HranaSocket {
  private principal: Principal | null = null;
  private readonly sqls = new Map<number, string>();
  private readonly streams = new Map<number, Stream>();
  private readonly cursors = new Map<number, Cursor>();
  private intake: Promise<void> = Promise.resolve();
  private pending = 0;
  private closed = false;

  constructor(
    private readonly ws: WebSocket,
    private readonly dbId: string,
    private readonly databases: DatabasesService,
    private readonly hranaStreams: HranaStreams,
    private readonly opts: { authorize: Authorize; consume: Consume; log: FastifyBaseLogger },
  ) {}

  start(): void {
    const helloTimer = setTimeout(() => {
      if (!this.principal) this.ws.close(1008, 'no hello');
    }, HELLO_TIMEOUT_MS);
    helloTimer.unref();
    this.ws.on('message', (data: RawData, isBinary: boolean) => {
      // In order: a hello is checked before the requests sent after it are looked at.
      this.intake = this.intake
        .then(() => this.onMessage(data, isBinary))
        .catch((err: unknown) => {
          this.opts.log.warn({ err }, 'libSQL WebSocket message failed');
          this.ws.close(1011, 'internal error');
        });
    });
    this.ws.on('close', () => {
      clearTimeout(helloTimer);
      this.closed = true;
      void this.endAll();
    });
    this.ws.on('error', () => this.ws.terminate());
  }

  private send(msg: unknown): void {
    if (!this.closed) this.ws.send(hranaJson(msg));
  }

  private fail(code: number, reason: string): void {
    this.ws.close(code, reason);
  }

  private async onMessage(data: RawData, isBinary: boolean): Promise<void> {
    if (this.closed) return;
    if (isBinary) {
      this.fail(3003, 'only text messages are accepted with JSON encoding');
      return;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(data.toString());
    } catch {
      this.fail(3003, 'a message is not JSON');
      return;
    }
    const r = wsClientMsgSchema.safeParse(parsed);
    if (!r.success) {
      this.fail(3003, `invalid message: ${r.error.issues[0]?.message ?? 'bad shape'}`);
      return;
    }
    const msg = r.data;
    if (msg.type === 'hello') {
      try {
        this.principal = await this.opts.authorize(`Bearer ${msg.jwt ?? ''}`);
        // The database must be the caller's before anything runs on it.
        await this.databases.assertAccess(this.principal, this.dbId);
        this.send({ type: 'hello_ok' });
      } catch (err) {
        this.principal = null;
        this.send({ type: 'hello_error', error: errorOf(err) });
        this.ws.close(1008, 'hello refused');
      }
      return;
    }
    if (!this.principal) {
      this.fail(1008, 'a request came before a successful hello');
      return;
    }
    if (++this.pending > MAX_PENDING) {
      this.fail(1008, 'too many requests waiting for an answer');
      return;
    }
    this.request(msg.request_id, msg.request);
  }

  private answer(
    requestId: number,
    out: { response: unknown } | { error: { message: string; code: string } },
  ): void {
    this.pending--;
    if ('response' in out) this.send({ type: 'response_ok', request_id: requestId, response: out.response });
    else this.send({ type: 'response_error', request_id: requestId, error: out.error });
  }

  private refuse(requestId: number, message: string, code = 'HRANA_PROTO_ERROR'): void {
    this.answer(requestId, { error: { message, code } });
  }

  private request(id: number, req: WsRequest): void {
    switch (req.type) {
      case 'open_stream':
        if (this.streams.has(req.stream_id)) {
          this.refuse(id, `stream ${req.stream_id} is already open`);
          return;
        }
        if (this.streams.size >= MAX_STREAMS) {
          this.refuse(id, `at most ${MAX_STREAMS} streams per connection`, 'STREAM_LIMIT');
          return;
        }
        this.streams.set(req.stream_id, {
          id: req.stream_id,
          pending: [],
          running: false,
          baton: null,
          ran: false,
        });
        this.answer(id, { response: { type: 'open_stream' } });
        return;
      case 'store_sql':
        if (!this.sqls.has(req.sql_id) && this.sqls.size >= MAX_STORED_SQL) {
          this.refuse(
            id,
            `a connection may store at most ${MAX_STORED_SQL} SQL texts`,
            'SQL_STORE_TOO_LARGE',
          );
          return;
        }
        this.sqls.set(req.sql_id, req.sql);
        this.answer(id, { response: { type: 'store_sql' } });
        return;
      case 'close_sql':
        this.sqls.delete(req.sql_id);
        this.answer(id, { response: { type: 'close_sql' } });
        return;
      case 'fetch_cursor':
        void this.fetchCursor(id, req.cursor_id, req.max_count);
        return;
      case 'close_cursor':
        this.cursors.delete(req.cursor_id);
        this.answer(id, { response: { type: 'close_cursor' } });
        return;
      default:
        this.streamRequest(id, req);
        return;
    }
  }

  private streamRequest(
    id: number,
    req: Exclude<
      WsRequest,
      { type: 'open_stream' | 'store_sql' | 'close_sql' | 'fetch_cursor' | 'close_cursor' }
    >,
  ): void {
    const stream = this.streams.get(req.stream_id);
    if (!stream) {
      this.refuse(id, `stream ${req.stream_id} is not open`, 'STREAM_NOT_FOUND');
      return;
    }
    let item: Item;
    try {
      item = { requestId: id, req: this.toPipeline(req) };
    } catch (err) {
      const e = errorOf(err);
      this.refuse(id, e.message, e.code);
      return;
    }
    if (req.type === 'open_cursor') {
      if (this.cursors.has(req.cursor_id)) {
        this.refuse(id, `cursor ${req.cursor_id} is already open`);
        return;
      }
      if (this.cursors.size >= MAX_CURSORS) {
        this.refuse(id, `at most ${MAX_CURSORS} cursors per connection`);
        return;
      }
      let settle = () => {};
      const ready = new Promise<void>((resolve) => {
        settle = resolve;
      });
      const cursor: Cursor = { entries: null, ready, settle };
      this.cursors.set(req.cursor_id, cursor);
      item.cursor = cursor;
    }
    stream.pending.push(item);
    if (req.type === 'close_stream') this.streams.delete(stream.id);
    this.schedule(stream);
  }

  /** A WebSocket request -> the pipeline request it is (stored SQL resolved: it belongs to the socket). */
  private toPipeline(
    req: Exclude<
      WsRequest,
      { type: 'open_stream' | 'store_sql' | 'close_sql' | 'fetch_cursor' | 'close_cursor' }
    >,
  ): StreamRequest {
    const resolve = <T extends { sql?: string | undefined; sql_id?: number | undefined }>(s: T): T => {
      if (s.sql_id === undefined || s.sql !== undefined) return s;
      const sql = this.sqls.get(s.sql_id);
      if (sql === undefined)
        throw new ApiError(400, 'SQL_NOT_FOUND', `no SQL text is stored as sql_id ${s.sql_id}`);
      return { ...s, sql, sql_id: undefined };
    };
    switch (req.type) {
      case 'close_stream':
        return { type: 'close' };
      case 'execute':
        return { type: 'execute', stmt: resolve(req.stmt) };
      case 'batch':
      case 'open_cursor':
        return {
          type: 'batch',
          batch: { steps: req.batch.steps.map((s) => ({ ...s, stmt: resolve(s.stmt) })) },
        };
      case 'sequence':
        return { type: 'sequence', ...resolve({ sql: req.sql, sql_id: req.sql_id }) };
      case 'describe':
        return { type: 'describe', ...resolve({ sql: req.sql, sql_id: req.sql_id }) };
      case 'get_autocommit':
        return { type: 'get_autocommit' };
    }
  }

  /**
   * A stream's requests run in order, one pipeline at a time. A stream that never ran waits one turn
   * of the event loop first, so the requests the client sent with it (up to its close) run together.
   */
  private schedule(stream: Stream): void {
    if (stream.running) return;
    stream.running = true;
    const go = () => void this.drain(stream);
    if (stream.ran) queueMicrotask(go);
    else setImmediate(go);
  }

  private async drain(stream: Stream): Promise<void> {
    while (stream.pending.length > 0) {
      const group = stream.pending.splice(0);
      const p = this.principal;
      let results: StreamOutcome[];
      try {
        if (!p || this.closed) throw new ApiError(400, 'STREAM_CLOSED', 'the connection is closed');
        await this.opts.consume(p);
        const r = await runPipeline(this.databases, this.hranaStreams, p, this.dbId, {
          baton: stream.baton,
          requests: group.map((i) => i.req),
        });
        stream.baton = r.baton;
        results = r.results;
      } catch (err) {
        // The whole pipeline failed (rate limit, expired stream, database gone): each request says so.
        const error = errorOf(err);
        results = group.map(() => ({ type: 'error', error }));
      }
      stream.ran = true;
      for (const [i, item] of group.entries()) this.respond(item, results[i] as StreamOutcome);
    }
    stream.running = false;
  }

  private respond(item: Item, out: StreamOutcome): void {
    if (item.cursor) {
      item.cursor.entries = cursorEntries(out);
      item.cursor.settle();
      this.answer(item.requestId, { response: { type: 'open_cursor' } });
      return;
    }
    if (out.type === 'error') {
      this.answer(item.requestId, { error: out.error });
      return;
    }
    const response = out.response.type === 'close' ? { type: 'close_stream' } : out.response;
    this.answer(item.requestId, { response });
  }

  private async fetchCursor(id: number, cursorId: number, maxCount: number): Promise<void> {
    const cursor = this.cursors.get(cursorId);
    if (!cursor) {
      this.refuse(id, `cursor ${cursorId} is not open`, 'CURSOR_NOT_FOUND');
      return;
    }
    await cursor.ready;
    const all = cursor.entries ?? [];
    const entries = all.splice(0, Math.max(0, maxCount));
    this.answer(id, { response: { type: 'fetch_cursor', entries, done: all.length === 0 } });
  }

  /** The socket went away: streams with a connection of their own are closed (rolling back). */
  private async endAll(): Promise<void> {
    const open = [...this.streams.values()];
    this.streams.clear();
    this.cursors.clear();
    const p = this.principal;
    if (!p) return;
    for (const s of open) {
      // Requests still queued on it are dropped with the socket; the close goes after them.
      s.pending.length = 0;
      while (s.running) await new Promise((r) => setImmediate(r));
      if (s.baton === null) continue;
      await runPipeline(this.databases, this.hranaStreams, p, this.dbId, {
        baton: s.baton,
        requests: [{ type: 'close' }],
      }).catch(() => undefined);
    }
  }
}

function errorOf(err: unknown): { message: string; code: string } {
  if (err instanceof ApiError) return { message: err.message, code: err.code };
  return { message: 'internal error', code: 'InternalError' };
}
