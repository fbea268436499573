import type { JsonSchema } from '../../../src/platform/json-schema.js';
import type { OpEntry } from '../../sdk/scripts/operations-module.js';
import { nsKey } from '../../sdk/scripts/operations-module.js';
import { argName, docstring, PY_HEADER, pascal, pyStr, snake, type TypeEmitter } from './python-types.js';

/** One operation: its table entry and its OpenAPI operation object (local $defs hoisted). */
export interface OpDoc {
  entry: OpEntry;
  op: JsonSchema;
}

/** Operations the SDK serves by hand (a WebSocket is no HTTP call): the resource's mixin defines the method. */
export const HAND_WRITTEN = new Set(['sandboxes.terminal']);

/** Hand-written methods mixed into a generated resource class: uploads, downloads, the terminal. */
const MIXINS: Record<string, string> = { files: 'FilesMixin', sandboxes: 'SandboxesMixin' };

const OPTIONS_ARG = 'request_options';

interface Arg {
  wire: string;
  py: string;
  type: string;
  required: boolean;
  doc?: string;
}

/** How a method takes its input, resolved from the schemas. */
interface MethodShape {
  path: Arg[];
  /** Body fields as keyword arguments (null: the body is one `body` argument). */
  bodyFields: Arg[] | null;
  bodyArg: Arg | null;
  /** Extra body keys are allowed (`**extra`). */
  bodyExtra: boolean;
  query: Arg[];
  returns: string;
  asyncReturns: string;
  /** The item type when the operation is a cursor-paginated list. */
  pageItem: string | null;
}

interface Node {
  op?: OpDoc;
  children: Map<string, Node>;
}

const deref = (doc: TypeEmitter, s: JsonSchema | undefined): JsonSchema | undefined => doc.resolve(s);

function shapeOf(d: OpDoc, types: TypeEmitter): MethodShape {
  const { entry, op } = d;
  const base = pascal(entry.id);
  types.hint(`${base}Response`, `What \`${entry.id}\` answers.`);
  types.hint(`${base}Body`, `The JSON body of \`${entry.id}\`.`);
  const params = (op.parameters ?? []) as {
    name: string;
    in: string;
    required?: boolean;
    schema?: JsonSchema;
    description?: string;
  }[];
  const path = entry.pathParams.map((name) => {
    const p = params.find((x) => x.in === 'path' && x.name === name);
    return {
      wire: name,
      py: snake(nsKey(name)),
      type: types.expr(p?.schema, `${base}${pascal(name)}`),
      required: true,
      doc: p?.description ?? (p?.schema?.description as string | undefined),
    };
  });
  const query = params
    .filter((p) => p.in === 'query')
    .map((p) => ({
      wire: p.name,
      py: argName(p.name),
      type: types.expr(p.schema, `${base}Query${pascal(p.name)}`),
      required: !!p.required,
      doc: p.description,
    }));
  const body = (
    op.requestBody as { required?: boolean; content: Record<string, { schema: JsonSchema }> } | undefined
  )?.content['application/json']?.schema;
  let bodyFields: Arg[] | null = null;
  let bodyArg: Arg | null = null;
  let bodyExtra = false;
  if (body) {
    const resolved = deref(types, body)!;
    const fields = bodyFieldsOf(resolved, types, base);
    const taken = new Set([
      ...path.map((a) => a.py),
      ...query.map((a) => a.py),
      OPTIONS_ARG,
      'self',
      'extra',
    ]);
    if (fields && fields.length > 0 && !fields.some((f) => taken.has(f.py))) {
      bodyFields = fields;
      const extra = resolved.additionalProperties;
      bodyExtra = extra !== undefined && extra !== false;
    } else {
      bodyArg = {
        wire: 'body',
        py: 'body',
        type: types.expr(body, `${base}Body`),
        required: entry.body === 'required',
        doc: (body.description as string | undefined) ?? 'The JSON body.',
      };
    }
  }
  const names = [...path, ...query, ...(bodyFields ?? []), ...(bodyArg ? [bodyArg] : [])].map((a) => a.py);
  if (new Set(names).size !== names.length)
    throw new Error(`${entry.id}: two arguments share a Python name (${names.join(', ')})`);
  const responses = op.responses as Record<string, { content?: Record<string, { schema: JsonSchema }> }>;
  const success = responses[String(entry.success)]?.content?.['application/json']?.schema;
  let returns: string;
  let asyncReturns: string;
  let pageItem: string | null = null;
  if (entry.contentType === 'application/json') {
    returns = asyncReturns = types.expr(success, `${base}Response`);
    const r = deref(types, success);
    const rp = (r?.properties ?? {}) as Record<string, JsonSchema>;
    if (entry.query.includes('cursor') && rp.items?.type === 'array' && rp.nextCursor) {
      pageItem = types.expr(rp.items.items as JsonSchema, `${base}Item`);
    }
  } else if (entry.contentType === 'text/event-stream') {
    returns = 'EventStream';
    asyncReturns = 'AsyncEventStream';
  } else {
    returns = 'BinaryResponse';
    asyncReturns = 'AsyncBinaryResponse';
  }
  return { path, bodyFields, bodyArg, bodyExtra, query, returns, asyncReturns, pageItem };
}

