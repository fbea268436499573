import type { Principal } from '../../platform/auth.js';
import type { SecretBox } from '../../platform/crypto.js';
import { errors } from '../../platform/errors.js';
import { cursorAfter, pageOf } from '../../platform/cursor-page.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import { type AllowList, assertPublicUrl, OutboundBlockedError } from '../../platform/outbound.js';
import type { WorkspaceRegistry } from '../../platform/workspaces.js';
import type { DeliveriesRepo } from './delivery-repo.js';
import type { Deliverer } from './delivery.js';
import type { EventName } from './events.js';
import type { AttemptRecord, DeliveryRow, DeliveryStatus, WebhookRow, WebhookStatus, WebhooksRepo } from './repo.js';

/** Webhooks per owner: every event fans out to all of them, so the count is bounded. */
export const MAX_WEBHOOKS = 50;

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export function webhookOut(w: WebhookRow) {
  return {
    id: w.id,
    url: w.url,
    events: JSON.parse(w.events) as EventName[],
    status: w.status,
    failureCount: w.failure_count,
    lastDeliveryAt: iso(w.last_delivery_at),
    lastError: w.last_error,
    createdAt: new Date(w.created_at).toISOString(),
    updatedAt: new Date(w.updated_at).toISOString(),
    workspaceId: w.workspace_id,
  };
}

export function deliveryOut(d: DeliveryRow) {
  const body = JSON.parse(d.body) as { timestamp: string };
  return {
    id: d.id,
    webhookId: d.webhook_id,
    event: d.event as EventName,
    eventTimestamp: body.timestamp,
    status: d.status,
    attemptCount: d.attempts,
    nextAttemptAt: iso(d.next_attempt_at),
    lastStatusCode: d.last_status_code,
    lastError: d.last_error,
    attempts: (JSON.parse(d.log) as AttemptRecord[]).map((a) => ({ ...a, at: new Date(a.at).toISOString() })),
    createdAt: new Date(d.created_at).toISOString(),
    updatedAt: new Date(d.updated_at).toISOString(),
  };
}


export class WebhooksService {
  constructor(
    private readonly hooks: WebhooksRepo,
    private readonly deliveries: DeliveriesRepo,
    private readonly deliverer: Deliverer,
    private readonly box: SecretBox,
    private readonly allow: AllowList,
    /** Stops fan-out and closes the delivery sockets (area close, after the job queue stopped). */
    readonly close: () => Promise<void> | void = () => {},
  ) {}

  /** Workspaces (set by the area): where a webhook lands, which a list shows, which a key reaches. */
  workspaces!: WorkspaceRegistry;

  /** The URL must be http(s) and resolve only to public addresses (or ones the operator allows). */
  private async checkUrl(url: string): Promise<void> {
    try {
      await assertPublicUrl(url, this.allow);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      const message =
        err instanceof OutboundBlockedError
          ? `url refused: ${e.message}`
          : `url host could not be resolved (${e.code ?? e.message})`;
      throw errors.badRequest(message, [{ path: ['url'], message, code: 'UrlRefused' }], 'UrlRefused');
    }
  }

  private async own(p: Principal, id: string): Promise<WebhookRow> {
    const w = await this.hooks.get(p.ownerId, id);
    if (!w || !this.workspaces.sees(p, w.workspace_id)) throw errors.notFound('webhook');
    return w;
  }

  async list(p: Principal, workspaceId?: string) {
    return { items: (await this.hooks.list(p.ownerId, await this.workspaces.filter(p, workspaceId))).map(webhookOut) };
  }

  get(p: Principal, id: string) {
    return this.own(p, id).then(webhookOut);
  }

  async create(p: Principal, input: { url: string; events: EventName[]; workspaceId?: string }) {
    const workspaceId = await this.workspaces.forCreate(p, input.workspaceId);
    await this.checkUrl(input.url);
    if ((await this.hooks.count(p.ownerId)) >= MAX_WEBHOOKS) {
      throw errors.conflict(`at most ${MAX_WEBHOOKS} webhooks per account`, 'WebhookLimit');
    }
    const secret = `whsec_${randomToken(40, BASE62)}`;
    const now = Date.now();
    const row: WebhookRow = {
      id: newId('wh', now),
      owner_id: p.ownerId,
      url: input.url,
      events: JSON.stringify(input.events),
      status: 'ACTIVE',
      secret: this.box.seal(secret),
      failure_count: 0,
      last_delivery_at: null,
      last_error: null,
      created_at: now,
      updated_at: now,
      workspace_id: workspaceId,
    };
    await this.hooks.insert(row);
    return { ...webhookOut(row), secret };
  }

  async update(p: Principal, id: string, input: { url?: string; events?: EventName[]; status?: WebhookStatus }) {
    const before = await this.own(p, id);
    if (input.url !== undefined) await this.checkUrl(input.url);
    const now = Date.now();
    await this.hooks.db.transaction().execute(async (trx) => {
      const set: Parameters<WebhooksRepo['update']>[2] = { updated_at: now };
      if (input.url !== undefined) set.url = input.url;
      if (input.events !== undefined) set.events = JSON.stringify(input.events);
      if (input.status !== undefined) set.status = input.status;
      // Spec: setting ACTIVE resets the failure counter (also when it already was ACTIVE).
      if (input.status === 'ACTIVE') set.failure_count = 0;
      await this.hooks.update(p.ownerId, id, set, trx);
      if (input.status === 'PAUSED' && before.status !== 'PAUSED') {
        await this.deliveries.skipPending(trx, id, 'webhook paused', now);
      }
    });
    return this.get(p, id);
  }

  async delete(p: Principal, id: string) {
    await this.own(p, id);
    if (!(await this.hooks.delete(p.ownerId, id))) throw errors.notFound('webhook');
    return { ok: true as const };
  }

  async listDeliveries(
    p: Principal,
    id: string,
    q: { limit: number; cursor?: string; status?: DeliveryStatus },
  ) {
    await this.own(p, id);
    const before = cursorAfter(q.cursor, 'dlv');
    const rows = await this.deliveries.list(id, { limit: q.limit + 1, before, status: q.status });
    return pageOf(rows, q.limit, deliveryOut);
  }

  /** Sends a delivery again now, with a fresh retry schedule; same delivery id, same signed body. */
  async redeliver(p: Principal, webhookId: string, deliveryId: string) {
    const hook = await this.own(p, webhookId);
    const d = await this.deliveries.get(p.ownerId, webhookId, deliveryId);
    if (!d) throw errors.notFound('delivery');
    if (hook.status !== 'ACTIVE') {
      throw errors.conflict('the webhook is PAUSED: set its status to ACTIVE first', 'WebhookPaused');
    }
    const now = Date.now();
    await this.hooks.db.transaction().execute(async (trx) => {
      const attempt = await this.deliveries.rearm(trx, d, now);
      await this.deliverer.enqueue(trx, d.id, attempt, now);
    });
    this.deliverer.notify();
    const after = await this.deliveries.get(p.ownerId, webhookId, deliveryId);
    return deliveryOut(after ?? d);
  }
}
