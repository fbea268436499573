// One HTTP POST of a signed delivery, through the platform's guarded client (platform/outbound.ts: the
// address is checked before sending and at connect time; keep-alive connections per receiver).
// Redirects are not followed: a 3xx is a failed attempt.
import { hmacHex } from '../../platform/crypto.js';
import { type OutboundClient, toOutboundError } from '../../platform/outbound.js';

/** Bytes of the receiver's answer kept for the deliveries list; the rest is read and dropped. */
const RESPONSE_KEEP = 512;
/** A receiver streaming more than this is cut off (its socket is destroyed, not reused). */
const RESPONSE_MAX = 64 * 1024;

export interface SendInput {
  url: string;
  body: string;
  secret: string;
  deliveryId: string;
  event: string;
  attempt: number;
  signal?: AbortSignal;
}

export interface SendResult {
  statusCode: number | null;
  durationMs: number;
  error: string | null;
  response: string | null;
}

/** `sha256=<hex>`: HMAC-SHA256 of the raw body keyed with the secret string as given (whsec_ included). */
export const signature = (secret: string, body: string): string => `sha256=${hmacHex(secret, body)}`;

export class WebhookSender {
  constructor(
    private readonly client: OutboundClient,
    private readonly timeoutMs: number,
  ) {}

  async send(i: SendInput): Promise<SendResult> {
    const started = performance.now();
    const done = (r: Omit<SendResult, 'durationMs'>): SendResult => ({
      ...r,
      durationMs: Math.round((performance.now() - started) * 10) / 10,
    });
    try {
      const res = await this.client.request(i.url, {
        method: 'POST',
        signal: i.signal,
        timeoutMs: this.timeoutMs,
        body: i.body,
        propagateTrace: true,
        headers: {
          'content-type': 'application/json',
          'user-agent': 'nube-webhooks/1',
          'x-service-signature': signature(i.secret, i.body),
          'x-service-delivery': i.deliveryId,
          'x-service-event': i.event,
          'x-service-attempt': String(i.attempt),
          'x-service-timestamp': String(Math.floor(Date.now() / 1000)),
        },
      });
      const text = await readKept(res.body as AsyncIterable<Buffer> & { destroy(): void });
      const ok = res.status >= 200 && res.status < 300;
      return done({ statusCode: res.status, error: ok ? null : `HTTP ${res.status}`, response: text });
    } catch (err) {
      const e = toOutboundError(err);
      const message = e.code === 'OutboundTimeout' ? `timeout after ${this.timeoutMs} ms` : e.message;
      return done({ statusCode: null, error: message.slice(0, 500), response: null });
    }
  }
}

/** The first RESPONSE_KEEP bytes of the receiver's answer as text; past RESPONSE_MAX the stream is dropped. */
async function readKept(body: AsyncIterable<Buffer> & { destroy(): void }): Promise<string | null> {
  const kept: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      if (size < RESPONSE_KEEP) kept.push(chunk);
      size += chunk.length;
      if (size > RESPONSE_MAX) break;
    }
  } catch {
    // The receiver answered and then broke off (or the time ran out) while sending its body: the
    // status it sent stands, with what arrived of the body.
  }
  const text = Buffer.concat(kept).subarray(0, RESPONSE_KEEP).toString('utf8');
  return text || null;
}
