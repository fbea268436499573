/** One operation of the OpenAPI document, as the SDK's dispatch table needs it. */
export interface OpEntry {
  id: string;
  method: string;
  /** Full path including /api/v2, with `{param}` placeholders. */
  path: string;
  pathParams: string[];
  query: string[];
  requiredQuery: boolean;
  body: 'none' | 'optional' | 'required';
  /** Field names of a closed object body, or null (record, union, non-object). */
  bodyFields: string[] | null;
  success: number;
  contentType: string;
  implemented: boolean;
  /** A second method/path served by the same operation (operationId `<id>.<method>`). */
  alias: boolean;
}

/**
 * How the ergonomic method takes its last argument:
 * none: nothing; query: the query object; body: the body; merged: body fields and query fields in one
 * object; split: `{ body, query }` (when the body is not a closed object or its fields clash with query).
 */
export type InputStyle = 'none' | 'query' | 'body' | 'merged' | 'split';

export function inputStyle(e: OpEntry): InputStyle {
  const hasQuery = e.query.length > 0;
  const hasBody = e.body !== 'none';
  if (!hasQuery && !hasBody) return 'none';
  if (!hasBody) return 'query';
  if (!hasQuery) return 'body';
  if (e.bodyFields && !e.bodyFields.some((f) => e.query.includes(f))) return 'merged';
  return 'split';
}

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const RESERVED = new Set(['call', 'request', 'baseUrl', 'constructor', 'prototype', 'apiKey']);

/** `share-tokens` -> `shareTokens`; the namespace key of one id segment. */
export function nsKey(segment: string): string {
  return segment.replace(/[-_]+([A-Za-z0-9])/g, (_, c: string) => c.toUpperCase());
}

const prop = (k: string) => (IDENT.test(k) ? k : JSON.stringify(k));
const lit = (s: string) => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

interface NsNode {
  entry?: OpEntry;
  children: Map<string, NsNode>;
}

/** The text of operations.gen.ts (without the header) for these entries, sorted by id. */
export function buildOperationsModule(entries: OpEntry[]): string {
  const lines: string[] = [];
  lines.push("import type { operations } from './api.gen.js';");
  lines.push("import type { NsRest, OpOutput } from './types.js';");
  lines.push('');
  lines.push(
    '/** Every operation of the API: how to send it and how the ergonomic methods take arguments. */',
  );
  lines.push('export const OPERATIONS = {');
  const root: NsNode = { children: new Map() };
  for (const e of entries) {
    const ns = e.alias ? null : e.id.split('.').map(nsKey);
    if (ns) insert(root, ns, e);
    lines.push(`  ${lit(e.id)}: {`);
    lines.push(`    method: ${lit(e.method)},`);
    lines.push(`    path: ${lit(e.path)},`);
    lines.push(`    pathParams: [${e.pathParams.map(lit).join(', ')}],`);
    lines.push(`    query: [${e.query.map(lit).join(', ')}],`);
    lines.push(`    body: ${lit(e.body)},`);
    lines.push(`    style: ${lit(inputStyle(e))},`);
    lines.push(`    success: ${e.success},`);
    lines.push(`    contentType: ${lit(e.contentType)},`);
    lines.push(`    implemented: ${e.implemented},`);
    lines.push(`    ns: ${ns ? `[${ns.map(lit).join(', ')}]` : 'null'},`);
    lines.push('  },');
  }
  lines.push('} as const;');
  lines.push('');
  lines.push('/** Request and success response types of each operation, indexed from api.gen.ts. */');
  lines.push('export interface OperationTypes {');
  for (const e of entries) {
    const o = `operations[${lit(e.id)}]`;
    lines.push(`  ${lit(e.id)}: {`);
    lines.push(`    params: ${e.pathParams.length ? `${o}['parameters']['path']` : 'never'};`);
    lines.push(`    query: ${e.query.length ? `NonNullable<${o}['parameters']['query']>` : 'never'};`);
    lines.push(
      `    body: ${e.body === 'none' ? 'never' : `NonNullable<${o}['requestBody']>['content']['application/json']`};`,
    );
    lines.push(`    response: ${o}['responses'][${e.success}]['content'][${lit(e.contentType)}];`);
    lines.push('  };');
  }
  lines.push('}');
  lines.push('');
  lines.push('/** `area.verb` -> `nube.area.verb(...pathParams, input?)`. */');
  lines.push('export interface Namespaces {');
  for (const [key, node] of [...root.children].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))) {
    if (RESERVED.has(key)) throw new Error(`operation namespace "${key}" clashes with a Nube client member`);
    emitNode(lines, key, node, '  ');
  }
  lines.push('}');
  return `${lines.join('\n')}\n`;
}

function insert(root: NsNode, ns: string[], e: OpEntry): void {
  let node = root;
  for (const seg of ns) {
    let next = node.children.get(seg);
    if (!next) {
      next = { children: new Map() };
      node.children.set(seg, next);
    }
    node = next;
  }
  if (node.entry) throw new Error(`operations ${node.entry.id} and ${e.id} map to the same SDK method`);
  node.entry = e;
}

function signature(e: OpEntry): string {
  const id = lit(e.id);
  const args = e.pathParams.map(
    (p) => `${IDENT.test(p) ? p : `_${nsKey(p)}`}: OperationTypes[${id}]['params'][${lit(p)}]`,
  );
  args.push(`...rest: NsRest<${id}>`);
  return `(${args.join(', ')}): Promise<OpOutput<${id}>>`;
}

function emitNode(lines: string[], key: string, node: NsNode, indent: string): void {
  const children = [...node.children].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  if (node.entry && children.length === 0) {
    lines.push(`${indent}${prop(key)}${signature(node.entry)};`);
    return;
  }
  lines.push(`${indent}${prop(key)}: {`);
  if (node.entry) lines.push(`${indent}  ${signature(node.entry)};`);
  for (const [k, child] of children) emitNode(lines, k, child, `${indent}  `);
  lines.push(`${indent}};`);
}
