// Sections out of an LLM's reply. Models are asked for `{"sections":[{heading, body}]}`, yet many wrap it
// in a code fence or answer plain Markdown instead; both are read rather than failing the generation.
// Only heading, body and format are taken (no ids, no images: a model cannot know the owner's file ids,
// and a URL image would make every visitor's browser fetch a host the model chose). Bodies are
// sanitized at render time like any section's.
import type { SectionInput } from './sections.js';

export const MAX_GENERATED_SECTIONS = 50;
const MAX_HEADING = 500;
const MAX_BODY = 100_000;

export function sectionsFromReply(reply: string, fallbackHeading: string): SectionInput[] {
  const fromJson = jsonSections(reply);
  const sections = fromJson ?? markdownSections(reply, fallbackHeading);
  return sections
    .map((s) => ({ ...s, heading: s.heading?.trim().slice(0, MAX_HEADING) || undefined }))
    .filter((s) => s.heading || s.body?.trim())
    .slice(0, MAX_GENERATED_SECTIONS);
}

function jsonSections(reply: string): SectionInput[] | null {
  const fenced = /```(?:json)?\s*\n([\s\S]*?)\n```/.exec(reply)?.[1];
  const text = fenced ?? reply;
  const start = text.indexOf('{');
  const end = text.lastIndexOf('}');
  if (start < 0 || end <= start) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text.slice(start, end + 1));
  } catch {
    return null;
  }
  const list =
    (parsed as { sections?: unknown; pages?: unknown }).sections ?? (parsed as { pages?: unknown }).pages;
  if (!Array.isArray(list)) return null;
  const out: SectionInput[] = [];
  for (const item of list) {
    if (!item || typeof item !== 'object') continue;
    const o = item as Record<string, unknown>;
    const heading = str(o.heading) ?? str(o.title);
    const body = str(o.body) ?? str(o.content) ?? str(o.markdown);
    const format = o.format === 'html' ? 'html' : 'markdown';
    out.push({ heading, body: body?.slice(0, MAX_BODY), format });
  }
  return out;
}

/** Markdown split at its top-level headings (`# `, else `## `); no heading at all is one page. */
function markdownSections(reply: string, fallbackHeading: string): SectionInput[] {
  const text = reply.replace(/\r\n/g, '\n').trim();
  if (!text) return [];
  const level = /^# /m.test(text) ? '# ' : /^## /m.test(text) ? '## ' : null;
  if (!level) return [{ heading: fallbackHeading, body: text.slice(0, MAX_BODY), format: 'markdown' }];
  const out: SectionInput[] = [];
  let current: { heading?: string; lines: string[] } = { lines: [] };
  const flush = () => {
    const body = current.lines.join('\n').trim();
    if (current.heading || body)
      out.push({ heading: current.heading, body: body.slice(0, MAX_BODY), format: 'markdown' });
  };
  for (const line of text.split('\n')) {
    if (line.startsWith(level)) {
      flush();
      current = { heading: line.slice(level.length).trim(), lines: [] };
    } else current.lines.push(line);
  }
  flush();
  return out;
}

const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
