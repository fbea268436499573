import { type Kysely, type Migration, sql, type Transaction } from 'kysely';
import type { Tables } from '../../store/schema.js';

export interface PaymentLinksTable {
  id: string;
  owner_id: string;
  /** The public link's token (`/pay/<token>`): meant to be handed to payers, so kept as it is. */
  token: string;
  amount_centavos: number;
  currency: string;
  description: string;
  redirect_url: string | null;
  metadata: string;
  /** Payments it takes before it closes; null: no end. */
  max_payments: number | null;
  paid_count: number;
  status: 'active' | 'deleted';
  created_at: number;
  deleted_at: number | null;
}

export interface LinkPaymentsTable {
  id: string;
  link_id: string;
  owner_id: string;
  provider: string;
  /** The provider's checkout id (a Stripe Checkout Session id): one payment per id, whatever replays. */
  session_id: string;
  status: 'pending' | 'paid';
  amount_centavos: number;
  currency: string;
  email: string | null;
  created_at: number;
  paid_at: number | null;
}

declare module '../../store/schema.js' {
  interface Tables {
    payment_links: PaymentLinksTable;
    link_payments: LinkPaymentsTable;
  }
}

export const paymentsMigrations: Record<string, Migration> = {
  '0210-payment-links': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('payment_links')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('token', 'text', (c) => c.notNull().unique())
        .addColumn('amount_centavos', 'bigint', (c) => c.notNull())
        .addColumn('currency', 'text', (c) => c.notNull())
        .addColumn('description', 'text', (c) => c.notNull())
        .addColumn('redirect_url', 'text')
        .addColumn('metadata', 'text', (c) => c.notNull())
        .addColumn('max_payments', 'integer')
        .addColumn('paid_count', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('deleted_at', 'bigint')
        .execute();
      await db.schema
        .createIndex('payment_links_owner')
        .on('payment_links')
        .columns(['owner_id', 'id'])
        .execute();
      await db.schema
        .createTable('link_payments')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('link_id', 'text', (c) => c.notNull())
        .addColumn('owner_id', 'text', (c) => c.notNull())
        .addColumn('provider', 'text', (c) => c.notNull())
        .addColumn('session_id', 'text', (c) => c.notNull().unique())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('amount_centavos', 'bigint', (c) => c.notNull())
        .addColumn('currency', 'text', (c) => c.notNull())
        .addColumn('email', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('paid_at', 'bigint')
        .execute();
      await db.schema
        .createIndex('link_payments_link')
        .on('link_payments')
        .columns(['link_id', 'id'])
        .execute();
    },
  },
};

type Db = Kysely<Tables> | Transaction<Tables>;

export class PaymentLinksRepo {
  constructor(readonly db: Kysely<Tables>) {}

  async insert(row: PaymentLinksTable): Promise<void> {
    await this.db.insertInto('payment_links').values(row).execute();
  }

  owned(ownerId: string, id: string): Promise<PaymentLinksTable | undefined> {
    return this.db
      .selectFrom('payment_links')
      .selectAll()
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .where('status', '=', 'active')
      .executeTakeFirst();
  }

  byToken(token: string, db: Db = this.db): Promise<PaymentLinksTable | undefined> {
    return db
      .selectFrom('payment_links')
      .selectAll()
      .where('token', '=', token)
      .where('status', '=', 'active')
      .executeTakeFirst();
  }

  byId(id: string, db: Db = this.db): Promise<PaymentLinksTable | undefined> {
    return db.selectFrom('payment_links').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /** Newest first; `before` an id from the previous page. */
  list(ownerId: string, limit: number, before?: string): Promise<PaymentLinksTable[]> {
    let q = this.db
      .selectFrom('payment_links')
      .selectAll()
      .where('owner_id', '=', ownerId)
      .where('status', '=', 'active');
    if (before) q = q.where('id', '<', before);
    return q.orderBy('id', 'desc').limit(limit).execute();
  }

  async remove(ownerId: string, id: string, at: number): Promise<boolean> {
    const r = await this.db
      .updateTable('payment_links')
      .set({ status: 'deleted', deleted_at: at })
      .where('id', '=', id)
      .where('owner_id', '=', ownerId)
      .where('status', '=', 'active')
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /**
   * Counts one payment against the link: only while it has payments left (the one check two payers
   * racing for a single-payment link cannot both pass), unless `always` (money already taken).
   */
  async count(db: Db, linkId: string, always: boolean): Promise<boolean> {
    let q = db.updateTable('payment_links').set({ paid_count: sql`paid_count + 1` }).where('id', '=', linkId);
    if (!always)
      q = q.where((eb) =>
        eb.or([eb('max_payments', 'is', null), eb('paid_count', '<', eb.ref('max_payments'))]),
      );
    const r = await q.executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async insertPayment(db: Db, row: LinkPaymentsTable): Promise<void> {
    await db.insertInto('link_payments').values(row).execute();
  }

  bySession(sessionId: string, db: Db = this.db): Promise<LinkPaymentsTable | undefined> {
    return db.selectFrom('link_payments').selectAll().where('session_id', '=', sessionId).executeTakeFirst();
  }

  /** The pending payment turns paid, once: false when it already was (a replayed webhook). */
  async markPaid(db: Db, sessionId: string, paidAt: number, email: string | null): Promise<boolean> {
    const r = await db
      .updateTable('link_payments')
      .set({ status: 'paid', paid_at: paidAt, email })
      .where('session_id', '=', sessionId)
      .where('status', '=', 'pending')
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  payments(linkId: string, limit: number, before?: string): Promise<LinkPaymentsTable[]> {
    let q = this.db
      .selectFrom('link_payments')
      .selectAll()
      .where('link_id', '=', linkId)
      .where('status', '=', 'paid');
    if (before) q = q.where('id', '<', before);
    return q.orderBy('id', 'desc').limit(limit).execute();
  }
}
