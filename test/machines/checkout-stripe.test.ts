// Machines' checkout through the payment provider payment links use, Stripe Checkout (a local server
// speaking Stripe's API, test/payments/stripe-server.ts): a machine beyond the plan answers a Checkout
// Session's URL; Stripe's signed webhook marks the order paid, creates the machine and sends
// payment.paid once, whatever it replays; the operator cannot confirm an order Stripe is taking.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS } from '../helpers/pg.js';
import { type FakeStripe, startFakeStripe } from '../payments/stripe-server.js';
import { startReceiver, type Receiver } from '../webhooks/receiver.js';
import { type MachineNube, OPERATOR_KEY, startMachineNube, stopMachineNube, TEMPLATE_WAIT_MS, waitRunning } from './helpers.js';

describe.each(DIALECTS)('%s: machine checkout through Stripe Checkout', (dialect) => {
  let t: MachineNube;
  let byteKey: string;
  let receiver: Receiver;
  let stripe: FakeStripe;
  let hookUrl: string;

  beforeAll(async () => {
    stripe = await startFakeStripe();
    t = await startMachineNube('checkout-stripe', dialect, {
      NUBE_STRIPE_SECRET_KEY: stripe.secretKey,
      NUBE_STRIPE_WEBHOOK_SECRET: stripe.webhookSecret,
      NUBE_STRIPE_API_URL: stripe.url,
    });
    byteKey = (await t.nube.services.account.createAccount({ name: 'byte', plan: 'byte' })).secret;
    receiver = await startReceiver();
    hookUrl = `${t.baseUrl}/payments/stripe/webhook`;
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    await receiver?.close();
    await stopMachineNube(t);
    await stripe?.close();
  }, 120_000);

  it('a machine beyond the plan is paid on Stripe; its webhook creates it and sends payment.paid once', async () => {
    const hook = await t.call('POST', '/webhooks', { url: receiver.url, events: ['payment.paid'] }, byteKey);
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);
    // The plan's one box.
    const first = await t.call('POST', '/machines', { tier: 'nano', name: 'included' }, byteKey);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.id).toMatch(/^mch_/);

    // Stripe refuses: said in words, no order is left behind, and the next try works.
    stripe.failNext = 400;
    const refused = await t.call('POST', '/machines', { tier: 'nano', name: 'paid-box' }, byteKey);
    expect(refused.status).toBe(503);
    expect(refused.body.error).toContain('Stripe is having a bad day');
    expect(stripe.sessions.size).toBe(0);

    const c = await t.call('POST', '/machines', { tier: 'nano', name: 'paid-box' }, byteKey);
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    expect(Object.keys(c.body)).toEqual(['checkoutUrl']);
    expect(stripe.sessions.size).toBe(1);
    const session = [...stripe.sessions.values()][0]!;
    expect(c.body.checkoutUrl).toBe(session.url);
    expect(session).toMatchObject({
      mode: 'payment',
      amount_total: 5900,
      currency: 'mxn',
      metadata: { nube_reference: expect.stringMatching(/^ord_/) },
    });
    // The payer comes back to the order's page, which waits for Stripe's word.
    const back = new URL(session.success_url);
    expect(`${back.origin}`).toBe(t.baseUrl);
    expect(back.pathname).toMatch(/^\/checkout\/[0-9A-Za-z]{40}$/);
    const waiting = await (await fetch(session.success_url)).text();
    expect(waiting).toContain('$59.00 MXN');
    expect(waiting).toContain('Waiting for Stripe');
    expect(waiting).not.toContain('Operator key');
    // The operator cannot confirm what Stripe is taking (the payer could pay twice).
    const byOperator = await fetch(`${session.success_url}/confirm`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ operatorKey: OPERATOR_KEY }),
    });
    expect(byOperator.status).toBe(409);
    expect(((await byOperator.json()) as { code: string }).code).toBe('PaidThroughProvider');
    expect((await t.call('GET', '/machines', undefined, byteKey)).body.machines).toHaveLength(1);

    // A forged completion changes nothing.
    expect((await stripe.pay(session.id, hookUrl, { secret: 'whsec_somebodyElse000000000000' })).status).toBe(400);
    expect((await t.call('GET', '/machines', undefined, byteKey)).body.machines).toHaveLength(1);

    const paid = await stripe.pay(session.id, hookUrl, { email: 'ana@example.com' });
    expect(paid.status, paid.body).toBe(200);
    expect(JSON.parse(paid.body)).toEqual({ received: true, recorded: true });
    const page = await (await fetch(session.success_url)).text();
    const machineId = /Machine <code>(mch_[0-9A-Za-z]+)<\/code>/.exec(page)?.[1];
    expect(machineId, page).toBeDefined();
    const m = await waitRunning(t, machineId!, byteKey);
    expect(m).toMatchObject({ name: 'paid-box', tier: 'nano', monthlyMxn: 59 });

    // Stripe sends the event again when unsure it arrived: nothing more is created or sent.
    const again = await stripe.send(hookUrl, paid.payload);
    expect(JSON.parse(again.body)).toEqual({ received: true, recorded: false });
    expect((await t.call('GET', '/machines', undefined, byteKey)).body.machines).toHaveLength(2);
    const [got] = await receiver.waitFor(1, 30_000);
    expect(JSON.parse(got!.raw)).toMatchObject({
      event: 'payment.paid',
      data: {
        orderId: session.metadata.nube_reference,
        kind: 'create',
        amountMxn: 59,
        amountCentavos: 5900,
        currency: 'MXN',
        provider: 'stripe',
        providerReference: session.id,
        email: 'ana@example.com',
      },
    });
    await new Promise((r) => setTimeout(r, 500));
    expect(receiver.got).toHaveLength(1);
    // Paid: the operator's confirmation answers the machine, as on nube's own page.
    const late = await fetch(`${session.success_url}/confirm`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ operatorKey: OPERATOR_KEY }),
    });
    expect(await late.json()).toMatchObject({ machineId, alreadyPaid: true });
  }, 180_000);
});
