import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok, PageQuery, WorkspaceFilter, WorkspaceIdInput, WorkspaceIdOutput } from '../../platform/schemas.js';
import { EVENT_NAMES } from './events.js';
import type { WebhooksService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    webhooks: WebhooksService;
  }
}

const tags = ['Webhooks'];

const WebhookId = z.object({ webhookId: z.string().min(1).max(200).describe('Webhook id') });
const Url = z
  .url({ protocol: /^https?$/ })
  .max(2048)
  .describe('Endpoint receiving POSTs');
const Events = z
  .array(z.enum(EVENT_NAMES))
  .min(1)
  .max(EVENT_NAMES.length)
  .refine((a) => new Set(a).size === a.length, { message: 'events must not repeat' })
  .describe('Event names to deliver');
const WebhookStatus = z.enum(['ACTIVE', 'PAUSED']).describe('PAUSED after 5 consecutive delivery failures');

const WebhookFields = {
  id: z.string(),
  url: z.string(),
  events: z.array(z.enum(EVENT_NAMES)),
  status: WebhookStatus,
  failureCount: z.number().int().describe('Consecutive failed deliveries (reset on success or on ACTIVE)'),
  lastDeliveryAt: IsoTime.nullable(),
  lastError: z.string().nullable().describe('Last delivery failure (status or timeout), or null'),
  createdAt: IsoTime,
  updatedAt: IsoTime,
  workspaceId: WorkspaceIdOutput,
};

export const Webhook = z
  .object(WebhookFields)
  .meta({ id: 'Webhook', description: 'A subscription to events, delivered signed with HMAC-SHA256' });

const DELIVERY =
  'Deliveries are POSTs of `{ event, timestamp, data }` with header `X-Service-Signature: sha256=<hex>`, ' +
  'the HMAC-SHA256 of the raw body keyed with the secret (the whole `whsec_...` string), plus ' +
  '`X-Service-Delivery` (a `dlv_` id, the same on every retry: deduplicate on it), `X-Service-Event`, ' +
  '`X-Service-Attempt` and `X-Service-Timestamp` (Unix seconds of the attempt). The URL must resolve to ' +
  'a public address. Retries: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h after the first attempt. After 5 ' +
  'consecutive failures (non-2xx or timeout) the webhook becomes PAUSED; events while PAUSED are recorded ' +
  `as skipped deliveries, which can be redelivered. Events: ${EVENT_NAMES.join(', ')}.`;

const DeliveryIds = WebhookId.extend({ deliveryId: z.string().min(1).max(200).describe('Delivery id (dlv_...)') });
const DeliveryStatus = z
  .enum(['pending', 'succeeded', 'failed', 'skipped'])
  .describe(
    'pending: an attempt is due; succeeded: a 2xx arrived; failed: the retry schedule ran out; ' +
      'skipped: not sent (or retries dropped) because the webhook was PAUSED',
  );
const Attempt = z.object({
  attempt: z.number().int().describe('1-based, counted across redeliveries'),
  at: IsoTime.describe('When the attempt started'),
  durationMs: z.number(),
  statusCode: z.number().int().nullable().describe('HTTP status, or null when no response arrived'),
  error: z.string().nullable().describe('Timeout, connection error or non-2xx status; null on success'),
  response: z.string().nullable().describe("First 512 bytes of the receiver's response body"),
});
export const Delivery = z
  .object({
    id: z.string().describe('Also sent as the X-Service-Delivery header'),
    webhookId: z.string(),
    event: z.enum(EVENT_NAMES),
    eventTimestamp: IsoTime,
    status: DeliveryStatus,
    attemptCount: z.number().int(),
    nextAttemptAt: IsoTime.nullable(),
    lastStatusCode: z.number().int().nullable(),
    lastError: z.string().nullable(),
    attempts: z.array(Attempt).describe('The most recent attempts (up to 20), oldest first'),
    createdAt: IsoTime,
    updatedAt: IsoTime,
  })
  .meta({ id: 'WebhookDelivery', description: 'One event sent to one webhook, with its attempts' });

