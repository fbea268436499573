// The audit log's writer and checker. Each account's entries form a chain: an entry's hash is an HMAC
// (keyed from NUBE_SECRET) over its fields, its sequence number and the previous entry's hash, and the
// account's head row holds the last sequence and hash. Editing an entry breaks its hash; removing one
// leaves a gap in the sequence (or, for the newest, a head that points past the last entry); without
// the secret, no one with write access to the store can forge a consistent replacement.
import { createHmac } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { Dialect } from '../../store/db.js';
import type { Tables } from '../../store/schema.js';
import type { AuditEntriesTable } from './tables.js';

/** An entry before the chain numbers it. */
export type AuditRecord = Omit<AuditEntriesTable, 'seq' | 'prev_hash' | 'hash'>;

/** The hash of "no entry before": the first entry's `prev_hash`. */
export const GENESIS = '';

const FORMAT = 1;

export function entryHash(key: Buffer, e: Omit<AuditEntriesTable, 'hash'>): string {
  const fields = [
    FORMAT,
    e.id,
    e.owner_id,
    Number(e.seq),
    e.prev_hash,
    Number(e.created_at),
    e.workspace_id,
    e.key_id,
    e.key_name,
    e.scheme,
    e.operation,
    e.method,
    e.resource_id,
    Number(e.status),
    e.error_code,
    e.source_ip,
    e.user_agent,
    e.request_id,
    e.via,
    // Only when set, so entries written before the column existed keep their hashes.
    ...(e.repeats === null || e.repeats === undefined ? [] : [Number(e.repeats)]),
  ];
  return createHmac('sha256', key).update(JSON.stringify(fields)).digest('hex');
}

/** Entries a batch commits at most; the rest wait for the next transaction. */
const BATCH = 500;

interface Waiting {
  record: AuditRecord;
  resolve(): void;
  reject(e: unknown): void;
}

/**
 * Appends entries durably. Entries arriving while a transaction is open wait and go together in the
 * next one (group commit): under load many requests share a commit, and one account's chain grows
 * in one place at a time in this process; across replicas the head row is locked (PostgreSQL).
 */
export class AuditWriter {
  private queue: Waiting[] = [];
  private running = false;

  constructor(
    private readonly db: Kysely<Tables>,
    private readonly dialect: Dialect,
    private readonly key: Buffer,
  ) {}

  /** Resolves once the entry is committed. */
  append(record: AuditRecord): Promise<void> {
    return new Promise((resolve, reject) => {
      this.queue.push({ record, resolve, reject });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    while (this.queue.length) {
      const batch = this.queue.splice(0, BATCH);
      try {
        await this.write(batch.map((w) => w.record));
        for (const w of batch) w.resolve();
      } catch (e) {
        for (const w of batch) w.reject(e);
      }
    }
    this.running = false;
  }

  /**
   * Each account's head as this process last wrote it. A batch whose heads are all known here is one
   * INSERT in autocommit (a trigger moves the heads, tables.ts); when another writer (a replica) took
   * those sequence numbers since, the unique (owner, seq) index refuses it and the batch is numbered
   * again from the heads read under lock.
   */
  private readonly heads = new Map<string, { seq: number; hash: string }>();

  private async write(records: AuditRecord[]): Promise<void> {
    const owners = [...new Set(records.map((r) => r.owner_id))];
    if (owners.every((o) => this.heads.has(o))) {
      const { rows, heads } = this.chain(records, new Map(owners.map((o) => [o, { ...this.heads.get(o)! }])));
      try {
        await this.db.insertInto('audit_entries').values(rows).execute();
        for (const [o, h] of heads) this.heads.set(o, h);
        return;
      } catch {
        // Taken by another writer (or the store failed: then the locked path fails too, and says why).
      }
    }
    for (const o of owners) this.heads.delete(o);
    // Heads locked in one order by every writer: two batches of several accounts never wait in a circle.
    const heads = await retryDeadlocks(() => this.lockedWrite([...owners].sort(), records));
    for (const [o, h] of heads) this.heads.set(o, h);
  }

  /** The batch numbered from the heads read under lock, in one transaction. */
  private lockedWrite(owners: string[], records: AuditRecord[]) {
    return this.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('audit_chains')
        .values(owners.map((owner_id) => ({ owner_id, seq: 0, hash: GENESIS, pruned_seq: 0, pruned_hash: GENESIS })))
        .onConflict((oc) => oc.column('owner_id').doNothing())
        .execute();
      let q = trx.selectFrom('audit_chains').select(['owner_id', 'seq', 'hash']).where('owner_id', 'in', owners).orderBy('owner_id');
      // Another replica appending to the same chain waits for this commit (SQLite has one writer anyway).
      if (this.dialect === 'postgres') q = q.forUpdate();
      const read = new Map((await q.execute()).map((h) => [h.owner_id, { seq: Number(h.seq), hash: h.hash }]));
      const { rows, heads } = this.chain(records, read);
      await trx.insertInto('audit_entries').values(rows).execute();
      return heads;
    });
  }

  /** Numbers and hashes `records` onto `heads` (moved in place). */
  private chain(records: AuditRecord[], heads: Map<string, { seq: number; hash: string }>) {
    const rows: AuditEntriesTable[] = records.map((r) => {
      const head = heads.get(r.owner_id)!;
      const unhashed = { ...r, seq: head.seq + 1, prev_hash: head.hash };
      const row = { ...unhashed, hash: entryHash(this.key, unhashed) };
      head.seq = row.seq;
      head.hash = row.hash;
      return row;
    });
    return { rows, heads };
  }
}