/**
 * Keyword arguments for a body: an object's properties, or for a union of objects (databases.query:
 * one statement, a batch, or an import) every variant's properties, required only when every variant
 * requires them. Null when the body is not made of objects with properties.
 */
function bodyFieldsOf(schema: JsonSchema, types: TypeEmitter, base: string): Arg[] | null {
  const variants = ((schema.anyOf ?? schema.oneOf) as JsonSchema[] | undefined)?.map(
    (v) => types.resolve(v)!,
  ) ?? [schema];
  if (
    !variants.every(
      (v) => v.type === 'object' && v.properties && Object.keys(v.properties as object).length > 0,
    )
  )
    return null;
  const byName = new Map<string, { types: string[]; required: number; doc?: string }>();
  for (const v of variants) {
    const required = new Set((v.required as string[] | undefined) ?? []);
    for (const [k, s] of Object.entries(v.properties as Record<string, JsonSchema>)) {
      const f = byName.get(k) ?? { types: [], required: 0 };
      f.types.push(types.expr(s, `${base}Body${pascal(k)}`));
      if (required.has(k)) f.required++;
      f.doc = f.doc ?? (s.description as string | undefined);
      byName.set(k, f);
    }
  }
  return [...byName].map(([k, f]) => {
    const unique = [...new Set(f.types)];
    return {
      wire: k,
      py: argName(k),
      type: unique.length === 1 ? unique[0]! : `Union[${unique.join(', ')}]`,
      required: f.required === variants.length,
      doc: f.doc,
    };
  });
}

const dict = (args: Arg[]) =>
  args.length ? `{${args.map((a) => `${pyStr(a.wire)}: ${a.py}`).join(', ')}}` : 'None';

function signature(s: MethodShape, opts: { skipCursor?: boolean } = {}): string[] {
  const out = ['self'];
  for (const a of s.path) out.push(`${a.py}: ${a.type}`);
  if (s.bodyArg) out.push(`${s.bodyArg.py}: ${s.bodyArg.type}${s.bodyArg.required ? '' : ' = OMIT'}`);
  const kw = [...(s.bodyFields ?? []), ...s.query].filter((a) => !(opts.skipCursor && a.wire === 'cursor'));
  // Required keyword arguments first: only a reader's order; Python accepts either for keyword-only.
  const sorted = [...kw.filter((a) => a.required), ...kw.filter((a) => !a.required)];
  out.push('*');
  for (const a of sorted) out.push(`${a.py}: ${a.type}${a.required ? '' : ' = OMIT'}`);
  out.push(`${OPTIONS_ARG}: Optional[RequestOptions] = None`);
  if (s.bodyExtra) out.push('**extra: Any');
  return out;
}

function methodDoc(d: OpDoc, s: MethodShape, extra = ''): string {
  const parts = [String(d.op.summary ?? d.entry.id)];
  if (d.op.description) parts.push(String(d.op.description));
  if (extra) parts.push(extra);
  const args = [...s.path, ...(s.bodyArg ? [s.bodyArg] : []), ...(s.bodyFields ?? []), ...s.query].filter(
    (a) => a.doc,
  );
  if (args.length)
    parts.push(`Args:\n${args.map((a) => `    ${a.py}: ${a.doc!.replace(/\n/g, ' ')}`).join('\n')}`);
  parts.push(
    `Operation \`${d.entry.id}\`: ${d.entry.method} ${d.entry.path}.${d.entry.implemented ? '' : ' Not implemented by this nube release yet (raises NotImplementedError).'}`,
  );
  return parts.join('\n\n');
}

function callArgs(d: OpDoc, s: MethodShape): string {
  const body = s.bodyFields
    ? s.bodyExtra
      ? `{**extra, ${s.bodyFields.map((a) => `${pyStr(a.wire)}: ${a.py}`).join(', ')}}`
      : dict(s.bodyFields)
    : s.bodyArg
      ? s.bodyArg.py
      : 'OMIT';
  return `${pyStr(d.entry.id)}, ${dict(s.path)}, ${dict(s.query)}, ${body}, ${OPTIONS_ARG}`;
}

