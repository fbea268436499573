import type { Namespaces } from './operations.gen.js';
import { type OpTableEntry, type RawInput, TABLE } from './request.js';
import type { RequestOptions } from './types.js';

type Sender = (operationId: string, input: RawInput, options: RequestOptions | undefined) => Promise<unknown>;

/** Turns positional path params + the last input object into `{ params, query, body }` by the operation's style. */
export function toRawInput(
  entry: OpTableEntry,
  args: unknown[],
): { input: RawInput; options: RequestOptions | undefined } {
  const names = entry.pathParams;
  const params: Record<string, unknown> = {};
  names.forEach((name, i) => {
    params[name] = args[i];
  });
  const input: RawInput = names.length ? { params } : {};
  if (entry.style === 'none') return { input, options: args[names.length] as RequestOptions | undefined };
  const last = args[names.length] as Record<string, unknown> | undefined;
  const options = args[names.length + 1] as RequestOptions | undefined;
  if (last === undefined) return { input, options };
  switch (entry.style) {
    case 'query':
      input.query = last;
      break;
    case 'body':
      input.body = last;
      break;
    case 'split':
      input.body = last.body;
      input.query = last.query as Record<string, unknown> | undefined;
      break;
    case 'merged': {
      const queryNames = new Set<string>(entry.query);
      const query: Record<string, unknown> = {};
      const body: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(last)) (queryNames.has(k) ? query : body)[k] = v;
      input.query = query;
      if (Object.keys(body).length > 0 || entry.body === 'required') input.body = body;
      break;
    }
  }
  return { input, options };
}

interface Node {
  fn?: (...args: unknown[]) => Promise<unknown>;
  children: Map<string, Node>;
}

/** Builds `{ account: { get(), keys: { create() } }, ... }` from the generated table. */
export function buildNamespaces(sender: Sender): Namespaces {
  const root: Node = { children: new Map() };
  for (const [id, entry] of Object.entries(TABLE)) {
    if (!entry.ns) continue;
    let node = root;
    for (const seg of entry.ns) {
      let next = node.children.get(seg);
      if (!next) {
        next = { children: new Map() };
        node.children.set(seg, next);
      }
      node = next;
    }
    node.fn = (...args: unknown[]) => {
      const { input, options } = toRawInput(entry, args);
      return sender(id, input, options);
    };
  }
  const materialize = (node: Node): unknown => {
    const target: Record<string, unknown> = node.fn ? (node.fn as unknown as Record<string, unknown>) : {};
    for (const [k, child] of node.children) {
      // defineProperty: a function's own `name`/`length` are not writable by assignment.
      Object.defineProperty(target, k, {
        value: materialize(child),
        enumerable: true,
        configurable: true,
        writable: true,
      });
    }
    return target;
  };
  return materialize(root) as Namespaces;
}