export interface ChainProblem {
  accountId: string;
  /** The first entry that does not check out; null when the chain's newest entries are gone. */
  entryId: string | null;
  seq: number;
  reason: string;
}

export interface VerifyResult {
  accounts: number;
  entries: number;
  problems: ChainProblem[];
}

const PAGE = 1000;

/** Checks every account's chain (or one's): the first bad entry of each broken chain. */
export async function verifyChains(db: Kysely<Tables>, key: Buffer, accountId?: string): Promise<VerifyResult> {
  let heads = db.selectFrom('audit_chains').selectAll();
  if (accountId !== undefined) heads = heads.where('owner_id', '=', accountId);
  const chains = await heads.orderBy('owner_id').execute();
  const problems: ChainProblem[] = [];
  let entries = 0;
  const known = new Set(chains.map((c) => c.owner_id));
  // Entries whose account has no head row at all: the head was removed.
  let orphans = db.selectFrom('audit_entries').select(['owner_id', 'id', 'seq']).where('owner_id', 'not in', [...known, '\u0001']);
  if (accountId !== undefined) orphans = orphans.where('owner_id', '=', accountId);
  for (const o of await orphans.orderBy('owner_id').orderBy('seq').execute()) {
    if (problems.some((p) => p.accountId === o.owner_id)) continue;
    problems.push({ accountId: o.owner_id, entryId: o.id, seq: Number(o.seq), reason: "the account's chain head is missing" });
  }
  for (const c of chains) {
    let expectSeq = Number(c.pruned_seq) + 1;
    let prev = c.pruned_hash;
    let bad: ChainProblem | undefined;
    for (;;) {
      const page = await db
        .selectFrom('audit_entries')
        .selectAll()
        .where('owner_id', '=', c.owner_id)
        .where('seq', '>=', expectSeq)
        .orderBy('seq')
        .limit(PAGE)
        .execute();
      for (const e of page) {
        entries++;
        const seq = Number(e.seq);
        if (seq !== expectSeq) {
          bad = { accountId: c.owner_id, entryId: e.id, seq, reason: `entries ${expectSeq}..${seq - 1} before it were removed` };
        } else if (e.prev_hash !== prev) {
          bad = { accountId: c.owner_id, entryId: e.id, seq, reason: 'its link to the previous entry was changed' };
        } else if (e.hash !== entryHash(key, e)) {
          bad = { accountId: c.owner_id, entryId: e.id, seq, reason: 'it was edited (its hash does not match its fields)' };
        }
        if (bad) break;
        expectSeq = seq + 1;
        prev = e.hash;
      }
      if (bad || page.length < PAGE) break;
    }
    if (!bad && (expectSeq - 1 !== Number(c.seq) || prev !== c.hash)) {
      bad = { accountId: c.owner_id, entryId: null, seq: expectSeq, reason: `the chain ends at entry ${expectSeq - 1} but its head says ${c.seq}: the newest entries were removed` };
    }
    if (bad) problems.push(bad);
  }
  return { accounts: chains.length, entries, problems };
}

/**
 * Removes one account's entries older than `before`, moving the chain's anchor to the last one removed
 * so the rest still verifies. Returns how many went.
 */
export async function pruneChain(db: Kysely<Tables>, dialect: Dialect, ownerId: string, before: number): Promise<number> {
  return db.transaction().execute(async (trx) => {
    let head = trx.selectFrom('audit_chains').select(['seq']).where('owner_id', '=', ownerId);
    if (dialect === 'postgres') head = head.forUpdate();
    if (!(await head.executeTakeFirst())) return 0;
    const last = await trx
      .selectFrom('audit_entries')
      .select(['seq', 'hash'])
      .where('owner_id', '=', ownerId)
      .where('created_at', '<', before)
      .orderBy('seq', 'desc')
      .limit(1)
      .executeTakeFirst();
    if (!last) return 0;
    const del = await trx.deleteFrom('audit_entries').where('owner_id', '=', ownerId).where('seq', '<=', last.seq).executeTakeFirst();
    await trx.updateTable('audit_chains').set({ pruned_seq: last.seq, pruned_hash: last.hash }).where('owner_id', '=', ownerId).execute();
    return Number(del.numDeletedRows);
  });
}

/** The chain's HMAC key, derived from NUBE_SECRET (the CLI's verify derives the same). */
export function auditKey(secret: string): Buffer {
  return createHmac('sha256', secret).update('nube-audit-chain').digest();
}

/**
 * PostgreSQL ends one of two writers that wait on each other: this one holding its chain's head under
 * lock and inserting, another replica's lock-free insert (whose trigger moves the same head) holding an
 * entry this one's unique index waits on. The one ended is rolled back whole, so running it again is
 * safe; the other goes on (a lock-free insert ended this way takes this locked path too).
 */
async function retryDeadlocks<T>(fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      const code = (e as { code?: string }).code;
      if ((code !== '40P01' && code !== '40001') || attempt >= 8) throw e;
      await new Promise((r) => setTimeout(r, attempt * 10 + Math.random() * 20));
    }
  }
}
