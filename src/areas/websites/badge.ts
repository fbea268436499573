// Byte's sites carry a small "made with nube" badge (the spec: "Byte shows branding on landings, the
// others do not"). Inline styles only, so it cannot clash with the site's stylesheet; no script.
export const BADGE_HTML =
  '<a href="https://github.com/nube" data-nube-badge style="position:fixed;right:12px;bottom:12px;z-index:2147483647;' +
  'font:600 12px/1.2 system-ui,sans-serif;color:#fff;background:#111;padding:6px 10px;border-radius:999px;' +
  'text-decoration:none;opacity:.85">made with nube</a>';

/** The page with the badge before its last `</body>`, or at the end when it has none. */
export function withBadge(html: Buffer): Buffer {
  const text = html.toString('utf8');
  const at = text.toLowerCase().lastIndexOf('</body>');
  return Buffer.from(at === -1 ? text + BADGE_HTML : text.slice(0, at) + BADGE_HTML + text.slice(at), 'utf8');
}
