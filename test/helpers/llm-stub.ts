// A real HTTP server speaking OpenAI's chat-completions protocol on loopback, with scripted replies: the
// stand-in for a paid LLM provider in tests and benchmarks (agents, fleet, documents).
//
// Protocol: `POST /v1/chat/completions` with `{ model, messages, tools?, stream?, stream_options? }`.
// Non-streaming answers one `chat.completion` JSON with `choices[0].message` (content or `tool_calls`)
// and `usage`. Streaming answers `text/event-stream`: `data: {chat.completion.chunk}` lines whose
// `choices[0].delta` carries the role, then content fragments or `tool_calls` fragments (index, id,
// type, function name, then the arguments in pieces), a last chunk with `finish_reason`, a usage chunk
// (`choices: []`) only when `stream_options.include_usage` is true, and `data: [DONE]`.
//
// Replies: queued ones first (`stub.push(...)`), else `stub.respond` (replaceable), whose default is:
// - the last message is a tool result -> `tool said: <result>`;
// - the last user text is `call <tool> <json args>` -> a call of that tool with those arguments;
// - otherwise `echo: <last user text>`.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ChatMessage {
  role: string;
  content?: string | null | { type: string; text?: string }[];
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export interface ChatRequest {
  model?: string;
  messages: ChatMessage[];
  tools?: { type: 'function'; function: { name: string; description?: string; parameters?: unknown } }[];
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
  [k: string]: unknown;
}

export interface StubReply {
  content?: string;
  toolCalls?: { id?: string; name: string; arguments: string }[];
  /** Token counts to report; `false` reports none (an upstream without usage). Default: word counts. */
  usage?: { prompt_tokens: number; completion_tokens: number } | false;
  /** HTTP status other than 200: answered as an OpenAI error body. */
  status?: number;
  /** Wait before the first byte, and between streamed chunks. */
  delayMs?: number;
  chunkDelayMs?: number;
  /** Characters per streamed content fragment (default 8). */
  chunkSize?: number;
}

export interface LlmStub {
  /** Base URL including `/v1` (what NUBE_LLM_BASE_URL takes). */
  url: string;
  /** Every request received, with its Authorization header. */
  requests: { body: ChatRequest; authorization: string | undefined }[];
  push(...replies: StubReply[]): void;
  respond: (req: ChatRequest) => StubReply;
  close(): Promise<void>;
}

const textOf = (c: ChatMessage['content']): string =>
  typeof c === 'string' ? c : Array.isArray(c) ? c.map((p) => p.text ?? '').join('') : '';

const words = (s: string): number => s.split(/\s+/).filter(Boolean).length;

export function defaultReply(req: ChatRequest): StubReply {
  const last = req.messages[req.messages.length - 1];
  if (last?.role === 'tool') return { content: `tool said: ${textOf(last.content).trim()}` };
  const user = [...req.messages].reverse().find((m) => m.role === 'user');
  const text = textOf(user?.content).trim();
  const call = /^call (\S+) (\{[\s\S]*\})$/.exec(text);
  if (call) return { toolCalls: [{ name: call[1]!, arguments: call[2]! }] };
  return { content: `echo: ${text}` };
}

export async function startLlmStub(): Promise<LlmStub> {
  const queue: StubReply[] = [];
  let calls = 0;
  const stub: LlmStub = {
    url: '',
    requests: [],
    push: (...r) => queue.push(...r),
    respond: defaultReply,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy());
  });
  const sockets = new Set<import('node:net').Socket>();
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  const close = stub.close;
  stub.close = () => {
    for (const s of sockets) s.destroy();
    return close();
  };

  async function handle(req: IncomingMessage, res: ServerResponse) {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'stub-model', object: 'model', owned_by: 'stub' }] }));
      return;
    }
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'not found', type: 'invalid_request_error' } }));
      return;
    }
    let body: ChatRequest;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as ChatRequest;
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'invalid JSON', type: 'invalid_request_error' } }));
      return;
    }
    stub.requests.push({ body, authorization: req.headers.authorization });
    const reply = queue.shift() ?? stub.respond(body);
    if (reply.delayMs) await sleep(reply.delayMs);
    if (reply.status && reply.status !== 200) {
      res.writeHead(reply.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: reply.content ?? `stub error ${reply.status}`, type: 'api_error' } }));
      return;
    }
    const id = `chatcmpl-${++calls}`;
    const model = body.model ?? 'stub-model';
    const created = Math.floor(Date.now() / 1000);
    const promptTokens = body.messages.reduce((n, m) => n + words(textOf(m.content)) + 3, 0);
    const toolCalls = (reply.toolCalls ?? []).map((t, i) => ({ id: t.id ?? `call_${calls}_${i}`, name: t.name, arguments: t.arguments }));
    const completionTokens = words(reply.content ?? '') + toolCalls.reduce((n, t) => n + words(t.arguments) + 2, 0);
    const usage =
      reply.usage === false
        ? undefined
        : (reply.usage ?? { prompt_tokens: promptTokens, completion_tokens: completionTokens });
    const usageOut = usage && { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens };
    const finish = toolCalls.length ? 'tool_calls' : 'stop';

    if (!body.stream) {
      const message = {
        role: 'assistant',
        content: reply.content ?? null,
        ...(toolCalls.length
          ? { tool_calls: toolCalls.map((t) => ({ id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } })) }
          : {}),
      };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id,
          object: 'chat.completion',
          created,
          model,
          choices: [{ index: 0, message, finish_reason: finish, logprobs: null }],
          ...(usageOut ? { usage: usageOut } : {}),
        }),
      );
      return;
    }

    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const send = async (choices: unknown[], extra: Record<string, unknown> = {}) => {
      res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices, ...extra })}\n\n`);
      if (reply.chunkDelayMs) await sleep(reply.chunkDelayMs);
    };
    await send([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]);
    const size = reply.chunkSize ?? 8;
    const content = reply.content ?? '';
    for (let i = 0; i < content.length; i += size) {
      await send([{ index: 0, delta: { content: content.slice(i, i + size) }, finish_reason: null }]);
    }
    for (const [index, t] of toolCalls.entries()) {
      await send([
        {
          index: 0,
          delta: { tool_calls: [{ index, id: t.id, type: 'function', function: { name: t.name, arguments: '' } }] },
          finish_reason: null,
        },
      ]);
      // Arguments arrive in fragments, as real providers send them.
      for (let i = 0; i < t.arguments.length; i += size) {
        await send([{ index: 0, delta: { tool_calls: [{ index, function: { arguments: t.arguments.slice(i, i + size) } }] }, finish_reason: null }]);
      }
    }
    await send([{ index: 0, delta: {}, finish_reason: finish }]);
    if (body.stream_options?.include_usage && usageOut) await send([], { usage: usageOut });
    res.end('data: [DONE]\n\n');
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  stub.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return stub;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
