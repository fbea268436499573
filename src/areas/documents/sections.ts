import { errors } from '../../platform/errors.js';
import type { StoredSection } from './render/page.js';

/** A section as clients send it (free-form; these fields are understood). */
export interface SectionInput {
  id?: string;
  heading?: string;
  title?: string;
  body?: string;
  content?: string;
  format?: 'markdown' | 'html';
  images?: { fileId?: string; url?: string; alt?: string; caption?: string }[];
  [extra: string]: unknown;
}

/**
 * Sections as stored: every one gets an id (`s1`, `s2`, ... for those without, skipping ids taken), the
 * `title`/`content` aliases fold into `heading`/`body`, other fields are kept as sent.
 */
export function normalizeSections(input: SectionInput[]): StoredSection[] {
  const taken = new Set<string>();
  input.forEach((s, i) => {
    if (s.id === undefined) return;
    if (taken.has(s.id)) {
      throw errors.validation([
        { path: ['body', 'sections', i, 'id'], message: `section id "${s.id}" appears twice` },
      ]);
    }
    taken.add(s.id);
  });
  let next = 1;
  return input.map((s) => {
    const { title, content, ...rest } = s;
    let id = s.id;
    while (id === undefined) {
      const candidate = `s${next++}`;
      if (!taken.has(candidate)) {
        id = candidate;
        taken.add(id);
      }
    }
    const out: StoredSection = { ...rest, id };
    if (out.heading === undefined && title !== undefined) out.heading = title;
    if (out.body === undefined && content !== undefined) out.body = content;
    return out;
  });
}

/** The sections named in `?sections=a,b` in the document's order; unknown ids are a 400. */
export function pickSections(all: StoredSection[], ids: string | undefined): StoredSection[] {
  if (ids === undefined || ids.trim() === '') return all;
  const wanted = new Set(
    ids
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean),
  );
  const known = new Set(all.map((s) => s.id));
  const unknown = [...wanted].filter((id) => !known.has(id));
  if (unknown.length > 0) {
    throw errors.validation([
      {
        path: ['query', 'sections'],
        message: `no section with id ${unknown.map((u) => `"${u}"`).join(', ')}`,
      },
    ]);
  }
  return all.filter((s) => wanted.has(s.id));
}

/** File ids of the images in `sections`, each once. */
export function imageFileIds(sections: StoredSection[]): string[] {
  return [...new Set(sections.flatMap((s) => (s.images ?? []).flatMap((i) => (i.fileId ? [i.fileId] : []))))];
}
