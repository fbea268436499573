import type { SectionInput } from './sections.js';

/**
 * Writes a document's sections from a prompt (an LLM behind it). Documents call it when a document has
 * a prompt and no sections. nube has no implementation yet: the LLM gateway comes with the agents area,
 * and until it is wired a prompt-only document answers 400 `LlmNotConfigured`.
 */
export interface PageWriter {
  generate(
    prompt: string,
    opts: { name: string; theme: string; signal?: AbortSignal },
  ): Promise<SectionInput[]>;
}

/** The setting the 400 names, so an operator knows what to configure. */
export const LLM_SETTING = 'NUBE_LLM_BASE_URL';
