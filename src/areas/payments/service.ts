// Payment links: a link an owner hands to payers (`/pay/<token>`), paid through the configured
// provider (Stripe Checkout, or nube's own page confirmed by the operator). Each payment is recorded
// once, with payment.paid in the same commit (the outbox), whatever the provider replays.
import type { Principal } from '../../platform/auth.js';
import { safeEqual } from '../../platform/crypto.js';
import { errors } from '../../platform/errors.js';
import { cursorAfter, pageOf } from '../../platform/cursor-page.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import type { OutboxEvent } from '../../platform/outbox.js';
import type { PaymentProvider, ProviderPayment } from '../../platform/payments.js';
import type { PlatformDeps } from '../deps.js';
import type { LinkPaymentsTable, PaymentLinksRepo, PaymentLinksTable } from './repo.js';

export interface CreateLinkInput {
  amountCentavos: number;
  currency: 'MXN';
  description: string;
  redirectUrl?: string;
  metadata?: Record<string, unknown>;
  maxPayments?: number | null;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(Number(ms)).toISOString());

export class PaymentLinksService {
  constructor(
    readonly repo: PaymentLinksRepo,
    readonly provider: PaymentProvider,
    private readonly deps: Pick<PlatformDeps, 'events' | 'publicUrl' | 'log'> & { operatorKey?: string },
  ) {}

  url(token: string): string {
    return `${this.deps.publicUrl().replace(/\/$/, '')}/pay/${token}`;
  }

  view(r: PaymentLinksTable) {
    const max = r.max_payments === null ? null : Number(r.max_payments);
    const paid = Number(r.paid_count);
    return {
      id: r.id,
      url: this.url(r.token),
      amountCentavos: Number(r.amount_centavos),
      currency: r.currency as 'MXN',
      description: r.description,
      redirectUrl: r.redirect_url,
      metadata: JSON.parse(r.metadata) as Record<string, unknown>,
      maxPayments: max,
      paymentsCount: paid,
      status: max !== null && paid >= max ? ('completed' as const) : ('active' as const),
      provider: this.provider.name,
      createdAt: iso(r.created_at)!,
    };
  }

  paymentView(p: LinkPaymentsTable) {
    return {
      id: p.id,
      linkId: p.link_id,
      amountCentavos: Number(p.amount_centavos),
      currency: p.currency,
      provider: p.provider,
      providerReference: p.session_id,
      email: p.email,
      createdAt: iso(p.created_at)!,
      paidAt: iso(p.paid_at),
    };
  }

  async create(p: Principal, input: CreateLinkInput) {
    const row: PaymentLinksTable = {
      id: newId('plk'),
      owner_id: p.ownerId,
      token: randomToken(32, BASE62),
      amount_centavos: input.amountCentavos,
      currency: input.currency,
      description: input.description,
      redirect_url: input.redirectUrl ?? null,
      metadata: JSON.stringify(input.metadata ?? {}),
      max_payments: input.maxPayments === undefined ? 1 : input.maxPayments,
      paid_count: 0,
      status: 'active',
      created_at: Date.now(),
      deleted_at: null,
    };
    await this.repo.insert(row);
    return this.view(row);
  }

  private async owned(p: Principal, id: string): Promise<PaymentLinksTable> {
    const r = await this.repo.owned(p.ownerId, id);
    if (!r) throw errors.notFound('payment link');
    return r;
  }

  async get(p: Principal, id: string) {
    return this.view(await this.owned(p, id));
  }

  async list(p: Principal, q: { limit: number; cursor?: string }) {
    const rows = await this.repo.list(p.ownerId, q.limit + 1, cursorAfter(q.cursor, 'plk'));
    return pageOf(rows, q.limit, (r) => this.view(r));
  }

  /** The link stops taking payments at once; its payments stay on record. */
  async delete(p: Principal, id: string) {
    if (!(await this.repo.remove(p.ownerId, id, Date.now()))) throw errors.notFound('payment link');
    return { ok: true as const };
  }

  async payments(p: Principal, id: string, q: { limit: number; cursor?: string }) {
    const link = await this.owned(p, id);
    const rows = await this.repo.payments(link.id, q.limit + 1, cursorAfter(q.cursor, 'pay'));
    return pageOf(rows, q.limit, (r) => this.paymentView(r));
  }

  // ---- the payer's side (the link is the only credential) -------------------------------------

