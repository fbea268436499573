// The `schema` extraction source's LLM step: a page's main content (Markdown) and a JSON Schema in,
// JSON matching it out, as Firecrawl's extract does. Through the LLM gateway's service (the owner's AI
// key or the operator's NUBE_LLM_*, tokens metered); a reply that is not JSON fails the unit in words.
import { ApiError } from '../../platform/errors.js';
import { GatewayError } from '../llm/relay.js';
import type { LlmService } from '../llm/service.js';

/** Page text sent to the LLM at most (characters; about 8k tokens). */
export const MAX_PAGE_CHARS = 30_000;

const SYSTEM = [
  'You extract structured data from a web page.',
  'Answer with JSON only, no prose and no code fences: a value that matches the JSON Schema given.',
  'Use null for what the page does not say. Never invent values.',
].join('\n');

export function schemaFiller(
  llm: Pick<LlmService, 'complete'>,
  ownerId: string,
  schema: unknown,
  prompt: string | null,
  keyId?: string,
) {
  return async (markdown: string, url: string, signal?: AbortSignal): Promise<unknown> => {
    const page = markdown.length > MAX_PAGE_CHARS ? `${markdown.slice(0, MAX_PAGE_CHARS)}\n[cut]` : markdown;
    const user = `JSON Schema:\n${JSON.stringify(schema)}\n${prompt ? `\nInstructions: ${prompt}\n` : ''}\nPage ${url}:\n${page}`;
    let raw = '';
    try {
      await llm.complete(
        ownerId,
        {
          messages: [
            { role: 'system', content: SYSTEM },
            { role: 'user', content: user },
          ],
          stream: false,
          temperature: 0,
        },
        {
          start: () => {},
          write: (c) => {
            raw += c;
          },
          end: () => {},
        },
        signal,
        { keyId },
      );
    } catch (e) {
      // The gateway's refusals (no LLM, balance spent, upstream down) keep their status and code.
      if (e instanceof GatewayError) throw new ApiError(e.status, e.code, e.message);
      throw e;
    }
    let content: unknown;
    try {
      content = (JSON.parse(raw) as { choices?: { message?: { content?: unknown } }[] }).choices?.[0]?.message
        ?.content;
    } catch {
      throw new ApiError(
        502,
        'LlmBadReply',
        'the LLM upstream answered something that is not a chat completion',
      );
    }
    const text = typeof content === 'string' ? content.trim().replace(/^```(?:json)?\s*|\s*```$/g, '') : '';
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new ApiError(
        422,
        'ExtractionFailed',
        `the LLM did not answer JSON for ${url}: ${text.slice(0, 200) || '(nothing)'}`,
      );
    }
  };
}
