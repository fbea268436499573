import { Marked } from 'marked';
import sanitizeHtml from 'sanitize-html';

// User content becomes HTML here and nowhere else: Markdown through marked, then everything (Markdown
// output and HTML bodies alike) through sanitize-html's allow-list. No script, no style, no event
// handlers, no iframes or forms; links and images only over http(s) (images also data: and paths
// relative to the document, which nube serves itself).

const marked = new Marked({ gfm: true, breaks: false, async: false });

const OPTIONS: sanitizeHtml.IOptions = {
  allowedTags: [
    ...sanitizeHtml.defaults.allowedTags,
    'img',
    'figure',
    'figcaption',
    'del',
    'ins',
    'sup',
    'sub',
    'mark',
    'details',
    'summary',
    'kbd',
    'span',
    'div',
    'h1',
    'h2',
  ],
  allowedAttributes: {
    a: ['href', 'title', 'name', 'rel'],
    img: ['src', 'alt', 'title', 'width', 'height'],
    th: ['colspan', 'rowspan', 'align'],
    td: ['colspan', 'rowspan', 'align'],
    ol: ['start', 'type'],
    code: ['class'],
    '*': ['class', 'lang', 'dir'],
  },
  allowedSchemes: ['http', 'https', 'mailto', 'tel'],
  allowedSchemesByTag: { img: ['http', 'https', 'data'] },
  allowProtocolRelative: false,
  disallowedTagsMode: 'discard',
  // Links leave the document in a new context and pass no referrer or opener.
  transformTags: {
    a: sanitizeHtml.simpleTransform('a', { rel: 'noopener noreferrer nofollow' }),
  },
};

export function sanitize(html: string): string {
  return sanitizeHtml(html, OPTIONS);
}

export function markdownToHtml(markdown: string): string {
  return sanitize(marked.parse(markdown) as string);
}

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
