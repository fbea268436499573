// One chat completion relayed to the upstream, streaming or not, tool calls included, and its tokens
// counted: from the upstream's `usage` (streamed requests ask for it with
// `stream_options.include_usage`), else estimated from the text (about 4 characters per token).
import type { OutboundClient, OutboundResponse } from '../../platform/outbound.js';
import type { Upstream } from './upstream.js';

export interface ChatBody {
  model?: string;
  messages: unknown[];
  stream?: boolean;
  stream_options?: { include_usage?: boolean; [k: string]: unknown };
  [k: string]: unknown;
}

export interface TokenCount {
  promptTokens: number;
  completionTokens: number;
  /** True when the upstream reported no usage and the count is nube's estimate. */
  estimated: boolean;
}

export interface RelayResult {
  status: number;
  model: string;
  usage: TokenCount | null;
}

/** Where the relayed answer goes: the gateway's HTTP response, or an in-process caller's buffer. */
export interface RelaySink {
  start(status: number, contentType: string): void;
  write(chunk: string): void;
  end(): void;
}

/** An OpenAI-style error the gateway answers with: `{ error: { message, type, code } }`. */
export class GatewayError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
  body() {
    return { error: { message: this.message, type: this.status === 402 ? 'insufficient_quota' : 'nube_gateway_error', code: this.code } };
  }
}

const estimate = (chars: number) => Math.ceil(chars / 4);

function promptChars(messages: unknown[]): number {
  return JSON.stringify(messages).length;
}

