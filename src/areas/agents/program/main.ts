// nube's ACP agent: the program of the `acp` and `code-agent` templates. It runs inside the agent's
// sandbox as a background process, listens for ACP (newline-delimited JSON-RPC) on a TCP port that
// only the host reaches (through the sandbox's bridge address), and thinks through nube's LLM gateway
// with its scoped credential. Each connection first sends one line `{"nube":"<connection token>"}`.
// Sessions outlive connections (nube reconnects after its own restart with session/load) and are kept
// on disk, so a restarted agent process loads them too. A turn that fails leaves its session as it was
// before the turn, and a session's history is kept under the gateway's body limit: one bad turn cannot
// make every later one fail.
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import * as acp from '@agentclientprotocol/sdk';
import { type ChatMessage, complete, type Gateway, LlmError } from './llm.js';
import { trimHistory } from './history.js';
import { listenWithToken } from './listen.js';
import type { AcpMcpServer, McpSet } from './mcp.js';
import { sameGatewayHost, takeSecrets } from './secrets.js';
import { BASE_TOOLS, CODE_TOOLS, type Tool } from './tools.js';

const env = process.env;
const KIND = env.NUBE_AGENT_KIND === 'code-agent' ? 'code-agent' : 'acp';
const PORT = Number(env.NUBE_AGENT_PORT ?? 7700);
const SECRETS = takeSecrets(env.NUBE_AGENT_SECRETS ?? '/opt/nube/agent.secrets');
const TOKEN = Buffer.from(SECRETS.token);
const STATE = env.NUBE_AGENT_STATE ?? '/root/.nube-agent';
const WORKSPACE = env.NUBE_AGENT_WORKSPACE ?? '/root/workspace';
const MAX_STEPS = 25;
/** A session's history sent to the gateway stays under this (the gateway refuses bodies over 8 MiB). */
const MAX_HISTORY_BYTES = 2 * 1024 * 1024;
const gateway: Gateway = { url: SECRETS.gateway, key: SECRETS.llmKey };
mkdirSync(`${STATE}/sessions`, { recursive: true });
mkdirSync(WORKSPACE, { recursive: true });

const SYSTEM: Record<typeof KIND, string> = {
  acp:
    'You are a helpful agent running in your own Linux sandbox (Debian, root). Use the tools to run shell ' +
    'commands and to read, write and edit files when that helps; the workspace is the current directory. ' +
    'Answer concisely.',
  'code-agent':
    'You are a careful software engineer working in a repository in your own Linux sandbox (Debian, root, ' +
    'git, node, python). Read the code before changing it, make small changes with edit_file or apply_diff ' +
    '(unified diffs), run the project tests with run_tests, and use git to inspect and commit your work. ' +
    'Say what you changed and how you checked it.',
};

interface Session {
  id: string;
  cwd: string;
  history: ChatMessage[];
  servers: AcpMcpServer[];
  mcp: McpSet | null;
  abort: AbortController | null;
  /** The running prompt, and the connection that asked for it. */
  running: Promise<unknown> | null;
  conn: Conn | null;
}

/** One connection from nube (or an ACP client it relays): its prompts end when it closes. */
interface Conn {
  closed: boolean;
}

const sessions = new Map<string, Session>();

/** The MCP SDK (and ajv with it, half the bundle) is evaluated only when a session has MCP servers. */
async function connectMcp(servers: AcpMcpServer[], cwd: string): Promise<McpSet> {
  if (servers.length === 0) return { tools: [], failures: [], close: async () => {} };
  return (await import('./mcp.js')).connectMcp(servers, cwd);
}
const file = (id: string) => `${STATE}/sessions/${id.replace(/[^A-Za-z0-9_-]/g, '_')}.json`;
// Sessions are written after each turn, before it is answered, one write at a time per session.
const writes = new Map<string, Promise<void>>();
const save = (s: Session): Promise<void> => {
  const next = (writes.get(s.id) ?? Promise.resolve())
    .then(() => writeFile(file(s.id), JSON.stringify({ cwd: s.cwd, history: s.history, servers: s.servers })))
    .catch(() => {});
  writes.set(s.id, next);
  return next;
};

async function load(id: string): Promise<Session | null> {
  const known = sessions.get(id);
  if (known) return known;
  const text = await readFile(file(id), 'utf8').catch(() => null);
  if (!text) return null;
  const j = JSON.parse(text) as { cwd: string; history: ChatMessage[]; servers: AcpMcpServer[] };
  const s: Session = { id, cwd: j.cwd, history: j.history, servers: j.servers, mcp: null, abort: null, running: null, conn: null };
  sessions.set(id, s);
  return s;
}

