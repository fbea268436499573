import type { OPERATIONS, OperationTypes } from './operations.gen.js';
import type { EventStream } from './sse.js';

/** Every operation id of the API (`account.get`, `sandboxes.create`, ...). */
export type OperationId = keyof OperationTypes & keyof typeof OPERATIONS;

type T<K extends OperationId> = OperationTypes[K];

/** Required when the value has required keys, optional when it has none, absent when the operation has none. */
type Field<N extends string, V> = [V] extends [never]
  ? { [P in N]?: never }
  : object extends V
    ? { [P in N]?: V }
    : { [P in N]: V };

type Simplify<X> = { [P in keyof X]: X[P] } & {};

/** The request of an operation for `nube.call(id, input)`: path params, query and JSON body. */
export type OpInput<K extends OperationId> = Simplify<
  Field<'params', T<K>['params']> & Field<'query', T<K>['query']> & Field<'body', T<K>['body']>
>;

/** What a call resolves to: the JSON body, an SSE event stream, or the raw Response (PDF and other bytes). */
export type OpOutput<K extends OperationId> = (typeof OPERATIONS)[K]['contentType'] extends 'application/json'
  ? T<K>['response']
  : (typeof OPERATIONS)[K]['contentType'] extends 'text/event-stream'
    ? EventStream
    : Response;

/** Per-request options, always the last argument. */
export interface RequestOptions {
  signal?: AbortSignal;
  /** Overrides the client's timeoutMs for this request (0 disables it). */
  timeoutMs?: number;
  /** Overrides the client's maxRetries for this request (idempotent calls only). */
  maxRetries?: number;
  headers?: Record<string, string>;
}

/** Arguments that make the input optional when nothing in it is required. */
export type InputArgs<I> = object extends I
  ? [input?: I, options?: RequestOptions]
  : [input: I, options?: RequestOptions];

type Style<K extends OperationId> = (typeof OPERATIONS)[K]['style'];

/** The last argument of an ergonomic method (after its path params), per the operation's input style. */
export type NsInput<K extends OperationId> =
  Style<K> extends 'query'
    ? T<K>['query']
    : Style<K> extends 'body'
      ? T<K>['body']
      : Style<K> extends 'merged'
        ? T<K>['body'] & T<K>['query']
        : Style<K> extends 'split'
          ? Simplify<Field<'body', T<K>['body']> & Field<'query', T<K>['query']>>
          : never;

/** Rest arguments of an ergonomic method after its path params. */
export type NsRest<K extends OperationId> =
  Style<K> extends 'none' ? [options?: RequestOptions] : InputArgs<NsInput<K>>;
