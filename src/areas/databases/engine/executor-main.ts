import { Connection } from './connection.js';
import { DatabaseEngineError, serializeError } from './errors.js';
import { batch, exportTo, importRows, query } from './executor.js';
import type { ExecutorRequest, ExecutorResponse, ExecutorSettings } from './protocol.js';

// Entry point of an executor process (forked by pool.ts). It runs one request at a
// time, synchronously; the parent kills the whole process when a request overruns
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
    // Connections holding temp objects are kept while any other can go.
    const victim = [...open.entries()].find(([, c]) => !c.policy.tempTouched) ?? open.entries().next().value;
    if (victim) {
      open.delete(victim[0]);
      victim[1].close();
      send({ evicted: victim[0] });
    }
  }
  return conn;
}

function drop(db: string): void {
  open.get(db)?.close();
  open.delete(db);
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
    default: {
      const conn = connection(msg.db, msg.path);
      conn.limitSize(msg.maxBytes);
      if (msg.op === 'query') return query(conn, msg.req);
      if (msg.op === 'batch') return batch(conn, msg.statements);
      return importRows(conn, msg.req);
    }
  }
}

function send(res: ExecutorResponse): void {
  process.send?.(res);
}

process.on('message', (msg: ExecutorRequest) => {
  try {
    const result = handle(msg);
    // Temp objects exist only on this connection: the pool must keep sending this
    // database here for as long as the connection lives.
    const pinned = msg.op !== 'close' && msg.op !== 'export' && open.get(msg.db)?.policy.tempTouched === true;
    send({ id: msg.id, ok: true, result, pinned });
  } catch (err) {
    const e = err instanceof DatabaseEngineError ? err : serializeError(err);
    send({
      id: msg.id,
      ok: false,
      error: { code: e.code, message: e.message, statementIndex: e.statementIndex },
    });
  }
});
// The parent going away must take its executors with it.
process.on('disconnect', () => process.exit(0));
send({ ready: true });
