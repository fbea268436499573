// What an ACP client on an agent's wsUrl may send to the agent program: responses to the agent's own
// requests (permission, ...) and the requests and notifications of ACP's agent side, each with its known
// fields only. Anything else (extension methods `_...`, unknown methods, batches, stray fields) never
// reaches the program: a request is answered -32601, the rest is dropped. nube's own control data
// travels only in the connection's first line, which nube writes before any client byte.

type Id = string | number | null;

/** ACP's agent-side methods a client may call, and the params fields each may carry. */
const ALLOWED: Record<string, readonly string[]> = {
  initialize: ['protocolVersion', 'clientCapabilities', 'clientInfo'],
  authenticate: ['methodId'],
  'session/new': ['cwd', 'mcpServers'],
  'session/load': ['sessionId', 'cwd', 'mcpServers'],
  'session/prompt': ['sessionId', 'prompt'],
  'session/cancel': ['sessionId'],
  'session/set_mode': ['sessionId', 'modeId'],
};

export const CLIENT_METHODS = Object.keys(ALLOWED);

export type Filtered = { forward: string } | { reply: string } | { drop: true };

const isId = (v: unknown): v is Id => v === null || typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v));
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function error(id: Id, code: number, message: string): Filtered {
  return { reply: JSON.stringify({ jsonrpc: '2.0', id, error: { code, message } }) };
}

/** One client message: what goes on to the agent (rebuilt from allowed fields), an answer, or nothing. */
export function filterClientMessage(raw: string): Filtered {
  let m: unknown;
  try {
    m = JSON.parse(raw);
  } catch {
    return error(null, -32700, 'not JSON');
  }
  if (!isObject(m)) return error(null, -32600, 'one JSON-RPC message per WebSocket message (no batches)');
  const id = m.id;
  if (id !== undefined && !isId(id)) return error(null, -32600, 'bad id');
  if (typeof m.method === 'string') {
    const fields = Object.hasOwn(ALLOWED, m.method) ? ALLOWED[m.method] : undefined;
    if (!fields) return id === undefined ? { drop: true } : error(id, -32601, `${m.method} is not an ACP method a client may call through nube`);
    const params = isObject(m.params) ? m.params : {};
    const kept = Object.fromEntries(fields.filter((f) => Object.hasOwn(params, f)).map((f) => [f, params[f]]));
    return { forward: JSON.stringify({ jsonrpc: '2.0', ...(id === undefined ? {} : { id }), method: m.method, params: kept }) };
  }
  // A response to one of the agent's requests.
  if (id !== undefined && Object.hasOwn(m, 'result')) return { forward: JSON.stringify({ jsonrpc: '2.0', id, result: m.result }) };
  if (id !== undefined && isObject(m.error)) {
    const e = m.error;
    return { forward: JSON.stringify({ jsonrpc: '2.0', id, error: { code: Number(e.code) || -32603, message: String(e.message ?? '') } }) };
  }
  return { drop: true };
}
