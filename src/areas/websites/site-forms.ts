// Forms a site declares: `<form data-nube-form="contact">` in its HTML. The names are read once, when
// the site is published, and kept with it: a submission to a name the live site does not declare is
// refused (nobody makes forms by posting to made-up names). When a page is served, such a form without
// an `action` gets nube's (`/f/<name>`, POST), so a plain HTML form works with no script.
import type { SiteEntry } from './site-files.js';

/** A form's name: letters, digits, `_` and `-`, 1-64 characters. */
export const FORM_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

/** At most this many form names are kept per site (the first ones found, in path order). */
export const MAX_SITE_FORMS = 100;

/** HTML files larger than this are not read for forms (nor changed when served). */
const MAX_SCANNED_BYTES = 2 * 1024 * 1024;

const ATTR = /\sdata-nube-form\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))/i;
const FORM_TAG = /<form\b[^>]*>/gi;

const isHtml = (path: string, contentType?: string) =>
  contentType ? contentType.startsWith('text/html') : /\.html?$/i.test(path);

/** The form names an HTML text declares, each once, in order. */
export function formNamesIn(html: string): string[] {
  const names = new Set<string>();
  for (const tag of html.match(FORM_TAG) ?? []) {
    const m = ATTR.exec(tag);
    const name = m ? (m[1] ?? m[2] ?? m[3] ?? '').trim() : '';
    if (FORM_NAME.test(name)) names.add(name);
  }
  return [...names];
}

/** The form names of a site's HTML files, read as the site is published. */
export async function declaredForms(files: SiteEntry[]): Promise<string[]> {
  const names = new Set<string>();
  const pages = files
    .filter((f) => isHtml(f.path, f.contentType) && f.size <= MAX_SCANNED_BYTES)
    .sort((a, b) => (a.path < b.path ? -1 : 1));
  for (const f of pages) {
    const parts: Buffer[] = [];
    for await (const c of f.open()) parts.push(Buffer.isBuffer(c) ? c : Buffer.from(c as Uint8Array));
    const text = Buffer.concat(parts).toString('utf8');
    if (!text.includes('data-nube-form')) continue;
    for (const n of formNamesIn(text)) {
      if (names.size >= MAX_SITE_FORMS) return [...names];
      names.add(n);
    }
  }
  return [...names];
}

/** Whether a served page may be changed for its forms (read whole into memory). */
export const formPageSize = (size: number) => size <= MAX_SCANNED_BYTES;

/**
 * The page with `action="/f/<name>"` (and `method="post"` when it has no method) on each declared form
 * that has no action of its own; an `enctype` for files when the form holds a file input and names none.
 */
export function withFormActions(html: Buffer): Buffer {
  const text = html.toString('utf8');
  if (!text.includes('data-nube-form')) return html;
  let changed = false;
  const out = text.replace(FORM_TAG, (tag, at: number) => {
    const m = ATTR.exec(tag);
    const name = m ? (m[1] ?? m[2] ?? m[3] ?? '').trim() : '';
    if (!FORM_NAME.test(name) || /\saction\s*=/i.test(tag)) return tag;
    let add = ` action="/f/${name}"`;
    if (!/\smethod\s*=/i.test(tag)) add += ' method="post"';
    if (!/\senctype\s*=/i.test(tag)) {
      const end = text.indexOf('</form', at);
      const body = text.slice(at, end === -1 ? undefined : end);
      if (/<input\b[^>]*\stype\s*=\s*["']?file\b/i.test(body)) add += ' enctype="multipart/form-data"';
    }
    changed = true;
    const close = tag.endsWith('/>') ? tag.length - 2 : tag.length - 1;
    return tag.slice(0, close) + add + tag.slice(close);
  });
  return changed ? Buffer.from(out, 'utf8') : html;
}
