import { createHash } from 'node:crypto';
import { ApiError, errors } from '../../platform/errors.js';
import { type OutboundClient, toOutboundError } from '../../platform/outbound.js';

export interface EmbeddingsConfig {
  baseUrl: string;
  apiKey: string;
  model: string;
  /**
   * The operator's endpoint (NUBE_FILES_AI_*): its origin is trusted, it may be on loopback. An
   * account's own endpoint is not: every connection and redirect is checked by the outbound guard.
   */
  operator?: boolean;
}

const TIMEOUT_MS = 30_000;
/** OpenAI accepts up to 2048 inputs per request; smaller batches keep a slow provider's requests short. */
export const EMBED_BATCH = 64;

/** The text a file is embedded from: what a person would search by (name, type, metadata). */
export function embeddingText(f: { name: string; content_type: string; metadata: string }): string {
  const meta = f.metadata === '{}' ? '' : `\n${f.metadata}`;
  return `${f.name}\n${f.content_type}${meta}`;
}

/** Changes when the text or the model changes, so stale vectors are recomputed. */
export function embeddingHash(text: string, model: string): string {
  return createHash('sha256').update(model).update('\0').update(text).digest('hex');
}

/** Client of an OpenAI-compatible `POST {base}/embeddings` endpoint (`{ model, input }` -> `{ data }`). */
export async function embed(client: OutboundClient, cfg: EmbeddingsConfig, inputs: string[]): Promise<number[][]> {
  let body: { data?: { embedding?: unknown; index?: number }[] } | null;
  try {
    const res = await client.request(`${cfg.baseUrl}/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${cfg.apiKey}` },
      body: JSON.stringify({ model: cfg.model, input: inputs }),
      timeoutMs: TIMEOUT_MS,
      maxRedirects: 3,
      ...(cfg.operator ? { trustedOrigin: cfg.baseUrl } : {}),
    });
    if (res.status < 200 || res.status >= 300) {
      res.discard();
      throw embeddingsUnavailable(`embeddings endpoint answered ${res.status}`);
    }
    body = (await res.body.json().catch(() => null)) as typeof body;
  } catch (err) {
    if (err instanceof ApiError) throw err;
    const e = toOutboundError(err);
    const why = e.code === 'OutboundBlocked' ? `refused: ${e.message}` : `unreachable: ${e.message}`;
    throw embeddingsUnavailable(`embeddings endpoint ${why}`);
  }
  const data = body?.data;
  if (!Array.isArray(data) || data.length !== inputs.length) throw embeddingsUnavailable('embeddings endpoint gave a malformed answer');
  // `index` orders the answer when present (OpenAI sends it); otherwise the order is the input order.
  const out: number[][] = new Array(inputs.length);
  data.forEach((d, i) => {
    const v = d.embedding;
    if (!Array.isArray(v) || v.length === 0 || !v.every((x) => typeof x === 'number')) {
      throw embeddingsUnavailable('embeddings endpoint gave a malformed vector');
    }
    out[typeof d.index === 'number' ? d.index : i] = v as number[];
  });
  return out;
}

function embeddingsUnavailable(message: string): ApiError {
  return errors.unavailable(message);
}

export function cosine(a: number[], b: number[]): number {
  if (a.length !== b.length) return -1;
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return na === 0 || nb === 0 ? 0 : dot / Math.sqrt(na * nb);
}
