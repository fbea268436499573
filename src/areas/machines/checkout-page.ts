// The page of a machine's order, `/checkout/<token>` (the token is the capability to see it). Paid
// through the payment provider (platform/payments.ts): with Stripe the payer pays on Stripe Checkout
// and lands back here, where the order shows its machine once Stripe's webhook confirmed it; on
// nube's own page an operator who settled the payment outside (a transfer, cash) confirms it with the
// operator key (NUBE_CHECKOUT_OPERATOR_KEY).
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../../platform/errors.js';

export interface CheckoutBackend {
  describeOrder(
    token: string,
  ): Promise<{ description: string; amountCentavos: number; status: string; machineId: string | null; provider: string } | null>;
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
      : o.provider !== 'builtin'
        ? `<p>Waiting for ${o.provider === 'stripe' ? 'Stripe' : esc(o.provider)} to confirm the payment; this page shows the machine once it has.</p>`
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
