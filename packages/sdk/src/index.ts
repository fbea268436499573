import { buildNamespaces } from './namespaces.js';
import type { Namespaces } from './operations.gen.js';
import { OPERATIONS } from './operations.gen.js';
import { type RawInput, send, type Transport } from './request.js';
import { openTerminal, type Terminal, type TerminalOptions } from './terminal.js';
import type { InputArgs, OperationId, OpInput, OpOutput, RequestOptions } from './types.js';

export * from './errors.js';
export { EventStream, type SseEvent } from './sse.js';
export { Terminal, type TerminalOptions, type WebSocketClass, type WebSocketLike } from './terminal.js';
export type { InputArgs, NsInput, NsRest, OperationId, OpInput, OpOutput, RequestOptions } from './types.js';
export type { Namespaces, OperationTypes } from './operations.gen.js';
export type { components, operations, paths } from './api.gen.js';
export { OPERATIONS };

export interface NubeOptions {
  /** Owner API key (`nube_sk_live_...`); defaults to the NUBE_API_KEY environment variable. */
  apiKey?: string;
  /** Default `http://127.0.0.1:7070`, or NUBE_BASE_URL when set. */
  baseUrl?: string;
  /** A fetch implementation; default the global fetch. */
  fetch?: typeof fetch;
  /** Deadline of one call in ms, its retries included (0 = none). Default 60000. */
  timeoutMs?: number;
  /**
   * How often an idempotent call (GET, PUT, DELETE) answered 429 or 503 is sent again, after the
   * Retry-After the server gave or a growing backoff. POST is never retried. Default 2; 0 turns it off.
   */
  maxRetries?: number;
  /** Extra headers sent with every request. */
  headers?: Record<string, string>;
}

const env = (name: string): string | undefined =>
  (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.[name];

/** The generated namespaces (`nube.account.get()`), attached in the constructor from the operation table. */
export interface Nube extends Namespaces {}

/**
 * Typed client for nube. `nube.call('sandboxes.create', { body })` reaches every operation by id;
 * `nube.sandboxes.create(body)`, `nube.sandboxes.exec(id, body)` are the same calls with path params first.
 */
// biome-ignore lint/suspicious/noUnsafeDeclarationMerging: the interface above only declares what the constructor attaches
export class Nube {
  readonly baseUrl: string;
  readonly #transport: Transport;

  constructor(options: NubeOptions = {}) {
    this.baseUrl = options.baseUrl ?? env('NUBE_BASE_URL') ?? 'http://127.0.0.1:7070';
    // Bound: a browser's fetch called as a method of another object throws "Illegal invocation".
    const f = options.fetch ?? globalThis.fetch?.bind(globalThis);
    if (typeof f !== 'function')
      throw new TypeError('no fetch available: pass the fetch option (Node 18+ has one)');
    this.#transport = {
      apiKey: options.apiKey ?? env('NUBE_API_KEY'),
      baseUrl: this.baseUrl,
      fetch: f,
      timeoutMs: options.timeoutMs ?? 60_000,
      maxRetries: options.maxRetries ?? 2,
      headers: options.headers ?? {},
    };
    Object.assign(
      this,
      buildNamespaces((id, input, opts) => send(this.#transport, id, input, opts)),
    );
  }

  /**
   * Opens a shell with a PTY in a sandbox (the `sandboxes.terminal` WebSocket operation): write
   * keystrokes, `resize(rows, cols)`, read output with `onData`. In Node pass `{ WebSocket }` from `ws`.
   */
  openTerminal(sandboxId: string, options: TerminalOptions = {}): Terminal {
    return openTerminal(this.baseUrl, this.#transport.apiKey, sandboxId, options);
  }

  /** Calls any operation by its id with `{ params?, query?, body? }`; resolves to the typed success answer. */
  call<K extends OperationId>(operationId: K, ...args: InputArgs<OpInput<K>>): Promise<OpOutput<K>> {
    const [input, options] = args as [RawInput | undefined, RequestOptions | undefined];
    return send(this.#transport, operationId, input, options) as Promise<OpOutput<K>>;
  }
}
