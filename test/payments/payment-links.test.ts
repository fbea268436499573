// Payment links end to end: the owner makes a link, a payer opens it and is sent to Stripe Checkout (a
// local server speaking Stripe's API, test/payments/stripe-server.ts), pays, and Stripe's signed webhook
// records the payment once and sends payment.paid once, whatever it replays. Without Stripe, nube's own
// page takes the operator's confirmation, and a single-payment link takes one payment however many race.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { json, startNube, type TestNube } from '../helpers/server.js';
import { type Receiver, startReceiver } from '../webhooks/receiver.js';
import { type FakeStripe, startFakeStripe } from './stripe-server.js';

const OPERATOR_KEY = 'operator-key-0123456789abcdef';

function api(t: TestNube, key = t.ownerKey) {
  return async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${t.baseUrl}/api/v2${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: await json(r) };
  };
}

const tokenOf = (url: string) => new URL(url).pathname.split('/')[2]!;

describe.each(DIALECTS)('%s: payment links through Stripe Checkout', (dialect) => {
  let t: TestNube;
  let stripe: FakeStripe;
  let receiver: Receiver;
  let call: ReturnType<typeof api>;
  let other: ReturnType<typeof api>;
  let hookUrl: string;

  beforeAll(async () => {
    stripe = await startFakeStripe();
    receiver = await startReceiver();
    t = await startNube({
      dialect,
      env: {
        NUBE_STRIPE_SECRET_KEY: stripe.secretKey,
        NUBE_STRIPE_WEBHOOK_SECRET: stripe.webhookSecret,
        NUBE_STRIPE_API_URL: stripe.url,
        NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
      },
    });
    call = api(t);
    other = api(t, (await t.nube.services.account.createAccount({ name: 'other', plan: 'byte' })).secret);
    hookUrl = `${t.baseUrl}/payments/stripe/webhook`;
    expect((await call('POST', '/webhooks', { url: receiver.url, events: ['payment.paid'] })).status).toBe(
      201,
    );
  });
  afterAll(async () => {
    await t?.close();
    await receiver?.close();
    await stripe?.close();
  });

  it('refuses bad input with 400 and the field in issues', async () => {
    const bad = [
      { amountCentavos: 999, description: 'too little' },
      { amountCentavos: 10.5 * 100 + 0.5, description: 'not whole' },
      { amountCentavos: 5000, currency: 'USD', description: 'dollars' },
      { amountCentavos: 5000, description: '' },
      { amountCentavos: 5000, description: 'x', redirectUrl: 'javascript:alert(1)' },
      { amountCentavos: 5000, description: 'x', maxPayments: 0 },
      { amountCentavos: 5000, description: 'x', surprise: true },
      { amountCentavos: 5000, description: 'x', metadata: { big: 'y'.repeat(20_000) } },
    ];
    for (const b of bad) {
      const r = await call('POST', '/payment-links', b);
      expect(r.status, JSON.stringify(b)).toBe(400);
      expect(r.body.issues?.length, JSON.stringify(r.body)).toBeGreaterThan(0);
    }
  });

  it('a payer pays through Stripe Checkout; payment.paid is sent once, replays record nothing', async () => {
    const c = await call('POST', '/payment-links', {
      amountCentavos: 25_000,
      description: 'Consulta',
      metadata: { order: 'A-17' },
    });
    expect(c.status, JSON.stringify(c.body)).toBe(201);
    expect(c.body).toMatchObject({
      amountCentavos: 25_000,
      currency: 'MXN',
      maxPayments: 1,
      paymentsCount: 0,
      status: 'active',
      provider: 'stripe',
      metadata: { order: 'A-17' },
    });
    const token = tokenOf(c.body.url);
    expect(c.body.url).toBe(`${t.baseUrl}/pay/${token}`);

    const page = await fetch(c.body.url);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('Consulta');
    expect(html).toContain('$250.00 MXN');
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
    // Opening the page starts nothing at Stripe (link previews, crawlers): only the Pay button does.
    expect(stripe.sessions.size).toBe(0);

    const go = await fetch(`${c.body.url}/checkout`, { method: 'POST', redirect: 'manual' });
    expect(go.status).toBe(303);
    const session = [...stripe.sessions.values()][0]!;
    expect(go.headers.get('location')).toBe(session.url);
    expect(session).toMatchObject({
      amount_total: 25_000,
      currency: 'mxn',
      mode: 'payment',
      metadata: { nube_reference: c.body.id },
    });
    expect(session.success_url).toBe(`${c.body.url}/thanks`);

    const paid = await stripe.pay(session.id, hookUrl, { email: 'ana@example.com' });
    expect(paid.status, paid.body).toBe(200);
    expect(JSON.parse(paid.body)).toEqual({ received: true, recorded: true });
    // Stripe sends an event again when it is unsure it arrived: the same bytes, the same signature.
    const again = await stripe.send(hookUrl, paid.payload);
    expect(JSON.parse(again.body)).toEqual({ received: true, recorded: false });

    const [d] = await receiver.waitFor(1, 15_000);
    const event = JSON.parse(d!.raw);
    expect(event).toMatchObject({
      event: 'payment.paid',
      data: {
        kind: 'link',
        linkId: c.body.id,
        amountCentavos: 25_000,
        amountMxn: 250,
        currency: 'MXN',
        provider: 'stripe',
        providerReference: session.id,
        email: 'ana@example.com',
        metadata: { order: 'A-17' },
      },
    });
    await new Promise((r) => setTimeout(r, 500));
    expect(receiver.got.filter((x) => JSON.parse(x.raw).data?.linkId === c.body.id)).toHaveLength(1);

    const pays = await call('GET', `/payment-links/${c.body.id}/payments`);
    expect(pays.body.items).toHaveLength(1);
    expect(pays.body.items[0]).toMatchObject({
      linkId: c.body.id,
      amountCentavos: 25_000,
      email: 'ana@example.com',
      providerReference: session.id,
    });
    expect((await call('GET', `/payment-links/${c.body.id}`)).body).toMatchObject({
      paymentsCount: 1,
      status: 'completed',
    });

    // Paid: the page says so and no second checkout starts.
    expect(await (await fetch(c.body.url)).text()).toContain('has been paid');
    const twice = await fetch(`${c.body.url}/checkout`, { method: 'POST', redirect: 'manual' });
    expect(twice.status).toBe(409);
    expect(stripe.sessions.size).toBe(1);
    // After paying, the payer lands on the thank-you page.
    expect(await (await fetch(session.success_url)).text()).toContain('Thank you');
  });

  it('refuses webhooks whose signature does not match; nothing is recorded', async () => {
    const c = await call('POST', '/payment-links', { amountCentavos: 5000, description: 'Forged' });
    await fetch(`${c.body.url}/checkout`, { method: 'POST', redirect: 'manual' });
    const s = [...stripe.sessions.values()].find((x) => x.metadata.nube_reference === c.body.id)!;
    const wrongSecret = await stripe.pay(s.id, hookUrl, { secret: 'whsec_somebodyElse000000000000' });
    expect(wrongSecret.status).toBe(400);
    expect(JSON.parse(wrongSecret.body).code).toBe('BadSignature');
    // The right secret but a body changed after signing.
    const payload = JSON.stringify({
      id: 'evt_x',
      object: 'event',
      type: 'checkout.session.completed',
      data: { object: { ...s, payment_status: 'paid' } },
    });
    const signed = await stripe.send(hookUrl, payload);
    const tampered = await fetch(hookUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'stripe-signature': signed.signature },
      body: payload.replace('"paid"', '"paid" '),
    });
    expect(tampered.status).toBe(400);
    // Signed long ago (a captured event sent again later).
    expect(
      (
        await stripe.send(
          hookUrl,
          payload.replace('evt_x', 'evt_y'),
          undefined,
          Math.floor(Date.now() / 1000) - 3600,
        )
      ).status,
    ).toBe(400);
    expect(
      (
        await fetch(hookUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: payload,
        })
      ).status,
    ).toBe(400);
    // The genuine one (sent above with the right secret) was recorded once; nothing else was.
    const pays = await call('GET', `/payment-links/${c.body.id}/payments`);
    expect(pays.body.items).toHaveLength(1);
  });

  it('ignores events that report no payment and sessions nube did not start', async () => {
    const c = await call('POST', '/payment-links', {
      amountCentavos: 5000,
      description: 'Pending',
      maxPayments: null,
    });
    await fetch(`${c.body.url}/checkout`, { method: 'POST', redirect: 'manual' });
    const s = [...stripe.sessions.values()].find((x) => x.metadata.nube_reference === c.body.id)!;
    const expired = await stripe.send(
      hookUrl,
      JSON.stringify({ id: 'evt_e', object: 'event', type: 'checkout.session.expired', data: { object: s } }),
    );
    expect(JSON.parse(expired.body)).toEqual({ received: true, recorded: false });
    const foreign = await stripe.send(
      hookUrl,
      JSON.stringify({
        id: 'evt_f',
        object: 'event',
        type: 'checkout.session.completed',
        data: { object: { ...s, id: 'cs_test_elsewhere', payment_status: 'paid' } },
      }),
    );
    expect(JSON.parse(foreign.body)).toEqual({ received: true, recorded: false });
    expect((await call('GET', `/payment-links/${c.body.id}/payments`)).body.items).toEqual([]);
    // A link without a limit takes a second payer.
    await fetch(`${c.body.url}/checkout`, { method: 'POST', redirect: 'manual' });
    const mine = [...stripe.sessions.values()].filter((x) => x.metadata.nube_reference === c.body.id);
    expect(mine).toHaveLength(2);
    for (const x of mine) expect((await stripe.pay(x.id, hookUrl)).status).toBe(200);
    expect((await call('GET', `/payment-links/${c.body.id}`)).body).toMatchObject({
      paymentsCount: 2,
      status: 'active',
      maxPayments: null,
    });
  });

  it('says in words when Stripe refuses, and lets the payer try again', async () => {
    const c = await call('POST', '/payment-links', { amountCentavos: 5000, description: 'Outage' });
    stripe.failNext = 400;
    const r = await fetch(`${c.body.url}/checkout`, { method: 'POST', redirect: 'manual' });
    expect(r.status).toBe(503);
    expect(await r.text()).toContain('Stripe is having a bad day');
    expect((await fetch(`${c.body.url}/checkout`, { method: 'POST', redirect: 'manual' })).status).toBe(303);
  });

  it("lists with a cursor; another owner's link is a 404; a deleted link's page is gone", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++)
      ids.push(
        (await call('POST', '/payment-links', { amountCentavos: 1000 + i, description: `p${i}` })).body.id,
      );
    const first = await call('GET', '/payment-links?limit=2');
    expect(first.body.items).toHaveLength(2);
    expect(first.body.hasMore).toBe(true);
    expect(first.body.items.map((x: { id: string }) => x.id)).toEqual([ids[2], ids[1]]);
    const second = await call('GET', `/payment-links?limit=2&cursor=${first.body.nextCursor}`);
    expect(second.body.items[0].id).toBe(ids[0]);
    expect((await call('GET', '/payment-links?cursor=bm9wZQ')).status).toBe(400);

    const link = (await call('GET', `/payment-links/${ids[0]}`)).body;
    for (const [m, p] of [
      ['GET', `/payment-links/${ids[0]}`],
      ['GET', `/payment-links/${ids[0]}/payments`],
      ['DELETE', `/payment-links/${ids[0]}`],
    ] as const) {
      expect((await other(m, p)).status, `${m} ${p}`).toBe(404);
    }
    expect((await other('GET', '/payment-links')).body.items).toEqual([]);
    expect((await call('DELETE', `/payment-links/${ids[0]}`)).status).toBe(200);
    expect((await call('DELETE', `/payment-links/${ids[0]}`)).status).toBe(404);
    expect((await fetch(link.url)).status).toBe(404);
    expect((await fetch(`${link.url}/checkout`, { method: 'POST', redirect: 'manual' })).status).toBe(404);
    expect((await fetch(`${t.baseUrl}/pay/not-a-token`)).status).toBe(404);
  });
});