function textOf(blocks: acp.ContentBlock[]): string {
  return blocks
    .map((b) => {
      if (b.type === 'text') return b.text;
      if (b.type === 'resource_link') return `[${b.name}](${b.uri})`;
      if (b.type === 'resource' && 'text' in b.resource) return `${b.resource.uri}:\n${b.resource.text}`;
      return `[${b.type}]`;
    })
    .join('\n');
}

const ALLOW_KINDS = new Set(['allow_once', 'allow_always']);


async function turn(s: Session, prompt: acp.ContentBlock[], client: acp.AgentContext, signal: AbortSignal): Promise<acp.PromptResponse> {
  s.mcp ??= await connectMcp(s.servers, s.cwd);
  const tools: Tool[] = [...(KIND === 'code-agent' ? CODE_TOOLS : BASE_TOOLS), ...s.mcp.tools];
  const byName = new Map(tools.map((t) => [t.name, t]));
  const update = (u: acp.SessionUpdate) => client.notify(acp.methods.client.session.update, { sessionId: s.id, update: u });
  if (s.history.length === 0) {
    const mcpNote = s.mcp.failures.length ? `\nThese MCP servers could not be reached: ${s.mcp.failures.join('; ')}` : '';
    s.history.push({ role: 'system', content: SYSTEM[KIND] + mcpNote });
  }
  const before = s.history.length;
  s.history.push({ role: 'user', content: textOf(prompt) });
  const usage = { inputTokens: 0, outputTokens: 0, toolCalls: 0, model: null as string | null };
  const meta = () => ({ usage });
  try {
    for (let step = 0; step < MAX_STEPS; step++) {
      trimHistory(s.history, MAX_HISTORY_BYTES);
      const c = await complete(
        gateway,
        s.history,
        tools,
        (delta) => void update({ sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: delta } }),
        signal,
      );
      if (c.usage) {
        usage.inputTokens += c.usage.inputTokens;
        usage.outputTokens += c.usage.outputTokens;
      }
      usage.model = c.model ?? usage.model;
      s.history.push({
        role: 'assistant',
        content: c.content || null,
        ...(c.toolCalls.length
          ? { tool_calls: c.toolCalls.map((t) => ({ id: t.id, type: 'function' as const, function: { name: t.name, arguments: t.arguments } })) }
          : {}),
      });
      if (c.toolCalls.length === 0) return { stopReason: 'end_turn', _meta: meta() };
      for (const call of c.toolCalls) {
        usage.toolCalls++;
        s.history.push({ role: 'tool', tool_call_id: call.id, content: await runTool(s, call, byName, client, update, signal) });
      }
    }
    return { stopReason: 'max_turn_requests', _meta: meta() };
  } catch (e) {
    if (signal.aborted) return { stopReason: 'cancelled', _meta: meta() };
    // The session goes back to where it was before this turn: what made it fail (a message the
    // gateway refuses, an upstream error) is not sent again with every later turn.
    s.history.splice(Math.min(before, s.history.length));
    if (e instanceof LlmError) throw new acp.RequestError(-32000, e.message, { status: e.status, code: e.code });
    throw e;
  } finally {
    // On disk before the turn is answered: a program that ends right after still has it at its restart.
    await save(s);
  }
}

async function runTool(
  s: Session,
  call: { id: string; name: string; arguments: string },
  byName: Map<string, Tool>,
  client: acp.AgentContext,
  update: (u: acp.SessionUpdate) => Promise<void>,
  signal: AbortSignal,
): Promise<string> {
  const tool = byName.get(call.name);
  let args: Record<string, unknown> = {};
  try {
    args = call.arguments.trim() ? (JSON.parse(call.arguments) as Record<string, unknown>) : {};
  } catch {
    return `error: the arguments are not JSON: ${call.arguments.slice(0, 200)}`;
  }
  const title = tool ? tool.title(args) : call.name;
  await update({ sessionUpdate: 'tool_call', toolCallId: call.id, title, kind: tool?.kind ?? 'other', status: 'pending', rawInput: args });
  const finish = async (status: 'completed' | 'failed', text: string) => {
    await update({
      sessionUpdate: 'tool_call_update',
      toolCallId: call.id,
      status,
      content: [{ type: 'content', content: { type: 'text', text } }],
      rawOutput: { text },
    });
    return status === 'failed' ? `error: ${text}` : text;
  };
  if (!tool) return finish('failed', `unknown tool ${call.name}`);
  if (tool.asks) {
    const answer = await client.request(
      acp.methods.client.session.requestPermission,
      {
        sessionId: s.id,
        toolCall: { toolCallId: call.id, title, kind: tool.kind, status: 'pending', rawInput: args },
        options: [
          { optionId: 'allow', name: 'Allow', kind: 'allow_once' },
          { optionId: 'reject', name: 'Reject', kind: 'reject_once' },
        ],
      },
      { cancellationSignal: signal, stopWaitingOnCancel: true },
    );
    const chosen = answer.outcome.outcome === 'selected' ? answer.outcome.optionId : null;
    if (chosen !== 'allow' && !(chosen && ALLOW_KINDS.has(chosen))) return finish('failed', 'the user did not allow this tool call');
  }
  await update({ sessionUpdate: 'tool_call_update', toolCallId: call.id, status: 'in_progress' });
  try {
    return await finish('completed', await tool.run(args, { cwd: s.cwd, signal }));
  } catch (e) {
    return finish('failed', (e as Error).message);
  }
}

