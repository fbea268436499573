// A session's history as sent to the LLM gateway, kept under a size the gateway accepts.
import type { ChatMessage } from './llm.js';

const sizeOf = (m: ChatMessage) => Buffer.byteLength(m.content ?? '') + Buffer.byteLength(JSON.stringify(m.tool_calls ?? '')) + 64;

/**
 * Drops the oldest exchanges (from one user message to the next; the system message stays) until the
 * history fits in `max` bytes, keeping at least the current exchange: tool calls and their results
 * leave together, so what is sent is always a well-formed conversation.
 */
export function trimHistory(history: ChatMessage[], max: number): void {
  let total = history.reduce((n, m) => n + sizeOf(m), 0);
  const start = history[0]?.role === 'system' ? 1 : 0;
  while (total > max) {
    const next = history.findIndex((m, i) => i > start && m.role === 'user');
    if (next < 0) return;
    for (const m of history.splice(start, next - start)) total -= sizeOf(m);
  }
}
