import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

// The layering of ARCHITECTURE.md, checked on the source: areas -> platform/store/blob, never upward;
// the configuration is read in one module (src/config.ts) that only the entry points import (areas
// and the platform receive a Config whose shape is platform/config-shape.ts); and no import circles,
// type-only imports included (a helper that needs its host declares the small interface it uses).

const SRC = resolve(import.meta.dirname, '../../src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return sources(p);
    return p.endsWith('.ts') && !p.endsWith('.test.ts') ? [p] : [];
  });
}

/** Every relative import and re-export of each module under src/, type-only ones included. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sources(SRC)) {
    const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    const deps: string[] = [];
    for (const s of sf.statements) {
      if (!(ts.isImportDeclaration(s) || ts.isExportDeclaration(s)) || !s.moduleSpecifier) continue;
      if (!ts.isStringLiteral(s.moduleSpecifier) || !s.moduleSpecifier.text.startsWith('.')) continue;
      const target = resolve(dirname(file), s.moduleSpecifier.text.replace(/\.js$/, '.ts'));
      if (existsSync(target)) deps.push(target);
    }
    graph.set(file, deps);
  }
  return graph;
}

/** Strongly connected components of more than one module (Tarjan). */
function circles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1) found.push(scc.map((f) => relative(SRC, f)).sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

describe('source structure', () => {
  const graph = importGraph();
  const edges = [...graph].flatMap(([from, tos]) => tos.map((to) => [relative(SRC, from), relative(SRC, to)] as const));

  it('has no import circles, type-only imports included', () => {
    expect(circles(graph)).toEqual([]);
  });

  it('keeps the platform free of areas', () => {
    expect(edges.filter(([from, to]) => from.startsWith('platform/') && to.startsWith('areas/'))).toEqual([]);
  });

  it('lets only the entry points import the module that reads the environment', () => {
    const readers = edges.filter(([from, to]) => to === 'config.ts' && (from.startsWith('areas/') || from.startsWith('platform/')));
    expect(readers, 'import the shape from platform/config-shape.ts (plans from platform/plans.ts)').toEqual([]);
  });
});
