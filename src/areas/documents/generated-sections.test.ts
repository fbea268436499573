import { describe, expect, it } from 'vitest';
import { MAX_GENERATED_SECTIONS, sectionsFromReply } from './generated-sections.js';

describe('sections from an LLM reply', () => {
  it('reads the asked JSON, fenced or bare, with the usual aliases', () => {
    const bare = sectionsFromReply(
      '{"sections":[{"heading":"A","body":"uno"},{"title":"B","content":"dos"}]}',
      'Doc',
    );
    expect(bare).toEqual([
      { heading: 'A', body: 'uno', format: 'markdown' },
      { heading: 'B', body: 'dos', format: 'markdown' },
    ]);
    const fenced = sectionsFromReply(
      'Aquí está:\n```json\n{"pages":[{"heading":"C","body":"<p>x</p>","format":"html"}]}\n```',
      'Doc',
    );
    expect(fenced).toEqual([{ heading: 'C', body: '<p>x</p>', format: 'html' }]);
  });

  it('splits Markdown at its top headings, and keeps headingless text as one page', () => {
    expect(sectionsFromReply('intro\n# Uno\nprimero\n## sub\n# Dos\nsegundo', 'Doc')).toEqual([
      { heading: undefined, body: 'intro', format: 'markdown' },
      { heading: 'Uno', body: 'primero\n## sub', format: 'markdown' },
      { heading: 'Dos', body: 'segundo', format: 'markdown' },
    ]);
    expect(sectionsFromReply('## A\na\n## B\nb', 'Doc').map((s) => s.heading)).toEqual(['A', 'B']);
    expect(sectionsFromReply('solo texto', 'Doc')).toEqual([
      { heading: 'Doc', body: 'solo texto', format: 'markdown' },
    ]);
  });

  it('drops empty pages, ids and images, and caps the count', () => {
    const many = {
      sections: Array.from({ length: 80 }, (_, i) => ({
        id: 'x',
        heading: `h${i}`,
        body: 'b',
        images: [{ url: 'http://x' }],
      })),
    };
    const out = sectionsFromReply(JSON.stringify(many), 'Doc');
    expect(out).toHaveLength(MAX_GENERATED_SECTIONS);
    expect(out[0]).toEqual({ heading: 'h0', body: 'b', format: 'markdown' });
    expect(sectionsFromReply('{"sections":[{"heading":" "},{"body":""}]}', 'Doc')).toEqual([]);
    expect(sectionsFromReply('   ', 'Doc')).toEqual([]);
  });
});