/** Upstream statuses the caller can act on pass through; the rest are the gateway's 502. */
function upstreamFailure(status: number, text: string): GatewayError {
  let message = text.slice(0, 500);
  try {
    message = (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? message;
  } catch {}
  if (status === 400 || status === 413 || status === 422 || status === 429) return new GatewayError(status, 'UpstreamRejected', message);
  return new GatewayError(502, 'UpstreamError', `the LLM upstream answered ${status}: ${message}`);
}

/** `onUsage` is awaited once the tokens are known, also when the stream breaks off (what was relayed counts). */
export async function relayCompletion(
  outbound: OutboundClient,
  up: Upstream,
  input: ChatBody,
  sink: RelaySink,
  signal: AbortSignal | undefined,
  onUsage: (u: TokenCount) => Promise<void>,
): Promise<RelayResult> {
  const stream = input.stream === true;
  const clientWantsUsage = input.stream_options?.include_usage === true;
  // The upstream's model is the one used (the operator's or the account's choice), whatever was asked.
  const body: ChatBody = { ...input, model: up.model };
  if (stream) body.stream_options = { ...input.stream_options, include_usage: true };
  let res: OutboundResponse;
  try {
    res = await outbound.request(`${up.baseUrl}/chat/completions`, {
      method: 'POST',
      trustedOrigin: up.trustedOrigin,
      headers: {
        'content-type': 'application/json',
        accept: stream ? 'text/event-stream' : 'application/json',
        ...(up.apiKey ? { authorization: `Bearer ${up.apiKey}` } : {}),
      },
      body: JSON.stringify(body),
      signal,
    });
  } catch (e) {
    if (signal?.aborted) throw new GatewayError(499, 'ClientClosed', 'the client went away');
    throw new GatewayError(502, 'UpstreamUnreachable', `the LLM upstream cannot be reached: ${(e as Error).message}`);
  }
  if (res.status < 200 || res.status >= 300) {
    throw upstreamFailure(res.status, await res.body.text().catch(() => ''));
  }
  const contentType = String(res.headers['content-type'] ?? '');
  if (!stream || !contentType.includes('text/event-stream')) {
    const text = await res.body.text();
    let usage: TokenCount | null = null;
    let model = up.model;
    try {
      const j = JSON.parse(text) as { model?: string; usage?: { prompt_tokens?: number; completion_tokens?: number }; choices?: unknown[] };
      model = j.model ?? model;
      usage = j.usage
        ? { promptTokens: j.usage.prompt_tokens ?? 0, completionTokens: j.usage.completion_tokens ?? 0, estimated: false }
        : { promptTokens: estimate(promptChars(input.messages)), completionTokens: estimate(JSON.stringify(j.choices ?? []).length), estimated: true };
    } catch {
      throw new GatewayError(502, 'UpstreamError', 'the LLM upstream answered something that is not JSON');
    }
    if (usage) await onUsage(usage);
    sink.start(200, 'application/json');
    sink.write(text);
    sink.end();
    return { status: 200, model, usage };
  }

  sink.start(200, 'text/event-stream');
  let usage: TokenCount | null = null;
  let model = up.model;
  let outChars = 0;
  let pending = '';
  let lastId = '';
  let created = 0;
  // `[DONE]` is held back until the tokens are counted: a client that acts on it without waiting for
  // the response's end (goose does) would otherwise send its next request before the counter moved,
  // and a turn past the allowance would get one more completion.
  let done: string | null = null;
  // The usage-only chunk is dropped when the client did not ask for it (it may not expect a chunk
  // without choices); when it asked and the upstream sent none, an estimated one goes before [DONE].
  const handleEvent = (event: string): string | null => {
    if (!event.startsWith('data:') || event.includes('\n')) return event;
    const line = event;
    const data = line.slice(5).trim();
    if (data === '[DONE]') {
      done = line;
      if (clientWantsUsage && !usage) {
        usage = { promptTokens: estimate(promptChars(input.messages)), completionTokens: estimate(outChars), estimated: true };
        const chunk = { id: lastId, object: 'chat.completion.chunk', created, model, choices: [], usage: usageJson(usage) };
        return `data: ${JSON.stringify(chunk)}`;
      }
      return null;
    }
    try {
      const j = JSON.parse(data) as {
        id?: string;
        created?: number;
        model?: string;
        usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
        choices?: { delta?: { content?: string | null; tool_calls?: { function?: { name?: string; arguments?: string } }[] } }[];
      };
      if (j.id) lastId = j.id;
      if (j.created) created = j.created;
      if (j.model) model = j.model;
      for (const c of j.choices ?? []) {
        outChars += c.delta?.content?.length ?? 0;
        for (const t of c.delta?.tool_calls ?? []) outChars += (t.function?.name?.length ?? 0) + (t.function?.arguments?.length ?? 0);
      }
      if (j.usage) {
        usage = { promptTokens: j.usage.prompt_tokens ?? 0, completionTokens: j.usage.completion_tokens ?? 0, estimated: false };
        if (!clientWantsUsage && (j.choices ?? []).length === 0) return null;
      }
    } catch {}
    return line;
  };
  try {
    // SSE events end with a blank line; each is forwarded whole as soon as it is complete.
    for await (const buf of res.body) {
      pending = (pending + (buf as Buffer).toString('utf8')).replace(/\r\n/g, '\n');
      let cut = pending.indexOf('\n\n');
      let out = '';
      while (cut >= 0) {
        const kept = handleEvent(pending.slice(0, cut));
        if (kept !== null) out += `${kept}\n\n`;
        pending = pending.slice(cut + 2);
        cut = pending.indexOf('\n\n');
      }
      if (out) sink.write(out);
    }
    if (pending.trim()) {
      const kept = handleEvent(pending.trim());
      if (kept !== null) sink.write(`${kept}\n\n`);
    }
  } finally {
    usage ??= { promptTokens: estimate(promptChars(input.messages)), completionTokens: estimate(outChars), estimated: true };
    // Counted before the answer ends, so the caller's next request sees the balance it left.
    await onUsage(usage).catch(() => {});
    if (done) sink.write(`${done}\n\n`);
    sink.end();
  }
  return { status: 200, model, usage };
}

function usageJson(u: TokenCount) {
  return { prompt_tokens: u.promptTokens, completion_tokens: u.completionTokens, total_tokens: u.promptTokens + u.completionTokens, estimated: true };
}

