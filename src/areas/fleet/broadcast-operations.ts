// Broadcasts (beyond the spec's tables; its `broadcast.sent` event): one message from the owner to every
// conversation of a fleet agent's channels.
import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime } from '../../platform/schemas.js';
import { FleetAgentId, tags } from './schemas.js';

const Broadcast = z
  .object({
    id: z.string(),
    fleetAgentId: z.string(),
    text: z.string(),
    status: z.enum(['sending', 'sent']).describe('sent: every conversation was tried (see sent and failed)'),
    total: z.number().int().describe('Conversations it is for (web conversations, and Telegram chats while a bot is connected)'),
    sent: z.number().int(),
    failed: z.number().int(),
    createdAt: IsoTime,
    finishedAt: IsoTime.nullable(),
  })
  .meta({ id: 'Broadcast', description: 'One message to every conversation of a fleet agent' });

const BroadcastId = FleetAgentId.extend({ broadcastId: z.string().min(1).max(200).describe('Broadcast id') });

export const broadcastOperations = [
  defineOperation({
    id: 'fleet.broadcast',
    method: 'POST',
    path: '/fleet-agents/{fleetAgentId}/broadcasts',
    summary: "Send one message to every conversation of a fleet agent's channels",
    description:
      'Runs as a durable job: web conversations get it in their transcript (the widget shows it on its next read), ' +
      'Telegram chats with sendMessage at most 30 a second, waiting when Telegram answers 429. `broadcast.sent` ' +
      'is sent when every conversation was tried, with the counts. 400 `NoRecipients` when the fleet agent has no ' +
      'conversation on its channels.',
    tags,
    auth: ['owner'],
    params: FleetAgentId,
    body: z.object({ text: z.string().min(1).max(32_000).describe('The message') }),
    response: Broadcast,
    errors: [{ status: 400, code: 'NoRecipients', description: 'No conversation on the fleet agent\'s channels yet' }],
    handler: ({ services, principal, params, body }) => services.fleet.broadcasts.create(principal, params.fleetAgentId, body.text),
  }),
  defineOperation({
    id: 'fleet.broadcasts',
    method: 'GET',
    path: '/fleet-agents/{fleetAgentId}/broadcasts',
    summary: "A fleet agent's broadcasts, newest first (the last 100)",
    tags,
    auth: ['owner'],
    params: FleetAgentId,
    response: z.object({ items: z.array(Broadcast) }),
    handler: ({ services, principal, params }) => services.fleet.broadcasts.list(principal, params.fleetAgentId),
  }),
  defineOperation({
    id: 'fleet.broadcastGet',
    method: 'GET',
    path: '/fleet-agents/{fleetAgentId}/broadcasts/{broadcastId}',
    summary: 'A broadcast and its counts (sent, failed)',
    tags,
    auth: ['owner'],
    params: BroadcastId,
    response: Broadcast,
    handler: ({ services, principal, params }) => services.fleet.broadcasts.get(principal, params.fleetAgentId, params.broadcastId),
  }),
];