export const webhooksOperations = [
  defineOperation({
    id: 'webhooks.list',
    method: 'GET',
    path: '/webhooks',
    summary: 'List your webhooks',
    tags,
    auth: ['owner'],
    query: WorkspaceFilter,
    response: z.object({ items: z.array(Webhook) }),
    handler: ({ services, principal, query }) => services.webhooks.list(principal, query.workspaceId),
  }),
  defineOperation({
    id: 'webhooks.create',
    method: 'POST',
    path: '/webhooks',
    summary: 'Subscribe a URL to events; the signing secret is returned only now',
    description: DELIVERY,
    tags,
    auth: ['owner'],
    body: z.object({ url: Url, events: Events, workspaceId: WorkspaceIdInput.optional() }),
    successStatus: 201,
    response: z
      .object({
        ...WebhookFields,
        secret: z.string().describe('HMAC-SHA256 signing secret; shown only once'),
      })
      .meta({ id: 'WebhookCreated' }),
    errors: [{ status: 409, code: 'WebhookLimit', description: 'the account already has 50 webhooks' }],
    handler: ({ services, principal, body }) => services.webhooks.create(principal, body),
  }),
  defineOperation({
    id: 'webhooks.get',
    method: 'GET',
    path: '/webhooks/{webhookId}',
    summary: 'Get a webhook',
    tags,
    auth: ['owner'],
    params: WebhookId,
    response: Webhook,
    handler: ({ services, principal, params }) => services.webhooks.get(principal, params.webhookId),
  }),
  defineOperation({
    id: 'webhooks.update',
    method: 'PATCH',
    path: '/webhooks/{webhookId}',
    summary: "Change a webhook's URL or events, or pause/resume it",
    description: 'Setting status ACTIVE resets the failure counter.',
    tags,
    auth: ['owner'],
    params: WebhookId,
    body: z.object({ url: Url.optional(), events: Events.optional(), status: WebhookStatus.optional() }),
    response: Webhook,
    handler: ({ services, principal, params, body }) => services.webhooks.update(principal, params.webhookId, body),
  }),
  defineOperation({
    id: 'webhooks.delete',
    method: 'DELETE',
    path: '/webhooks/{webhookId}',
    summary: 'Delete a webhook',
    tags,
    auth: ['owner'],
    params: WebhookId,
    response: Ok,
    handler: ({ services, principal, params }) => services.webhooks.delete(principal, params.webhookId),
  }),
  defineOperation({
    id: 'webhooks.deliveries.list',
    method: 'GET',
    path: '/webhooks/{webhookId}/deliveries',
    summary: "List a webhook's deliveries, newest first, with their attempts",
    description: 'Cursor pagination: pass `nextCursor` back as `cursor`. Filter with `status`.',
    tags,
    auth: ['owner'],
    params: WebhookId,
    query: PageQuery.extend({ status: DeliveryStatus.optional() }),
    response: z.object({
      items: z.array(Delivery),
      nextCursor: z.string().nullable().describe('Pass as `cursor` for the next page; null on the last page'),
      hasMore: z.boolean(),
    }),
    handler: ({ services, principal, params, query }) =>
      services.webhooks.listDeliveries(principal, params.webhookId, query),
  }),
  defineOperation({
    id: 'webhooks.deliveries.redeliver',
    method: 'POST',
    path: '/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver',
    summary: 'Send a delivery again now, with the same id and body and a fresh retry schedule',
    tags,
    auth: ['owner'],
    params: DeliveryIds,
    response: Delivery,
    errors: [{ status: 409, code: 'WebhookPaused', description: 'the webhook is PAUSED; set it ACTIVE first' }],
    handler: ({ services, principal, params }) =>
      services.webhooks.redeliver(principal, params.webhookId, params.deliveryId),
  }),
];
