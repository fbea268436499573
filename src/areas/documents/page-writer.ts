import type { PlanName } from '../../platform/plans.js';
import { ApiError, errors } from '../../platform/errors.js';
import type { LlmService } from '../llm/service.js';
import { GatewayError } from '../llm/relay.js';
import { sectionsFromReply } from './generated-sections.js';
import type { SectionInput } from './sections.js';

/**
 * Writes a document's sections from a prompt (an LLM behind it). Documents call it, from a durable job,
 * when a document has a prompt and no sections.
 */
export interface PageWriter {
  /** 400 LlmNotConfigured (naming the setting) when no LLM serves this owner; 402 when its tokens are spent. */
  assertReady(ownerId: string, plan: PlanName): Promise<void>;
  /** Asks the LLM for the pages; answers its reply as received (kept before anything is made of it). */
  ask(ownerId: string, prompt: string, opts: { name: string; lang: string; signal?: AbortSignal; keyId?: string }): Promise<string>;
  /** The pages in a reply ask() answered (GenerationError when it holds none). */
  pages(reply: string, name: string): SectionInput[];
}

/** The setting the 400 names, so an operator knows what to configure. */
export const LLM_SETTING = 'NUBE_LLM_BASE_URL';

/** A failed generation: `permanent` ones are not retried (the upstream refused, the plan is spent). */
export class GenerationError extends Error {
  constructor(
    message: string,
    readonly permanent: boolean,
  ) {
    super(message);
  }
}

const SYSTEM = [
  'You write the pages of a document for the web and for print.',
  'Answer with JSON only, no prose around it, in this shape:',
  '{"sections":[{"heading":"...","body":"..."}]}',
  'One section is one page. `body` is Markdown (headings, lists, tables, emphasis); no HTML, no scripts,',
  'no images. At most 20 sections. Write in the language of the request unless it asks for another.',
].join('\n');

type Completer = Pick<LlmService, 'assertReady' | 'complete'>;

/** Pages through the LLM gateway's service: the account's AI key, else the operator's NUBE_LLM_*; metered. */
export class LlmPageWriter implements PageWriter {
  constructor(private readonly llm: Completer) {}

  async assertReady(ownerId: string, plan: PlanName): Promise<void> {
    try {
      await this.llm.assertReady(ownerId, plan);
    } catch (e) {
      if (e instanceof ApiError && e.code === 'LlmNotConfigured') throw llmNotConfigured();
      throw e;
    }
  }

  async ask(ownerId: string, prompt: string, opts: { name: string; lang: string; signal?: AbortSignal; keyId?: string }): Promise<string> {
    const user = `Document title: ${opts.name}\nLanguage (unless the request says otherwise): ${opts.lang}\n\nRequest:\n${prompt}`;
    let text = '';
    try {
      await this.llm.complete(
        ownerId,
        {
          messages: [
            { role: 'system', content: SYSTEM },
            { role: 'user', content: user },
          ],
          stream: false,
        },
        {
          start: () => {},
          write: (c) => {
            text += c;
          },
          end: () => {},
        },
        opts.signal,
        { keyId: opts.keyId },
      );
    } catch (e) {
      if (e instanceof GatewayError) {
        // Rate limits and upstream 5xx or unreachable are worth another attempt; refusals are not.
        const transient = e.status === 429 || e.status >= 500 || e.status === 499;
        throw new GenerationError(`${e.code}: ${e.message}`, !transient);
      }
      throw new GenerationError((e as Error).message, false);
    }
    return text;
  }

  pages(text: string, name: string): SectionInput[] {
    let content: unknown;
    try {
      content = (JSON.parse(text) as { choices?: { message?: { content?: unknown } }[] }).choices?.[0]
        ?.message?.content;
    } catch {
      throw new GenerationError('the LLM upstream answered something that is not a chat completion', false);
    }
    const sections = typeof content === 'string' ? sectionsFromReply(content, name) : [];
    if (sections.length === 0) throw new GenerationError('the LLM answered no page', true);
    return sections;
  }
}

export function llmNotConfigured(): ApiError {
  return errors.badRequest(
    `pages from a prompt need an LLM, and none is configured: set ${LLM_SETTING} (with NUBE_LLM_API_KEY and NUBE_LLM_MODEL), give the account an AI key (PUT /account/ai-key), or send sections`,
    [{ path: ['body', 'prompt'], message: `needs ${LLM_SETTING}` }],
    'LlmNotConfigured',
  );
}