  /** The live link behind a token, or null (unknown, deleted). */
  async byToken(token: string): Promise<PaymentLinksTable | null> {
    if (!/^[0-9A-Za-z]{32}$/.test(token)) return null;
    return (await this.repo.byToken(token)) ?? null;
  }

  /** A payer asks to pay: a hosted checkout to send them to (Stripe), recorded as pending. */
  async startCheckout(token: string): Promise<{ url: string }> {
    const link = await this.byToken(token);
    if (!link) throw errors.notFound('payment link');
    if (this.view(link).status === 'completed')
      throw errors.conflict('this payment link has been paid', 'LinkCompleted');
    const page = this.url(link.token);
    const hosted = await this.provider.createCheckout({
      reference: link.id,
      ownerId: link.owner_id,
      amountCentavos: Number(link.amount_centavos),
      currency: 'MXN',
      description: link.description,
      successUrl: `${page}/thanks`,
      cancelUrl: page,
    });
    if (!hosted)
      throw errors.conflict(
        'this link is paid on its own page (no hosted payment provider is configured)',
        'NoHostedCheckout',
      );
    await this.repo.insertPayment(this.repo.db, {
      id: newId('pay'),
      link_id: link.id,
      owner_id: link.owner_id,
      provider: this.provider.name,
      session_id: hosted.sessionId,
      status: 'pending',
      amount_centavos: Number(link.amount_centavos),
      currency: 'MXN',
      email: null,
      created_at: Date.now(),
      paid_at: null,
    });
    return { url: hosted.url };
  }

  /**
   * The provider says a checkout was paid (its signature checked): recorded once, payment.paid once;
   * null when the session is not a payment link's.
   */
  async providerPaid(pay: ProviderPayment): Promise<{ recorded: boolean } | null> {
    const pending = await this.repo.bySession(pay.sessionId);
    if (!pending) return null;
    const paidAt = Date.now();
    const recorded = await this.deps.events.atomically(async (trx, emit) => {
      if (!(await this.repo.markPaid(trx, pay.sessionId, paidAt, pay.email))) return false;
      // Money was taken: counted even past the link's limit (two payers who both reached the provider).
      await this.repo.count(trx, pending.link_id, true);
      const link = await this.repo.byId(pending.link_id, trx);
      if (link) emit(this.paid(link, { ...pending, status: 'paid', paid_at: paidAt, email: pay.email }));
      return true;
    });
    return { recorded };
  }

  /** nube's own page: the operator confirms a payment settled outside; refused once the link is paid. */
  async confirmByOperator(token: string, operatorKey: string | undefined) {
    const expected = this.deps.operatorKey;
    if (!expected)
      throw errors.forbidden(
        'payments are not confirmable here: NUBE_CHECKOUT_OPERATOR_KEY is not set',
        'CheckoutDisabled',
      );
    if (operatorKey === undefined || !safeEqual(operatorKey, expected))
      throw errors.forbidden('wrong operator key');
    const link = await this.byToken(token);
    if (!link) throw errors.notFound('payment link');
    const now = Date.now();
    const payment: LinkPaymentsTable = {
      id: newId('pay'),
      link_id: link.id,
      owner_id: link.owner_id,
      provider: 'builtin',
      session_id: `builtin_${randomToken(24, BASE62)}`,
      status: 'paid',
      amount_centavos: Number(link.amount_centavos),
      currency: 'MXN',
      email: null,
      created_at: now,
      paid_at: now,
    };
    const ok = await this.deps.events.atomically(async (trx, emit) => {
      if (!(await this.repo.count(trx, link.id, false))) return false;
      await this.repo.insertPayment(trx, payment);
      emit(this.paid(link, payment));
      return true;
    });
    if (!ok) throw errors.conflict('this payment link has been paid', 'LinkCompleted');
    return this.paymentView(payment);
  }

  /** The one place a link's payment.paid is made. */
  private paid(link: PaymentLinksTable, p: LinkPaymentsTable): OutboxEvent {
    return {
      event: 'payment.paid',
      ownerId: link.owner_id,
      data: {
        kind: 'link',
        paymentId: p.id,
        linkId: link.id,
        amountCentavos: Number(p.amount_centavos),
        amountMxn: Number(p.amount_centavos) / 100,
        currency: p.currency,
        description: link.description,
        metadata: JSON.parse(link.metadata) as unknown,
        provider: p.provider,
        providerReference: p.session_id,
        email: p.email,
        paidAt: iso(p.paid_at),
      },
    };
  }
}
