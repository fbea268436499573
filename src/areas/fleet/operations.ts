import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, StringMap } from '../../platform/schemas.js';

const tags = ['Fleet'];

const FleetAgentId = z.object({ fleetAgentId: z.string().min(1).max(200).describe('Fleet agent id') });

export const FleetAgent = z
  .object({
    id: z.string().describe('Fleet agent id (`fleetAgentId` in paths)'),
    name: z.string(),
    token: z
      .string()
      .describe('Per-agent token with scope MESSAGE, for message, message-stream and messages'),
    channels: z.array(z.string()).describe('Channels it answers on (`web`, messaging channels)'),
    configGroupIds: z.array(z.string()).describe('Configuration groups (prompt, MCP connectors) it can use'),
    createdAt: IsoTime,
  })
  .meta({ id: 'FleetAgent', description: 'An agent of the elastic multichannel fleet' });

/** Spec: "conversation id chosen by the caller, shape web-<uuid>". */
export const GROUP_ID_RE =
  /^web-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

export const FleetMessageBody = z
  .object({
    configGroupId: z
      .string()
      .min(1)
      .max(200)
      .optional()
      .describe(
        'Always send it: the unit of configuration (prompt, MCP connectors). Without it the agent starts ' +
          'with no connectors and no visible error',
      ),
    groupId: z.string().regex(GROUP_ID_RE).describe('Conversation id chosen by the caller: `web-<uuid>`'),
    text: z.string().min(1).max(32_000).describe('The user message'),
    senderName: z.string().max(200).optional().describe('Display name of the user'),
    metadata: StringMap.optional().describe('Caller metadata kept with the turn'),
  })
  .meta({ id: 'FleetMessageBody' });

const FULL = {
  status: 503,
  code: 'FleetFull',
  description: 'The fleet is full at this instant; the body carries `retryAfter` (seconds)',
};

const FleetMessage = z.object({
  id: z.string(),
  cursor: z.string().describe('Cursor of this item'),
  role: z.enum(['user', 'assistant', 'tool']),
  text: z.string(),
  turnId: z.string().nullable(),
  createdAt: IsoTime,
});

export const fleetOperations = [
  defineOperation({
    id: 'fleet.list',
    method: 'GET',
    path: '/fleet-agents',
    summary: 'List fleet agents, each with its message token',
    description: 'Needs a client credential. Listed under the historical key `pools`.',
    tags,
    auth: ['client'],
    response: z.object({ pools: z.array(FleetAgent) }),
  }),
  defineOperation({
    id: 'fleet.message',
    method: 'POST',
    path: '/fleet-agents/{fleetAgentId}/message',
    summary: 'Send a message to a fleet agent in a conversation and wait for the reply',
    description:
      'Authenticates with the per-agent token (scope MESSAGE). Always send configGroupId. 503 with ' +
      '`retryAfter` when the fleet is full: retry after that many seconds.',
    tags,
    auth: ['fleetAgent'],
    params: FleetAgentId,
    body: FleetMessageBody,
    response: z.object({
      reply: z.string(),
      turnId: z.string().optional().describe('Id of the turn (as in turn.completed)'),
      cursor: z.string().optional().describe('Cursor after this turn, to pass as `since` to messages'),
    }),
    errors: [{ status: 403, description: 'The token does not belong to this fleet agent' }, FULL],
  }),
  defineOperation({
    id: 'fleet.messageStream',
    method: 'POST',
    path: '/fleet-agents/{fleetAgentId}/message-stream',
    summary: 'Send a message to a fleet agent and stream the turn (Server-Sent Events)',
    description:
      'SSE events `chunk`, `tool`, `usage`, `capacity`, `done`. `done.value` is the authoritative reply; do ' +
      'not concatenate chunks. `capacity` is not a failure: retry after `retryAfter`.',
    tags,
    auth: ['fleetAgent'],
    params: FleetAgentId,
    body: FleetMessageBody,
    produces: 'text/event-stream',
    response: z.string().describe('Server-Sent Events stream'),
    errors: [{ status: 403, description: 'The token does not belong to this fleet agent' }],
  }),
  defineOperation({
    id: 'fleet.messages',
    method: 'GET',
    path: '/fleet-agents/{fleetAgentId}/messages',
    summary: 'Read a fleet conversation since a cursor',
    description:
      'Store the top-level `cursor` and send it as `since` next time. When `gap` is true reload the whole ' +
      'thread: gapReason `cursor_too_old` (the cursor no longer resolves) or `context_reset` (transcript ' +
      'kept but the agent box was lost without backup, so the model starts blank; `resetAt` says when). ' +
      'Accepts the agent token or an ephemeral public key (`flt_pk_`).',
    tags,
    auth: ['fleetAgent', 'fleetPublic'],
    params: FleetAgentId,
    query: z.object({
      groupId: z.string().min(1).max(200).describe('Conversation id (`web-<uuid>`)'),
      since: z.string().max(500).optional().describe('Cursor from a previous answer'),
      limit: z.coerce.number().int().min(1).max(200).default(50).describe('Items, 1-200 (default 50)'),
    }),
    response: z.object({
      items: z.array(FleetMessage),
      cursor: z.string().nullable().describe('Store it and send it as `since`'),
      hasMore: z.boolean(),
      gap: z.boolean().describe('True: reload the whole thread'),
      gapReason: z.enum(['cursor_too_old', 'context_reset']).optional(),
      resetAt: IsoTime.optional().describe('When the context was reset (gapReason context_reset)'),
    }),
  }),
];
