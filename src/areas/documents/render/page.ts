import { FORM_CSS, type FormSpec, formHtml } from './form.js';
import { escapeHtml, markdownToHtml, sanitize } from './sanitize.js';
import { type ThemeName, themeCss } from './themes.js';

/** A section as stored: ids assigned, aliases folded (title -> heading, content -> body). */
export interface StoredSection {
  id: string;
  heading?: string;
  body?: string;
  format?: 'markdown' | 'html';
  images?: { fileId?: string; url?: string; alt?: string; caption?: string }[];
  /** `form`: the section shows `form` after its body (a form visitors of the site can send). */
  kind?: 'page' | 'form';
  form?: FormSpec;
  [extra: string]: unknown;
}

export interface RenderDoc {
  name: string;
  theme: ThemeName;
  customColors: Record<string, string>;
  sections: StoredSection[];
  /** `lang` of the page; documents are often Spanish, and hyphenation and quotes follow it. */
  lang?: string;
}

/** Where an image stored in the files area is found from the rendered page. */
export type ImageSrc = (fileId: string) => string;

/** Relative to the document: the site and the PDF renderer both serve `assets/<fileId>`. */
export const assetPath = (fileId: string) => `assets/${encodeURIComponent(fileId)}`;

export const pageId = (sectionId: string) => `pg_${sectionId}`;

/** One section as a `<section class="page">` of sanitized HTML. */
export function sectionHtml(s: StoredSection, imageSrc: ImageSrc = assetPath): string {
  const parts: string[] = [];
  if (s.heading) parts.push(`<h1>${escapeHtml(s.heading)}</h1>`);
  if (s.body) parts.push(s.format === 'html' ? sanitize(s.body) : markdownToHtml(s.body));
  for (const img of s.images ?? []) {
    const src = img.fileId ? imageSrc(img.fileId) : (img.url as string);
    const caption = img.caption ? `<figcaption>${escapeHtml(img.caption)}</figcaption>` : '';
    // The figure goes through the sanitizer too, so a URL image obeys the same scheme rules.
    parts.push(
      sanitize(
        `<figure><img src="${escapeHtml(src)}" alt="${escapeHtml(img.alt ?? '')}">${caption}</figure>`,
      ),
    );
  }
  if (s.kind === 'form' && s.form) parts.push(formHtml(s.form));
  const id = pageId(s.id);
  return `<section class="page" id="${escapeHtml(id)}" data-page-id="${escapeHtml(id)}">${parts.join('\n')}</section>`;
}

/** A whole HTML document of `sections` in the document's theme. */
export function documentHtml(
  doc: RenderDoc,
  sections: StoredSection[],
  imageSrc: ImageSrc = assetPath,
  extraHead = '',
): string {
  return (
    `<!doctype html><html lang="${escapeHtml(doc.lang ?? 'es')}"><head><meta charset="utf-8">` +
    '<meta name="viewport" content="width=device-width, initial-scale=1">' +
    `<title>${escapeHtml(doc.name)}</title><style>${themeCss(doc.theme, doc.customColors)}${sections.some((s) => s.kind === 'form') ? FORM_CSS : ''}</style>${extraHead}</head>` +
    `<body class="theme-${doc.theme}"><main class="document">${sections.map((s) => sectionHtml(s, imageSrc)).join('\n')}</main></body></html>`
  );
}
