// A local server speaking the part of Stripe's API nube uses: Checkout Sessions created from the
// form-encoded body the `stripe` package sends (its secret key checked), and a payer who pays one,
// after which the session's completion goes to nube's webhook signed as Stripe signs
// (`Stripe-Signature: t=<unix>,v1=<HMAC-SHA256 of "<t>.<body>" keyed with the endpoint's secret>`).
import { createHmac, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface StripeSession {
  id: string;
  object: 'checkout.session';
  mode: string;
  amount_total: number;
  currency: string;
  client_reference_id: string | null;
  metadata: Record<string, string>;
  success_url: string;
  cancel_url: string;
  url: string;
  status: 'open' | 'complete';
  payment_status: 'unpaid' | 'paid';
  customer_details: { email: string } | null;
}

export interface FakeStripe {
  url: string;
  secretKey: string;
  webhookSecret: string;
  sessions: Map<string, StripeSession>;
  /** Requests that asked for an idempotent create (the package's retries). */
  creates: number;
  /** Refuses the next creates with this HTTP status (a provider outage). */
  failNext: number | null;
  /** The payer pays: the session completes and Stripe calls `webhookUrl` with it, signed. */
  pay(
    sessionId: string,
    webhookUrl: string,
    opts?: { email?: string; secret?: string; type?: string },
  ): Promise<{ status: number; body: string; payload: string; signature: string }>;
  /** Sends a payload to the webhook as Stripe would, signed with `secret`. */
  send(
    webhookUrl: string,
    payload: string,
    secret?: string,
    timestamp?: number,
  ): Promise<{ status: number; body: string; signature: string }>;
  close(): Promise<void>;
}

export function stripeSignature(payload: string, secret: string, t = Math.floor(Date.now() / 1000)): string {
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${payload}`).digest('hex')}`;
}

/** Stripe's form encoding: `line_items[0][price_data][unit_amount]=...` into nested objects. */
function parseForm(body: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of new URLSearchParams(body)) {
    const path = k.replace(/\]/g, '').split('[');
    let o = out as Record<string, unknown>;
    for (const p of path.slice(0, -1)) {
      o[p] ??= {};
      o = o[p] as Record<string, unknown>;
    }
    o[path.at(-1)!] = v;
  }
  return out;
}

export async function startFakeStripe(): Promise<FakeStripe> {
  const secretKey = `sk_test_${randomBytes(12).toString('hex')}`;
  const webhookSecret = `whsec_${randomBytes(18)
    .toString('base64')
    .replace(/[^A-Za-z0-9]/g, 'x')}`;
  const sessions = new Map<string, StripeSession>();
  let base = '';
  const fake: FakeStripe = {
    url: '',
    secretKey,
    webhookSecret,
    sessions,
    creates: 0,
    failNext: null,
    async send(webhookUrl, payload, secret = webhookSecret, timestamp) {
      const signature = stripeSignature(payload, secret, timestamp);
      const r = await fetch(webhookUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-signature': signature },
        body: payload,
      });
      return { status: r.status, body: await r.text(), signature };
    },
    async pay(sessionId, webhookUrl, opts = {}) {
      const s = sessions.get(sessionId);
      if (!s) throw new Error(`no session ${sessionId}`);
      s.status = 'complete';
      s.payment_status = 'paid';
      s.customer_details = { email: opts.email ?? 'payer@example.com' };
      const payload = JSON.stringify({
        id: `evt_${randomBytes(12).toString('hex')}`,
        object: 'event',
        api_version: '2025-01-01',
        created: Math.floor(Date.now() / 1000),
        type: opts.type ?? 'checkout.session.completed',
        livemode: false,
        data: { object: s },
      });
      return { ...(await fake.send(webhookUrl, payload, opts.secret)), payload };
    },
    close: () => new Promise((r) => server.close(() => r())),
  };
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c.toString();
    });
    req.on('end', () => {
      const reply = (status: number, o: unknown) => {
        res.writeHead(status, {
          'content-type': 'application/json',
          'request-id': `req_${randomBytes(6).toString('hex')}`,
        });
        res.end(JSON.stringify(o));
      };
      if (req.headers.authorization !== `Bearer ${secretKey}`) {
        return reply(401, { error: { type: 'invalid_request_error', message: 'Invalid API Key provided' } });
      }
      if (req.method === 'POST' && req.url === '/v1/checkout/sessions') {
        fake.creates++;
        if (fake.failNext !== null) {
          const status = fake.failNext;
          fake.failNext = null;
          return reply(status, { error: { type: 'api_error', message: 'Stripe is having a bad day' } });
        }
        const f = parseForm(body) as {
          mode: string;
          success_url: string;
          cancel_url: string;
          client_reference_id?: string;
          metadata?: Record<string, string>;
          line_items: Record<
            string,
            {
              quantity: string;
              price_data: { currency: string; unit_amount: string; product_data: { name: string } };
            }
          >;
        };
        const item = f.line_items['0']!;
        const id = `cs_test_${randomBytes(16).toString('hex')}`;
        const s: StripeSession = {
          id,
          object: 'checkout.session',
          mode: f.mode,
          amount_total: Number(item.price_data.unit_amount) * Number(item.quantity),
          currency: item.price_data.currency,
          client_reference_id: f.client_reference_id ?? null,
          metadata: f.metadata ?? {},
          success_url: f.success_url,
          cancel_url: f.cancel_url,
          url: `${base}/c/pay/${id}`,
          status: 'open',
          payment_status: 'unpaid',
          customer_details: null,
        };
        sessions.set(id, s);
        return reply(200, s);
      }
      reply(404, {
        error: {
          type: 'invalid_request_error',
          message: `Unrecognized request URL (${req.method}: ${req.url})`,
        },
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  fake.url = base;
  return fake;
}
