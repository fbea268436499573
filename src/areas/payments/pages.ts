// The payer's side of a payment link, outside the registry: the link's page, the step to the hosted
// checkout, nube's own confirmation (no hosted provider), the thank-you page, and the provider's
// webhook. The link's token is the only credential a payer holds; it can pay, never read anything.
import type { FastifyInstance, FastifyReply } from 'fastify';
import { ApiError } from '../../platform/errors.js';
import type { RateLimiter } from '../../platform/limits.js';
import type { Payments } from '../../platform/payments.js';
import type { PaymentLinksService } from './service.js';

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const mxn = (centavos: number) =>
  `$${(centavos / 100).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })} MXN`;

/** Starting a hosted checkout costs a call to the provider: a few per minute per address. */
const CHECKOUT_RULE = { points: 20, windowSeconds: 60 };

function html(reply: FastifyReply, status: number, title: string, body: string) {
  return (
    reply
      .code(status)
      .type('text/html; charset=utf-8')
      .header('cache-control', 'no-store')
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      // No script: the forms post as forms.
      .header(
        'content-security-policy',
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' https:; frame-ancestors 'none'",
      )
      .send(
        `<!doctype html><html lang="en"><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>${esc(title)}</title>` +
          `<body style="font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem">${body}</body></html>`,
      )
  );
}

function problem(reply: FastifyReply, e: unknown) {
  if (!(e instanceof ApiError)) throw e;
  if (e.headers) for (const [k, v] of Object.entries(e.headers)) reply.header(k, v);
  return html(reply, e.status, 'Payment', `<h1>Payment</h1><p>${esc(e.message)}.</p>`);
}

export function installPaymentPages(
  app: FastifyInstance,
  links: () => PaymentLinksService,
  payments: Payments,
  limiter: RateLimiter,
): void {
  app.get<{ Params: { token: string } }>('/pay/:token', async (req, reply) => {
    const s = links();
    const link = await s.byToken(req.params.token);
    if (!link)
      return html(
        reply,
        404,
        'Payment',
        '<h1>Payment</h1><p>There is no payment link here (it may have been deleted).</p>',
      );
    const v = s.view(link);
    const head = `<h1>${esc(v.description)}</h1><p style="font-size:1.5rem"><strong>${mxn(v.amountCentavos)}</strong></p>`;
    if (v.status === 'completed')
      return html(reply, 200, v.description, `${head}<p>This link has been paid.</p>`);
    const action = `/pay/${encodeURIComponent(req.params.token)}`;
    const form =
      s.provider.name === 'stripe'
        ? `<form method="post" action="${action}/checkout"><button style="font-size:1.1rem">Pay</button></form>`
        : `<p>This payment is settled with the operator of this nube (a transfer, cash); they confirm it here.</p>
<form method="post" action="${action}/confirm"><label>Operator key <input type="password" name="operatorKey" autocomplete="off"></label>
<button>Confirm payment</button></form>`;
    return html(reply, 200, v.description, head + form);
  });

  app.get<{ Params: { token: string } }>('/pay/:token/thanks', async (req, reply) => {
    const link = await links().byToken(req.params.token);
    if (link?.redirect_url) return reply.code(303).header('location', link.redirect_url).send();
    return html(reply, 200, 'Thank you', '<h1>Thank you</h1><p>Your payment was received.</p>');
  });

  void app.register(async (scope) => {
    // Forms post urlencoded; the provider's webhook must be read as the exact bytes it signed.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: 256 * 1024 }, (_req, body, done) =>
      done(null, body),
    );

    scope.post<{ Params: { token: string } }>('/pay/:token/checkout', async (req, reply) => {
      const r = await limiter.consume(`pay-checkout:${req.ip}`, CHECKOUT_RULE);
      if (!r.allowed) {
        reply.header('retry-after', String(r.retryAfterSec));
        return html(
          reply,
          429,
          'Payment',
          '<h1>Payment</h1><p>Too many attempts from your address; try again in a minute.</p>',
        );
      }
      try {
        const { url } = await links().startCheckout(req.params.token);
        return reply.code(303).header('location', url).send();
      } catch (e) {
        return problem(reply, e);
      }
    });

    scope.post<{ Params: { token: string }; Body: Buffer | undefined }>(
      '/pay/:token/confirm',
      async (req, reply) => {
        const key = new URLSearchParams(req.body?.toString('utf8') ?? '').get('operatorKey') ?? undefined;
        try {
          const p = await links().confirmByOperator(req.params.token, key);
          return html(
            reply,
            200,
            'Paid',
            `<h1>Paid</h1><p>Payment <code>${esc(p.id)}</code> of ${mxn(p.amountCentavos)} recorded.</p>`,
          );
        } catch (e) {
          return problem(reply, e);
        }
      },
    );

    scope.post<{ Body: Buffer | undefined }>('/payments/stripe/webhook', async (req, reply) => {
      if (payments.provider.name !== 'stripe')
        return reply.code(404).send({ error: 'Stripe is not configured here', code: 'NotFound' });
      const sig = req.headers['stripe-signature'];
      try {
        const pay = await payments.provider.paymentFromWebhook(
          req.body ?? Buffer.alloc(0),
          Array.isArray(sig) ? sig[0] : sig,
        );
        // A payment link's or a machine order's: the area that started the checkout records it.
        const out = pay ? await payments.paid(pay) : { recorded: false };
        return reply.send({ received: true, recorded: out.recorded });
      } catch (e) {
        if (e instanceof ApiError) return reply.code(e.status).send(e.toBody());
        throw e;
      }
    });
  });
}