function emitMethod(lines: string[], name: string, d: OpDoc, s: MethodShape, isAsync: boolean): void {
  const ret = isAsync ? s.asyncReturns : s.returns;
  lines.push('');
  lines.push(`    ${isAsync ? 'async ' : ''}def ${name}(${signature(s).join(', ')}) -> ${ret}:`);
  lines.push(docstring(methodDoc(d, s), '        '));
  const call = `self._client._call(${callArgs(d, s)})`;
  lines.push(`        return cast(${pyStr(ret)}, ${isAsync ? 'await ' : ''}${call})`);
  if (!s.pageItem) return;
  // A cursor-paginated list also gets an iterator over every item of every page.
  const iterName = name === 'list' || name === '__call__' ? 'iter' : `iter_${name}`;
  const iterType = isAsync ? `AsyncIterator[${s.pageItem}]` : `Iterator[${s.pageItem}]`;
  const noCursor: MethodShape = { ...s, query: s.query.filter((a) => a.wire !== 'cursor') };
  lines.push('');
  lines.push(`    def ${iterName}(${signature(s, { skipCursor: true }).join(', ')}) -> ${iterType}:`);
  lines.push(
    docstring(
      methodDoc(
        d,
        noCursor,
        `Iterates over every item of every page, following \`nextCursor\`; pages are fetched as the loop reaches them.`,
      ),
      '        ',
    ),
  );
  lines.push(`        return cast(${pyStr(iterType)}, self._client._paginate(${callArgs(d, noCursor)}))`);
}

function classOf(ns: string[], isAsync: boolean): string {
  return `${isAsync ? 'Async' : ''}${pascal(...ns)}Resource`;
}

function emitClass(
  out: string[],
  ns: string[],
  node: Node,
  shapes: Map<string, MethodShape>,
  isAsync: boolean,
): void {
  const children = [...node.children].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  for (const [k, child] of children)
    if (child.children.size > 0) emitClass(out, [...ns, k], child, shapes, isAsync);
  const mixin = ns.length === 1 ? MIXINS[ns[0]!] : undefined;
  const lines: string[] = [];
  lines.push('');
  lines.push('');
  lines.push(`class ${classOf(ns, isAsync)}${mixin ? `(${isAsync ? 'Async' : ''}${mixin})` : ''}:`);
  lines.push(docstring(`Operations under \`${ns.join('.')}\`.`, '    '));
  lines.push('');
  lines.push(`    def __init__(self, client: ${isAsync ? 'AsyncCaller' : 'SyncCaller'}) -> None:`);
  lines.push('        self._client = client');
  for (const [k, child] of children) {
    if (child.children.size > 0)
      lines.push(`        self.${snake(k)} = ${classOf([...ns, k], isAsync)}(client)`);
  }
  if (node.op) emitMethod(lines, '__call__', node.op, shapes.get(node.op.entry.id)!, isAsync);
  for (const [k, child] of children) {
    if (child.children.size === 0 && child.op)
      emitMethod(lines, snake(k), child.op, shapes.get(child.op.entry.id)!, isAsync);
  }
  out.push(lines.join('\n'));
}

/** The resource classes (`nube.files`, `nube.sandboxes.files`, ...) for the sync and the asyncio client. */
export function buildResources(ops: OpDoc[], types: TypeEmitter): { sync: string; async: string } {
  const root: Node = { children: new Map() };
  const shapes = new Map<string, MethodShape>();
  for (const d of [...ops].sort((a, b) => (a.entry.id < b.entry.id ? -1 : 1))) {
    if (d.entry.alias || HAND_WRITTEN.has(d.entry.id)) continue;
    shapes.set(d.entry.id, shapeOf(d, types));
    let node = root;
    for (const seg of d.entry.id.split('.')) {
      let next = node.children.get(seg);
      if (!next) {
        next = { children: new Map() };
        node.children.set(seg, next);
      }
      node = next;
    }
    node.op = d;
  }
  const module = (isAsync: boolean) => {
    const out: string[] = [];
    out.push(
      `${PY_HEADER}"""The ${isAsync ? 'asyncio ' : ''}client's resources: one method per operation of the registry."""`,
    );
    out.push('from __future__ import annotations');
    out.push('');
    out.push('from typing import Any, AsyncIterator, Dict, Iterator, List, Literal, Optional, Union, cast');
    out.push('');
    out.push(`from ._caller import ${isAsync ? 'AsyncCaller' : 'SyncCaller'}, RequestOptions`);
    out.push(`from ._omit import OMIT`);
    out.push(
      isAsync
        ? 'from ._aio_mixins import AsyncFilesMixin, AsyncSandboxesMixin'
        : 'from ._mixins import FilesMixin, SandboxesMixin',
    );
    out.push(
      isAsync
        ? 'from ._aio_streams import AsyncBinaryResponse, AsyncEventStream'
        : 'from ._streams import BinaryResponse, EventStream',
    );
    out.push('from .types import *  # noqa: F403');
    const top = [...root.children].sort((a, b) => (a[0] < b[0] ? -1 : 1));
    for (const [k, child] of top) emitClass(out, [k], child, shapes, isAsync);
    const lines = [
      '',
      '',
      `class ${isAsync ? 'Async' : ''}Resources:`,
      docstring('Every area of the API as an attribute (`nube.sandboxes`, `nube.files`, ...).', '    '),
      '',
    ];
    lines.push(`    def __init__(self, client: ${isAsync ? 'AsyncCaller' : 'SyncCaller'}) -> None:`);
    for (const [k] of top) lines.push(`        self.${snake(k)} = ${classOf([k], isAsync)}(client)`);
    out.push(lines.join('\n'));
    return `${out.join('\n')}\n`;
  };
  return { sync: module(false), async: module(true) };
}
