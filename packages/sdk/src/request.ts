import { ConnectionError, errorFromResponse, NubeError, TimeoutError } from './errors.js';
import { IDEMPOTENT_METHODS, retryDelayMs, sleep } from './retry.js';
import { OPERATIONS } from './operations.gen.js';
import { EventStream } from './sse.js';
import type { RequestOptions } from './types.js';

export interface Transport {
  apiKey: string | undefined;
  baseUrl: string;
  fetch: typeof fetch;
  timeoutMs: number;
  headers: Record<string, string>;
  /** Retries of an idempotent call answered 429 or 503. */
  maxRetries: number;
}

/** The untyped request: `{ params?, query?, body? }` as plain records. */
export interface RawInput {
  params?: Record<string, unknown>;
  query?: Record<string, unknown>;
  body?: unknown;
}

/** One row of the generated OPERATIONS table, widened for runtime use. */
export interface OpTableEntry {
  method: string;
  path: string;
  pathParams: readonly string[];
  query: readonly string[];
  body: 'none' | 'optional' | 'required';
  style: 'none' | 'query' | 'body' | 'merged' | 'split';
  success: number;
  contentType: string;
  implemented: boolean;
  ns: readonly string[] | null;
}

export const TABLE: Record<string, OpTableEntry> = OPERATIONS;

export function entryOf(operationId: string): OpTableEntry {
  const entry = TABLE[operationId];
  if (!entry) {
    throw new TypeError(
      `unknown nube operation "${operationId}"; known: ${Object.keys(OPERATIONS).join(', ')}`,
    );
  }
  return entry;
}

/** Serializes a query object: arrays repeat the key, objects go as JSON, null/undefined are left out. */
export function toQueryString(query: Record<string, unknown> | undefined): string {
  if (!query) return '';
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    for (const item of Array.isArray(v) ? v : [v]) {
      if (item === undefined || item === null) continue;
      qs.append(k, typeof item === 'object' ? JSON.stringify(item) : String(item));
    }
  }
  const s = qs.toString();
  return s ? `?${s}` : '';
}

export function fillPath(
  operationId: string,
  path: string,
  params: Record<string, unknown> | undefined,
): string {
  return path.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const v = params?.[name];
    if (v === undefined || v === null || v === '') {
      throw new TypeError(`${operationId}: path parameter "${name}" is required`);
    }
    return encodeURIComponent(String(v));
  });
}

/** Sends one operation and decodes its answer; throws a NubeError subclass for anything but 2xx. */
export async function send(
  t: Transport,
  operationId: string,
  input: RawInput = {},
  options: RequestOptions = {},
) {
  const entry = entryOf(operationId);
  const url =
    t.baseUrl.replace(/\/+$/, '') +
    fillPath(operationId, entry.path, input.params) +
    toQueryString(input.query);
  const headers: Record<string, string> = { accept: `${entry.contentType}, application/json`, ...t.headers };
  if (t.apiKey) headers.authorization = `Bearer ${t.apiKey}`;
  let body: string | undefined;
  if (input.body !== undefined || entry.body === 'required') {
    body = JSON.stringify(input.body ?? {});
    headers['content-type'] = 'application/json';
  }
  Object.assign(headers, options.headers);

  // timeoutMs bounds the whole call, retries and the waits between them included.
  const timeoutMs = options.timeoutMs ?? t.timeoutMs;
  const deadline = timeoutMs > 0 ? Date.now() + timeoutMs : Number.POSITIVE_INFINITY;
  const retries = IDEMPOTENT_METHODS.has(entry.method) ? Math.max(0, options.maxRetries ?? t.maxRetries) : 0;
  const request: Attempt = {
    t,
    operationId,
    entry,
    url,
    init: { method: entry.method, headers, body },
    options,
  };
  for (let attempt = 0; ; attempt++) {
    try {
      return await sendOnce(request, timeoutMs, deadline);
    } catch (err) {
      if (!(err instanceof NubeError) || attempt >= retries) throw err;
      const wait = retryDelayMs(err, attempt);
      if (wait === undefined || Date.now() + wait >= deadline) throw err;
      await sleep(wait, options.signal);
    }
  }
}

interface Attempt {
  t: Transport;
  operationId: string;
  entry: OpTableEntry;
  url: string;
  init: { method: string; headers: Record<string, string>; body: string | undefined };
  options: RequestOptions;
}

async function sendOnce(
  { t, operationId, entry, url, init, options }: Attempt,
  timeoutMs: number,
  deadline: number,
) {
  const controller = new AbortController();
  let timedOut = false;
  const timer = Number.isFinite(deadline)
    ? setTimeout(
        () => {
          timedOut = true;
          controller.abort();
        },
        Math.max(0, deadline - Date.now()),
      )
    : undefined;
  const onAbort = () => controller.abort(options.signal?.reason);
  options.signal?.addEventListener('abort', onAbort, { once: true });
  if (options.signal?.aborted) controller.abort(options.signal.reason);
  const done = () => {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', onAbort);
  };

  const fail = (err: unknown): never => {
    done();
    if (err instanceof NubeError) throw err;
    if (timedOut) {
      throw new TimeoutError(`${operationId} took longer than ${timeoutMs} ms; raise timeoutMs or retry.`, {
        status: 0,
        operationId,
      });
    }
    if (options.signal?.aborted) throw err;
    const cause =
      err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err);
    throw new ConnectionError(
      `${operationId}: could not reach nube at ${t.baseUrl} (${cause}); is the server running?`,
      {
        status: 0,
        operationId,
      },
    );
  };

  let res: Response;
  try {
    res = await t.fetch(url, { ...init, signal: controller.signal });
  } catch (err) {
    return fail(err);
  }
  try {
    if (!res.ok) {
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        // not JSON: keep the text
      }
      throw errorFromResponse(operationId, res.status, parsed, res.headers);
    }
    if (entry.contentType === 'application/json') {
      const text = await res.text();
      done();
      return text ? JSON.parse(text) : undefined;
    }
    // Streams and bytes: the caller reads them; only the wait for headers was bounded by the timeout.
    done();
    return entry.contentType === 'text/event-stream' ? new EventStream(res) : res;
  } catch (err) {
    return fail(err);
  }
}
