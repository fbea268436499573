// Delivery attempts counted by outcome for GET /metrics: a sender that counts what it sends, so the
// delivery logic itself stays untouched.
import type { Counter } from 'prom-client';
import type { Metrics } from '../../platform/metrics.js';
import type { OutboundClient } from '../../platform/outbound.js';
import { type SendInput, type SendResult, WebhookSender } from './sender.js';

const OUTCOMES = ['success', 'http_error', 'timeout', 'network_error', 'interrupted'] as const;
export type AttemptOutcome = (typeof OUTCOMES)[number];

export function attemptOutcome(r: SendResult, interrupted: boolean): AttemptOutcome {
  if (r.statusCode !== null) return r.statusCode >= 200 && r.statusCode < 300 ? 'success' : 'http_error';
  if (interrupted) return 'interrupted';
  return r.error?.startsWith('timeout') ? 'timeout' : 'network_error';
}

export class MeteredSender extends WebhookSender {
  private readonly attempts: Counter<'outcome'>;

  constructor(client: OutboundClient, timeoutMs: number, metrics: Metrics) {
    super(client, timeoutMs);
    this.attempts = metrics.counter(
      'nube_webhook_delivery_attempts_total',
      'Webhook delivery attempts by outcome: success (2xx), http_error (other status), timeout, network_error ' +
        '(refused, DNS, TLS, blocked by the outbound guard), interrupted (nube stopping; the attempt runs again)',
      ['outcome'],
    );
    // Every outcome reads 0 from the start, so a rate over it exists before the first failure.
    for (const outcome of OUTCOMES) this.attempts.inc({ outcome }, 0);
  }

  override async send(i: SendInput): Promise<SendResult> {
    const r = await super.send(i);
    this.attempts.inc({ outcome: attemptOutcome(r, i.signal?.aborted === true) });
    return r;
  }
}
