// Payment providers. A provider turns an order into a page where it is paid and, when it is, calls
// back the machines service (confirmOrder). The built-in provider is that page, served by nube itself:
// an operator who settles payment outside (a transfer, cash) opens it and confirms with the operator
// key (NUBE_CHECKOUT_OPERATOR_KEY). A hosted provider (Stripe, Mercado Pago) would implement the same
// interface and confirm from its own webhook route.
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../../platform/errors.js';

export interface CheckoutOrder {
  token: string;
  amountCentavos: number;
  description: string;
}

export interface PaymentProvider {
  readonly name: string;
  checkoutUrl(order: CheckoutOrder): string;
}

export class BuiltinCheckout implements PaymentProvider {
  readonly name = 'builtin';
  constructor(private readonly publicUrl: () => string) {}

  checkoutUrl(order: CheckoutOrder): string {
    return `${this.publicUrl().replace(/\/$/, '')}/checkout/${order.token}`;
  }
}

export interface CheckoutBackend {
  describeOrder(token: string): Promise<{ description: string; amountCentavos: number; status: string; machineId: string | null } | null>;
  confirmOrder(token: string, operatorKey: string | undefined): Promise<{ machineId: string | null; alreadyPaid: boolean }>;
}

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const mxn = (centavos: number) => `$${(centavos / 100).toFixed(2)} MXN`;

/** GET /checkout/{token}: the page; POST /checkout/{token}/confirm: the operator's confirmation. */
export function installCheckoutRoutes(app: FastifyInstance, backend: () => CheckoutBackend): void {
  app.get<{ Params: { token: string } }>('/checkout/:token', async (req, reply) => {
    const o = await backend().describeOrder(req.params.token);
    if (!o) return reply.code(404).type('text/html; charset=utf-8').send('<!doctype html><p>Unknown checkout.</p>');
    const paid = o.status === 'paid';
    const body = paid
      ? `<p>Paid. Machine <code>${esc(o.machineId ?? 'pending')}</code>.</p>`
      : `<form id="f"><label>Operator key <input type="password" name="k" autocomplete="off"></label>
<button>Confirm payment</button></form><p id="m"></p>
<script>document.getElementById('f').onsubmit=async(e)=>{e.preventDefault();
const r=await fetch(location.pathname+'/confirm',{method:'POST',headers:{'content-type':'application/json'},
body:JSON.stringify({operatorKey:e.target.k.value})});const j=await r.json();
document.getElementById('m').textContent=r.ok?'Paid: machine '+j.machineId:(j.error||'refused');};</script>`;
    return reply
      .type('text/html; charset=utf-8')
      .header('cache-control', 'no-store')
      .send(`<!doctype html><html lang="en"><meta charset="utf-8"><title>nube checkout</title>
<h1>nube checkout</h1><p>${esc(o.description)}</p><p><strong>${mxn(o.amountCentavos)}</strong></p>${body}</html>`);
  });

  app.post<{ Params: { token: string }; Body: { operatorKey?: unknown } | undefined }>('/checkout/:token/confirm', async (req, reply) => {
    const key = typeof req.body?.operatorKey === 'string' ? req.body.operatorKey : undefined;
    try {
      const r = await backend().confirmOrder(req.params.token, key);
      return reply.send({ ok: true, machineId: r.machineId, alreadyPaid: r.alreadyPaid });
    } catch (e) {
      if (e instanceof ApiError) return reply.code(e.status).send({ error: e.message, code: e.code });
      throw e;
    }
  });
}