describe("payment links on nube's own page (no Stripe)", () => {
  let t: TestNube;
  let receiver: Receiver;
  let call: ReturnType<typeof api>;

  beforeAll(async () => {
    receiver = await startReceiver();
    t = await startNube({
      env: { NUBE_CHECKOUT_OPERATOR_KEY: OPERATOR_KEY, NUBE_OUTBOUND_ALLOW: '127.0.0.1/32' },
    });
    call = api(t);
    expect((await call('POST', '/webhooks', { url: receiver.url, events: ['payment.paid'] })).status).toBe(
      201,
    );
  });
  afterAll(async () => {
    await t?.close();
    await receiver?.close();
  });

  const confirm = (url: string, key?: string) =>
    fetch(`${url}/confirm`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: key === undefined ? '' : new URLSearchParams({ operatorKey: key }).toString(),
    });

  it('the operator confirms; a single-payment link takes one payment however many race; Stripe routes answer 404', async () => {
    const c = await call('POST', '/payment-links', { amountCentavos: 12_345, description: 'Transferencia' });
    expect(c.body.provider).toBe('builtin');
    const html = await (await fetch(c.body.url)).text();
    expect(html).toContain('$123.45 MXN');
    expect(html).toContain('Operator key');
    expect((await fetch(`${c.body.url}/checkout`, { method: 'POST', redirect: 'manual' })).status).toBe(409);
    expect((await confirm(c.body.url, 'wrong-wrong-wrong-wrong')).status).toBe(403);
    expect((await confirm(c.body.url)).status).toBe(403);
    const results = await Promise.all(Array.from({ length: 8 }, () => confirm(c.body.url, OPERATOR_KEY)));
    expect(results.map((r) => r.status).sort()).toEqual([200, 409, 409, 409, 409, 409, 409, 409]);
    const pays = await call('GET', `/payment-links/${c.body.id}/payments`);
    expect(pays.body.items).toHaveLength(1);
    expect(pays.body.items[0]).toMatchObject({ provider: 'builtin', amountCentavos: 12_345 });
    const [d] = await receiver.waitFor(1, 15_000);
    expect(JSON.parse(d!.raw)).toMatchObject({
      event: 'payment.paid',
      data: { linkId: c.body.id, amountMxn: 123.45, provider: 'builtin' },
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(receiver.got).toHaveLength(1);
    expect((await fetch(`${t.baseUrl}/payments/stripe/webhook`, { method: 'POST', body: '{}' })).status).toBe(
      404,
    );
  });

  it('the MCP tools and the catalogue carry the payment-link operations', async () => {
    const tools = (await (await fetch(`${t.baseUrl}/api/tools.json`)).json()) as
      | { tools?: { name: string }[] }
      | { name: string }[];
    const names = JSON.stringify(tools);
    for (const id of [
      'paymentLinks.create',
      'paymentLinks.list',
      'paymentLinks.get',
      'paymentLinks.delete',
      'paymentLinks.payments',
    ]) {
      expect(names).toContain(id.replace('.', '_'));
    }
  });
});
