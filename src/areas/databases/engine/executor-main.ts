import { readSync, writeSync } from 'node:fs';
import { Connection } from './connection.js';
import { DatabaseEngineError, serializeError } from './errors.js';
import { batch, exportTo, importRows, query } from './executor.js';
import { runHrana } from './hrana-exec.js';
import { encodeFrame } from './framing.js';
import { CHANNEL_FD, type ExecutorRequest, type ExecutorResponse, type ExecutorSettings } from './protocol.js';

// Entry point of an executor process (spawned by pool.ts). It has no event loop work at
// all: a blocking loop reads length-prefixed JSON requests from fd 3, runs each one
// synchronously and writes its answer before reading on. Several requests may be waiting
// in the pipe (the pool pipelines one database's requests); because each answer is in
// the kernel before the next request starts, the pool knows after a kill exactly which
// requests never started. The parent kills the whole process when a request overruns
// its time limit, which is the only way to stop SQLite inside a native call with a
// binding that has neither sqlite3_interrupt nor a progress handler.

const settings = JSON.parse(process.argv[2] ?? '{}') as ExecutorSettings;
const open = new Map<string, Connection>();

function connection(db: string, path: string, create = false): Connection {
  const hit = open.get(db);
  if (hit) {
    open.delete(db);
    open.set(db, hit);
    return hit;
  }
  const conn = new Connection(path, settings, create);
  open.set(db, conn);
  if (open.size > settings.maxOpenConnections) {
    // Connections holding temp objects are kept while any other can go; a stream's never (the
    // engine bounds how many streams are open, and ends idle ones).
    const entries = [...open.entries()].filter(([, c]) => !c.stream);
    const victim = entries.find(([, c]) => !c.policy.tempTouched) ?? entries[0];
    if (victim) {
      open.delete(victim[0]);
      retire(victim[1]);
      send({ evicted: victim[0] });
    }
  }
  return conn;
}

function drop(db: string): void {
  const conn = open.get(db);
  open.delete(db);
  if (conn) retire(conn);
}

/*
 * A closed connection keeps its file descriptors (the database and its WAL) until its statements are
 * finalized, which the binding does only when they are garbage collected, in a callback the event loop
 * runs. This loop reads its channel synchronously, so that callback would never run: every stream's
 * connection leaked two descriptors until the executor hit its open files limit (SQLITE_CANTOPEN for
 * every database it served). So once connections were closed, the loop collects (a young-generation
 * collection, a full one every FULL_GC_EVERY closes for statements that grew old) and lets the event
 * loop turn before it blocks on its channel again.
 */
const FULL_GC_EVERY = 64;
const collect = (globalThis as { gc?: (o: { type: 'minor' | 'major' }) => void }).gc;
let retiredSince = 0;
let retiredTotal = 0;

function retire(conn: Connection): void {
  conn.close();
  retiredSince++;
  retiredTotal++;
}

/** Whether closed connections wait for their statements to be finalized (see above); starts that. */
function releaseRetired(): boolean {
  if (retiredSince === 0) return false;
  const full = Math.floor((retiredTotal - retiredSince) / FULL_GC_EVERY) !== Math.floor(retiredTotal / FULL_GC_EVERY);
  retiredSince = 0;
  collect?.({ type: full ? 'major' : 'minor' });
  return true;
}

function handle(msg: ExecutorRequest): unknown {
  switch (msg.op) {
    case 'close':
      drop(msg.db);
      return null;
    case 'create':
      connection(msg.db, msg.path, true);
      return null;
    case 'export':
      exportTo(msg.path, msg.target, settings.busyTimeoutMs);
      return null;
    case 'hrana': {
      if (msg.resume && !open.has(msg.db)) {
        throw new DatabaseEngineError(
          'StreamLost',
          'the connection of this stream is gone (its executor was stopped, e.g. by the time limit of a request); its transaction was rolled back',
        );
      }
      const conn = connection(msg.db, msg.path);
      conn.stream = msg.stream;
      conn.limitSize(msg.maxBytes);
      return runHrana(conn, { steps: msg.steps, stream: msg.stream ? msg.db : undefined });
    }
    default: {
      const conn = connection(msg.db, msg.path);
      conn.limitSize(msg.maxBytes);
      if (msg.op === 'query') return query(conn, msg.req);
      if (msg.op === 'batch') return batch(conn, msg.statements);
      return importRows(conn, msg.req);
    }
  }
}

function answer(msg: ExecutorRequest): ExecutorResponse {
  try {
    const result = handle(msg);
    // Temp objects exist only on this connection: the pool must keep sending this
    // database here for as long as the connection lives.
    const conn = msg.op !== 'close' && msg.op !== 'export' ? open.get(msg.db) : undefined;
    const pinned = conn !== undefined && (conn.policy.tempTouched || conn.stream);
    return { id: msg.id, ok: true, result, pinned };
  } catch (err) {
    const e = err instanceof DatabaseEngineError ? err : serializeError(err);
    return { id: msg.id, ok: false, error: { code: e.code, message: e.message, statementIndex: e.statementIndex } };
  }
}

function send(res: ExecutorResponse): void {
  const buf = encodeFrame(res);
  let off = 0;
  while (off < buf.length) off += retrying(() => writeSync(CHANNEL_FD, buf, off, buf.length - off));
}

function retrying(io: () => number): number {
  for (;;) {
    try {
      return io();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'EINTR' && code !== 'EAGAIN') throw err;
    }
  }
}

const READ_BUFFER = 64 * 1024;

let buf = Buffer.allocUnsafe(READ_BUFFER);
let start = 0;
let end = 0;

function serve(): void {
  for (;;) {
    while (end - start >= 4) {
      const len = buf.readUInt32LE(start);
      if (end - start - 4 < len) break;
      const msg = JSON.parse(buf.toString('utf8', start + 4, start + 4 + len)) as ExecutorRequest;
      start += 4 + len;
      send(answer(msg));
    }
    // Before blocking on the channel: let closed connections' statements be finalized.
    if (releaseRetired()) {
      setImmediate(serve);
      return;
    }
    if (start === end) {
      start = 0;
      end = 0;
      // A large import grew the buffer: do not keep megabytes for point queries.
      if (buf.length > READ_BUFFER * 16) buf = Buffer.allocUnsafe(READ_BUFFER);
    } else {
      // Keep the partial frame at the front of a buffer big enough for all of it.
      const need = end - start >= 4 ? 4 + buf.readUInt32LE(start) : 4;
      const next = need > buf.length ? Buffer.allocUnsafe(need) : buf;
      buf.copy(next, 0, start, end);
      buf = next;
      end -= start;
      start = 0;
    }
    const n = retrying(() => readSync(CHANNEL_FD, buf, end, buf.length - end, null));
    // End of the channel: the parent closed it or went away, and takes its executors with it.
    if (n === 0) process.exit(0);
    end += n;
  }
}

send({ ready: true });
serve();
