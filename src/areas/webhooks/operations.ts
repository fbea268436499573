import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok } from '../../platform/schemas.js';
import { EVENT_NAMES } from './events.js';

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
};

export const Webhook = z
  .object(WebhookFields)
  .meta({ id: 'Webhook', description: 'A subscription to events, delivered signed with HMAC-SHA256' });

const DELIVERY =
  'Deliveries are POSTs of `{ event, timestamp, data }` with header `X-Service-Signature: sha256=<hex>`, ' +
  'the HMAC-SHA256 of the raw body keyed with the secret. After 5 consecutive failures (non-2xx or ' +
  `timeout) the webhook becomes PAUSED. Events: ${EVENT_NAMES.join(', ')}.`;

export const webhooksOperations = [
  defineOperation({
    id: 'webhooks.list',
    method: 'GET',
    path: '/webhooks',
    summary: 'List your webhooks',
    tags,
    auth: ['owner'],
    response: z.object({ items: z.array(Webhook) }),
  }),
  defineOperation({
    id: 'webhooks.create',
    method: 'POST',
    path: '/webhooks',
    summary: 'Subscribe a URL to events; the signing secret is returned only now',
    description: DELIVERY,
    tags,
    auth: ['owner'],
    body: z.object({ url: Url, events: Events }),
    successStatus: 201,
    response: z
      .object({
        ...WebhookFields,
        secret: z.string().describe('HMAC-SHA256 signing secret; shown only once'),
      })
      .meta({ id: 'WebhookCreated' }),
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
  }),
];
