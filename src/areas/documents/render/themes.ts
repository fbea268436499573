// Built-in themes: CSS only (no theme ships a script, so no script at all reaches a page). Each theme
// sets the colour variables below on :root; `customColors` override them key by key
// (`{ primary: '#0a7' }` sets --color-primary), so every theme honours the same names.

export const THEME_NAMES = ['classic', 'modern', 'dark', 'minimal'] as const;
export type ThemeName = (typeof THEME_NAMES)[number];

export const COLOR_NAMES = ['primary', 'accent', 'background', 'surface', 'text', 'muted', 'border'] as const;

type Palette = Record<(typeof COLOR_NAMES)[number], string>;

interface Theme {
  palette: Palette;
  fontBody: string;
  fontHeading: string;
  /** Rules of this theme on top of the shared base. */
  extra: string;
}

const SERIF = "'Liberation Serif', 'DejaVu Serif', Georgia, serif";
const SANS = "'Liberation Sans', 'DejaVu Sans', Arial, Helvetica, sans-serif";
const MONO = "'Liberation Mono', 'DejaVu Sans Mono', monospace";

const THEMES: Record<ThemeName, Theme> = {
  classic: {
    palette: {
      primary: '#1f3a5f',
      accent: '#b5651d',
      background: '#fdfcf8',
      surface: '#f3efe4',
      text: '#222222',
      muted: '#6b6b6b',
      border: '#d9d2c3',
    },
    fontBody: SERIF,
    fontHeading: SERIF,
    extra: '.page h1{border-bottom:2px solid var(--color-accent);padding-bottom:.3em}',
  },
  modern: {
    palette: {
      primary: '#4f46e5',
      accent: '#06b6d4',
      background: '#ffffff',
      surface: '#f4f5fb',
      text: '#111827',
      muted: '#6b7280',
      border: '#e5e7eb',
    },
    fontBody: SANS,
    fontHeading: SANS,
    extra:
      '.page h1{color:var(--color-primary);letter-spacing:-.02em}' +
      '.page{border-top:6px solid var(--color-primary)}' +
      'blockquote{border-left-color:var(--color-accent)}',
  },
  dark: {
    palette: {
      primary: '#93c5fd',
      accent: '#f472b6',
      background: '#0f172a',
      surface: '#1e293b',
      text: '#e2e8f0',
      muted: '#94a3b8',
      border: '#334155',
    },
    fontBody: SANS,
    fontHeading: SANS,
    extra: '.page h1{color:var(--color-primary)}a{color:var(--color-accent)}',
  },
  minimal: {
    palette: {
      primary: '#000000',
      accent: '#555555',
      background: '#ffffff',
      surface: '#fafafa',
      text: '#111111',
      muted: '#777777',
      border: '#eeeeee',
    },
    fontBody: SANS,
    fontHeading: SERIF,
    extra: '.page h1{font-weight:400;font-size:2.4em}',
  },
};

const BASE = `
*{box-sizing:border-box}
html{-webkit-print-color-adjust:exact;print-color-adjust:exact}
body{margin:0;background:var(--color-background);color:var(--color-text);font-family:var(--font-body);font-size:16px;line-height:1.6}
main.document{max-width:52rem;margin:0 auto;padding:2rem 1.25rem}
.page{background:var(--color-background);padding:2rem 0;margin-bottom:2rem}
.page+.page{border-top:1px solid var(--color-border)}
h1,h2,h3,h4{font-family:var(--font-heading);color:var(--color-primary);line-height:1.25;margin:1.2em 0 .5em}
.page>h1:first-child{margin-top:0}
a{color:var(--color-primary)}
img{max-width:100%;height:auto}
figure{margin:1.5em 0}figcaption{color:var(--color-muted);font-size:.9em;margin-top:.4em}
blockquote{margin:1em 0;padding:.5em 1em;border-left:4px solid var(--color-border);background:var(--color-surface);color:var(--color-text)}
code,pre{font-family:${MONO};background:var(--color-surface);border-radius:4px}
code{padding:.1em .3em}pre{padding:1em;overflow:auto}pre code{padding:0}
table{border-collapse:collapse;width:100%;margin:1em 0}
th,td{border:1px solid var(--color-border);padding:.4em .6em;text-align:left}
th{background:var(--color-surface)}
hr{border:0;border-top:1px solid var(--color-border);margin:2em 0}
@page{margin:16mm 14mm}
@media print{
  main.document{max-width:none;padding:0}
  .page{margin:0;padding:0;border:0!important;break-after:page}
  .page:last-child{break-after:auto}
  img,figure,table,pre,blockquote{break-inside:avoid}
}
`;

export function isTheme(name: string): name is ThemeName {
  return (THEME_NAMES as readonly string[]).includes(name);
}

/** The stylesheet of `theme` with `customColors` applied after the theme's own palette. */
export function themeCss(theme: ThemeName, customColors: Record<string, string>): string {
  const t = THEMES[theme];
  const vars = {
    ...Object.fromEntries(Object.entries(t.palette).map(([k, v]) => [`--color-${k}`, v])),
  } as Record<string, string>;
  for (const [k, v] of Object.entries(customColors)) vars[`--color-${k}`] = v;
  vars['--font-body'] = t.fontBody;
  vars['--font-heading'] = t.fontHeading;
  const root = `:root{${Object.entries(vars)
    .map(([k, v]) => `${k}:${v}`)
    .join(';')}}`;
  return root + BASE + t.extra;
}

/**
 * What a colour value may be: hex, rgb()/hsl() with plain numbers, or a CSS colour keyword. Anything
 * else (url(), expressions, `;` or `}` that would end the rule) is refused, so a colour cannot inject CSS.
 */
export const COLOR_VALUE =
  /^(#[0-9a-fA-F]{3,8}|(rgb|rgba|hsl|hsla)\([0-9.,%\s/+-]{1,60}(deg)?[0-9.,%\s/+-]{0,30}\)|[a-zA-Z]{3,30})$/;
export const COLOR_KEY = /^[a-z][a-z0-9-]{0,31}$/;
