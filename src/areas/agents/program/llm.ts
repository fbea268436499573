// The agent's own OpenAI chat-completions client (streaming, tools), pointed at nube's LLM gateway with
// the agent's scoped credential. Runs inside the sandbox under Debian's Node 18: global fetch only.

export interface ToolSpec {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export interface Completion {
  content: string;
  toolCalls: { id: string; name: string; arguments: string }[];
  usage: { inputTokens: number; outputTokens: number } | null;
  model: string | null;
}

/** A failed gateway call; `status` and `code` come from the gateway (402 InsufficientBalance...). */
export class LlmError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** How long a turn waits for an unreachable gateway before it fails. */
const GATEWAY_WAIT_MS = 30_000;

export interface Gateway {
  url: string;
  key: string;
}

export async function complete(
  gw: Gateway,
  messages: ChatMessage[],
  tools: ToolSpec[],
  onText: (delta: string) => void,
  signal: AbortSignal,
): Promise<Completion> {
  const body = JSON.stringify({
    model: 'default',
    messages,
    stream: true,
    stream_options: { include_usage: true },
    ...(tools.length ? { tools: tools.map((t) => ({ type: 'function', function: t })) } : {}),
  });
  let res: Response | undefined;
  // The gateway unreachable for a moment (nube restarting, its host loaded) is waited for: nothing was
  // sent yet, so trying again repeats nothing. Only past GATEWAY_WAIT_MS is it the turn's error.
  const until = Date.now() + GATEWAY_WAIT_MS;
  for (let wait = 100; !res; wait = Math.min(wait * 2, 2_000)) {
    try {
      res = await fetch(`${gw.url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.key}` },
        body,
        signal,
      });
    } catch (e) {
      if (signal.aborted) throw e;
      if (Date.now() + wait > until) throw new LlmError(502, 'GatewayUnreachable', `the LLM gateway cannot be reached: ${(e as Error).message}`);
      await new Promise((r) => setTimeout(r, wait));
    }
  }
  if (!res.ok) {
    const text = await res.text().catch(() => '');
    let code = 'LlmError';
    let message = text.slice(0, 500) || `the LLM gateway answered ${res.status}`;
    try {
      const e = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error;
      code = e?.code ?? code;
      message = e?.message ?? message;
    } catch {}
    throw new LlmError(res.status, code, message);
  }
  const out: Completion = { content: '', toolCalls: [], usage: null, model: null };
  const decoder = new TextDecoder();
  let pending = '';
  const reader = res.body!.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending = (pending + decoder.decode(value, { stream: true })).replace(/\r\n/g, '\n');
    let cut = pending.indexOf('\n\n');
    while (cut >= 0) {
      const event = pending.slice(0, cut);
      pending = pending.slice(cut + 2);
      cut = pending.indexOf('\n\n');
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') continue;
        const j = JSON.parse(data) as {
          model?: string;
          usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
          choices?: {
            delta?: {
              content?: string | null;
              tool_calls?: { index: number; id?: string; function?: { name?: string; arguments?: string } }[];
            };
          }[];
        };
        if (j.model) out.model = j.model;
        if (j.usage) out.usage = { inputTokens: j.usage.prompt_tokens ?? 0, outputTokens: j.usage.completion_tokens ?? 0 };
        const delta = j.choices?.[0]?.delta;
        if (delta?.content) {
          out.content += delta.content;
          onText(delta.content);
        }
        for (const tc of delta?.tool_calls ?? []) {
          if (!out.toolCalls[tc.index]) out.toolCalls[tc.index] = { id: '', name: '', arguments: '' };
          const slot = out.toolCalls[tc.index]!;
          if (tc.id) slot.id = tc.id;
          if (tc.function?.name) slot.name += tc.function.name;
          if (tc.function?.arguments) slot.arguments += tc.function.arguments;
        }
      }
    }
  }
  out.toolCalls = out.toolCalls.filter(Boolean).map((t, i) => ({ ...t, id: t.id || `call_${i}` }));
  return out;
}

/** The model the gateway answers with (the operator's or the account's), or null when it cannot say. */
export async function gatewayModel(g: Gateway): Promise<string | null> {
  try {
    const r = await fetch(`${g.url}/models`, { headers: { authorization: `Bearer ${g.key}` }, signal: AbortSignal.timeout(5_000) });
    if (!r.ok) return null;
    const j = (await r.json()) as { data?: { id?: string }[] };
    return j.data?.[0]?.id ?? null;
  } catch {
    return null;
  }
}
