import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { operations } from '../../src/areas/index.js';
import { sandboxActionBodies } from '../../src/areas/sandboxes/operations.js';
import { sandboxFileBodies } from '../../src/areas/sandboxes/action-bodies.js';
import { isLimited } from '../../src/platform/json-limits.js';

// Every free-form value a client can send (an object with unknown keys, a record, an unknown) has a
// depth and size limit (`limited()` in src/platform/json-limits.ts), so nothing a client stores can be
// too deep or too large to serialize again.

interface Def {
  type: string;
  innerType?: z.ZodType;
  element?: z.ZodType;
  options?: z.ZodType[];
  left?: z.ZodType;
  right?: z.ZodType;
  in?: z.ZodType;
  out?: z.ZodType;
  shape?: Record<string, z.ZodType>;
  catchall?: z.ZodType;
  valueType?: z.ZodType;
  items?: z.ZodType[];
  rest?: z.ZodType | null;
  getter?: () => z.ZodType;
}

const def = (s: z.ZodType) => (s as unknown as { _zod: { def: Def } })._zod.def;

/** Paths of free-form values under `schema` that no `limited()` covers. */
function unlimited(schema: z.ZodType, path: string, seen = new Set<z.ZodType>()): string[] {
  if (seen.has(schema)) return [];
  seen.add(schema);
  if (isLimited(schema)) return [];
  const d = def(schema);
  const into = (s: z.ZodType | null | undefined, p: string) => (s ? unlimited(s, p, seen) : []);
  switch (d.type) {
    case 'unknown':
    case 'any':
      return [path];
    case 'record':
      return [path];
    case 'object': {
      const open = d.catchall && !['never'].includes(def(d.catchall).type);
      return [...(open ? [`${path} (unknown keys)`] : []), ...Object.entries(d.shape ?? {}).flatMap(([k, v]) => into(v, `${path}.${k}`))];
    }
    case 'array':
      return into(d.element, `${path}[]`);
    case 'tuple':
      return [...(d.items ?? []).flatMap((s, i) => into(s, `${path}[${i}]`)), ...into(d.rest, `${path}[...]`)];
    case 'union':
      return (d.options ?? []).flatMap((o, i) => into(o, `${path}|${i}`));
    case 'intersection':
      return [...into(d.left, path), ...into(d.right, path)];
    case 'pipe':
      return into(d.in, path);
    case 'lazy':
      return into(d.getter?.(), path);
    case 'optional':
    case 'nullable':
    case 'default':
    case 'prefault':
    case 'readonly':
    case 'catch':
    case 'nonoptional':
      return into(d.innerType, path);
    default:
      return [];
  }
}

describe('free-form input is limited in depth and size', () => {
  it('every operation: params, query and body', () => {
    const found = operations.flatMap((op) => [
      ...(op.params ? unlimited(op.params, `${op.id} params`) : []),
      ...(op.query ? unlimited(op.query, `${op.id} query`) : []),
      ...(op.body ? unlimited(op.body, `${op.id} body`) : []),
    ]);
    expect(found).toEqual([]);
  });

  it('the bodies sandbox actions and file operations parse again in their handlers', () => {
    const found = [
      ...Object.entries(sandboxActionBodies).flatMap(([a, s]) => unlimited(s as z.ZodType, `action ${a}`)),
      ...Object.entries(sandboxFileBodies).flatMap(([o, s]) => unlimited(s as z.ZodType, `file op ${o}`)),
    ];
    expect(found).toEqual([]);
  });
});