function app(conn: Conn): acp.AgentApp {
  return acp
    .agent({ name: 'nube-acp-agent' })
    .onRequest(acp.methods.agent.initialize, () => ({
      protocolVersion: acp.PROTOCOL_VERSION,
      agentCapabilities: {
        loadSession: true,
        mcpCapabilities: { http: true, sse: false },
        promptCapabilities: { image: false, audio: false, embeddedContext: true },
      },
      agentInfo: { name: `nube-${KIND}`, version: '1.0.0' },
      authMethods: [],
    }))
    .onRequest(acp.methods.agent.session.new, async ({ params }) => {
      // Unguessable: a session id is what session/load and session/prompt address.
      const id = `ses_${randomBytes(18).toString('base64url')}`;
      const cwd = params.cwd?.startsWith('/') ? params.cwd : WORKSPACE;
      mkdirSync(cwd, { recursive: true });
      const s: Session = { id, cwd, history: [], servers: (params.mcpServers ?? []) as AcpMcpServer[], mcp: null, abort: null, running: null, conn: null };
      sessions.set(id, s);
      s.mcp = await connectMcp(s.servers, cwd);
      await save(s);
      return { sessionId: id };
    })
    .onRequest(acp.methods.agent.session.load, async ({ params, client }) => {
      const s = await load(params.sessionId);
      if (!s) throw acp.RequestError.invalidParams({ sessionId: params.sessionId }, 'unknown session');
      // The history is replayed to the client, as ACP's session/load asks.
      for (const m of s.history) {
        if (m.role === 'user' && m.content)
          await client.notify(acp.methods.client.session.update, { sessionId: s.id, update: { sessionUpdate: 'user_message_chunk', content: { type: 'text', text: m.content } } });
        if (m.role === 'assistant' && m.content)
          await client.notify(acp.methods.client.session.update, { sessionId: s.id, update: { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: m.content } } });
      }
      return {};
    })
    .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
      const s = await load(params.sessionId);
      if (!s) throw acp.RequestError.invalidParams({ sessionId: params.sessionId }, 'unknown session');
      // A prompt whose connection closed (nube restarted under it) has nobody to answer: it is cancelled
      // and the new one (nube running the turn again) goes on once it has ended.
      if (s.abort && s.conn?.closed) {
        s.abort.abort();
        await s.running?.catch(() => {});
      }
      if (s.abort) throw acp.RequestError.invalidRequest({ sessionId: s.id }, 'a prompt is already running in this session');
      const ac = new AbortController();
      s.abort = ac;
      s.conn = conn;
      const running = turn(s, params.prompt, client, ac.signal);
      s.running = running;
      try {
        return await running;
      } finally {
        s.abort = null;
        s.running = null;
        s.conn = null;
      }
    })
    .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
      sessions.get(params.sessionId)?.abort?.abort();
    });
}

function serve(socket: Socket, first: Buffer): void {
  const readable = new ReadableStream<Uint8Array>({
    start(c) {
      if (first.length) c.enqueue(new Uint8Array(first));
      socket.on('data', (d) => c.enqueue(new Uint8Array(d)));
      socket.on('end', () => c.close());
      socket.on('error', (e) => c.error(e));
    },
  });
  const writable = new WritableStream<Uint8Array>({
    write: (chunk) => new Promise((res, rej) => socket.write(chunk, (e) => (e ? rej(e) : res()))),
    close: () => void socket.end(),
  });
  const mine: Conn = { closed: false };
  const conn = app(mine).connect(acp.ndJsonStream(writable, readable));
  socket.on('close', () => {
    mine.closed = true;
    for (const s of sessions.values()) if (s.conn === mine) s.abort?.abort();
    conn.close();
  });
}

listenWithToken(
  PORT,
  TOKEN,
  (socket, first, hello) => {
    // Where the gateway listens now (its port can change across restarts of nube): on the same host only.
    if (hello.gateway && sameGatewayHost(gateway.url, hello.gateway)) gateway.url = hello.gateway;
    serve(socket, first);
  },
  () => process.stdout.write(`nube ${KIND} agent listening on ${PORT}\n`),
);
