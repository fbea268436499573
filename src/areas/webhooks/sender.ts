// One HTTP POST of a signed delivery. Keep-alive agents (a receiver usually gets many deliveries) whose
// `lookup` is the outbound guard's safeLookup, so a name is checked at connect time and the socket goes
// to the address that was checked; IP literals skip lookup, so they are checked before each request.
import { Agent as HttpAgent, type IncomingMessage, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { hmacHex } from '../../platform/crypto.js';
import { type AllowList, assertPublicUrl, safeLookup } from '../../platform/outbound.js';

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
  private readonly http: HttpAgent;
  private readonly https: HttpsAgent;

  constructor(
    private readonly allow: AllowList,
    private readonly timeoutMs: number,
  ) {
    const lookup = safeLookup(allow) as never;
    const opts = { keepAlive: true, maxSockets: 256, maxFreeSockets: 64, scheduling: 'lifo' as const, lookup };
    this.http = new HttpAgent(opts);
    this.https = new HttpsAgent(opts);
  }

  async send(i: SendInput): Promise<SendResult> {
    const started = performance.now();
    const done = (r: Omit<SendResult, 'durationMs'>): SendResult => ({
      ...r,
      durationMs: Math.round((performance.now() - started) * 10) / 10,
    });
    try {
      const { url } = await assertPublicUrl(i.url, this.allow, { dns: false });
      const timeout = AbortSignal.timeout(this.timeoutMs);
      const signal = i.signal ? AbortSignal.any([i.signal, timeout]) : timeout;
      const headers = {
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(i.body)),
        'user-agent': 'nube-webhooks/1',
        'x-service-signature': signature(i.secret, i.body),
        'x-service-delivery': i.deliveryId,
        'x-service-event': i.event,
        'x-service-attempt': String(i.attempt),
        'x-service-timestamp': String(Math.floor(Date.now() / 1000)),
      };
      const res = await this.post(url, headers, i.body, signal);
      const ok = res.status >= 200 && res.status < 300;
      return done({ statusCode: res.status, error: ok ? null : `HTTP ${res.status}`, response: res.text });
    } catch (err) {
      const e = err as Error;
      const timedOut = e.name === 'TimeoutError' || (e.name === 'AbortError' && !i.signal?.aborted);
      const message = timedOut ? `timeout after ${this.timeoutMs} ms` : e.message || String(err);
      return done({ statusCode: null, error: message.slice(0, 500), response: null });
    }
  }

  private post(url: URL, headers: Record<string, string>, body: string, signal: AbortSignal) {
    const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const agent = url.protocol === 'https:' ? this.https : this.http;
    return new Promise<{ status: number; text: string | null }>((resolve, reject) => {
      const req = request(url, { method: 'POST', headers, agent, signal }, (res: IncomingMessage) => {
        const kept: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          if (size < RESPONSE_KEEP) kept.push(chunk);
          size += chunk.length;
          if (size > RESPONSE_MAX) res.destroy();
        });
        const finish = () => {
          const text = Buffer.concat(kept).subarray(0, RESPONSE_KEEP).toString('utf8');
          resolve({ status: res.statusCode ?? 0, text: text || null });
        };
        res.on('end', finish);
        res.on('close', finish);
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  close(): void {
    this.http.destroy();
    this.https.destroy();
  }
}
