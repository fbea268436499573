// Payment providers, for every area that takes payments (payment links, machines' checkout): where a
// payer is sent to pay, and how nube learns the payment went through. Stripe Checkout (the `stripe` package, its API at NUBE_STRIPE_API_URL) when a secret
// key is configured: a Checkout Session per visit, confirmed by Stripe's signed webhook; else nube's
// own checkout page, confirmed by the operator's key (a payment settled outside: a transfer, cash).
import type Stripe from 'stripe';
import type { PaymentsConfig } from './config-shape.js';
import { ApiError, errors } from './errors.js';

export interface CheckoutRequest {
  /** What is paid for, e.g. a payment link's id; comes back with the payment. */
  reference: string;
  /** The owner who is paid. */
  ownerId: string;
  amountCentavos: number;
  currency: 'MXN';
  description: string;
  /** Where the payer lands after paying, and after giving up. */
  successUrl: string;
  cancelUrl: string;
}

export interface HostedCheckout {
  /** The provider's page for this payment. */
  url: string;
  /** The provider's id of this checkout (a Stripe Checkout Session id): one payment at most per id. */
  sessionId: string;
}

/** A completed payment the provider reported: signed by it, so trusted. */
export interface ProviderPayment {
  sessionId: string;
  reference: string | null;
  amountCentavos: number;
  currency: string;
  email: string | null;
}

export interface PaymentProvider {
  readonly name: 'stripe' | 'builtin';
  /** A hosted page to send the payer to; null for the built-in page (nube serves it). */
  createCheckout(r: CheckoutRequest): Promise<HostedCheckout | null>;
  /**
   * The payment a provider's webhook call reports, once its signature is checked; null for an event
   * that reports no completed payment. A bad signature throws 400 `BadSignature`.
   */
  paymentFromWebhook(rawBody: Buffer, signature: string | undefined): Promise<ProviderPayment | null>;
}

/** nube's own page: nothing hosted elsewhere, no webhook. */
export class BuiltinPayments implements PaymentProvider {
  readonly name = 'builtin';
  async createCheckout(): Promise<null> {
    return null;
  }
  async paymentFromWebhook(): Promise<null> {
    throw errors.notFound('payment provider webhook');
  }
}

export class StripePayments implements PaymentProvider {
  readonly name = 'stripe';
  private client: Promise<Stripe> | undefined;

  constructor(private readonly c: NonNullable<PaymentsConfig['stripe']>) {}

  /** The `stripe` package is loaded on the first checkout or webhook, not at every start. */
  private stripe(): Promise<Stripe> {
    this.client ??= import('stripe').then(({ default: StripeClient }) => {
      const u = new URL(this.c.apiUrl);
      return new StripeClient(this.c.secretKey, {
        host: u.hostname,
        port: u.port || (u.protocol === 'https:' ? 443 : 80),
        protocol: u.protocol === 'https:' ? 'https' : 'http',
        maxNetworkRetries: 2,
        timeout: 20_000,
        telemetry: false,
      });
    });
    return this.client;
  }

  async createCheckout(r: CheckoutRequest): Promise<HostedCheckout> {
    try {
      const s = await (await this.stripe()).checkout.sessions.create(
        {
          mode: 'payment',
          line_items: [
            {
              quantity: 1,
              price_data: {
                currency: r.currency.toLowerCase(),
                unit_amount: r.amountCentavos,
                product_data: { name: r.description },
              },
            },
          ],
          success_url: r.successUrl,
          cancel_url: r.cancelUrl,
          client_reference_id: r.reference,
          metadata: { nube_reference: r.reference, nube_owner: r.ownerId },
        },
        // The package sends one idempotency key for its own retries of this create.
      );
      if (!s.url) throw new Error('Stripe answered a Checkout Session without a url');
      return { url: s.url, sessionId: s.id };
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      throw errors.unavailable(`the payment provider (Stripe) refused or did not answer: ${msg}`, 30);
    }
  }

  async paymentFromWebhook(rawBody: Buffer, signature: string | undefined): Promise<ProviderPayment | null> {
    if (!this.c.webhookSecret)
      throw new ApiError(
        503,
        'WebhookDisabled',
        'Stripe webhooks are not accepted here: NUBE_STRIPE_WEBHOOK_SECRET is not set',
      );
    let event: Stripe.Event;
    try {
      event = await (await this.stripe()).webhooks.constructEventAsync(rawBody, signature ?? '', this.c.webhookSecret);
    } catch (e) {
      throw errors.badRequest(
        `the Stripe-Signature does not match this body: ${(e as Error).message}`,
        undefined,
        'BadSignature',
      );
    }
    // A card payment is paid when the session completes; a delayed method (OXXO, SPEI) when it succeeds later.
    const done =
      event.type === 'checkout.session.completed' ||
      event.type === 'checkout.session.async_payment_succeeded';
    if (!done) return null;
    const s = event.data.object as Stripe.Checkout.Session;
    if (s.payment_status !== 'paid') return null;
    return {
      sessionId: s.id,
      reference: s.metadata?.nube_reference ?? s.client_reference_id ?? null,
      amountCentavos: s.amount_total ?? 0,
      currency: (s.currency ?? '').toUpperCase(),
      email: s.customer_details?.email ?? null,
    };
  }
}

export function paymentProvider(c: PaymentsConfig): PaymentProvider {
  return c.stripe ? new StripePayments(c.stripe) : new BuiltinPayments();
}

/** Records a paid checkout its area started (once); null when the session is not one of its own. */
export type PaymentReceiver = (pay: ProviderPayment) => Promise<{ recorded: boolean } | null>;

/**
 * The one provider every area takes payments through, and the areas that record what the provider's
 * webhook reports paid: each asks its own checkouts, the first that knows the session records it.
 */
export class Payments {
  readonly provider: PaymentProvider;
  private readonly receivers: PaymentReceiver[] = [];

  constructor(c: PaymentsConfig, private readonly log: { warn(o: object, msg: string): void }) {
    this.provider = paymentProvider(c);
  }

  receive(r: PaymentReceiver): void {
    this.receivers.push(r);
  }

  async paid(pay: ProviderPayment): Promise<{ recorded: boolean }> {
    for (const r of this.receivers) {
      const out = await r(pay);
      if (out) return out;
    }
    // Not one of nube's checkouts (another integration on the same Stripe account): nothing to do.
    this.log.warn({ session: pay.sessionId, reference: pay.reference }, 'payment webhook for a checkout nube did not start');
    return { recorded: false };
  }
}
