import { z } from 'zod';
import { defineOperation, RawResponse } from '../../platform/operation.js';
import { IsoTime, StringMap, WorkspaceFilter } from '../../platform/schemas.js';
import { fleetAdminOperations } from './admin-operations.js';
import { broadcastOperations } from './broadcast-operations.js';
import type { FleetService } from './facade.js';
import { FleetAgent, FleetAgentId, GROUP_ID_RE, tags } from './schemas.js';

export { FleetAgent, GROUP_ID_RE } from './schemas.js';

declare module '../../platform/operation.js' {
  interface Services {
    fleet: FleetService;
  }
}

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

const SinceQuery = {
  since: z.string().max(500).optional().describe('Cursor from a previous answer'),
  limit: z.coerce.number().int().min(1).max(200).default(50).describe('Items, 1-200 (default 50)'),
};

const MessagesPage = z.object({
  items: z.array(FleetMessage),
  cursor: z.string().nullable().describe('Store it and send it as `since`'),
  hasMore: z.boolean(),
  gap: z.boolean().describe('True: reload the whole thread'),
  gapReason: z.enum(['cursor_too_old', 'context_reset']).optional(),
  resetAt: IsoTime.optional().describe('When the context was reset (gapReason context_reset)'),
});

export const fleetOperations = [
  ...fleetAdminOperations,
  ...broadcastOperations,
  defineOperation({
    id: 'fleet.list',
    method: 'GET',
    path: '/fleet-agents',
    summary: 'List fleet agents, each with its message token',
    description: 'Needs a client credential (POST /fleet-client-credentials). Listed under the historical key `pools`.',
    tags,
    auth: ['client'],
    query: WorkspaceFilter,
    response: z.object({ pools: z.array(FleetAgent) }),
    handler: ({ services, principal, query }) => services.fleet.admin.list(principal, query.workspaceId),
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
      memoryReset: z.boolean().optional().describe('True when the agent ran with blank memory (its box was lost)'),
      warning: z.string().optional().describe('Set when configGroupId was left out: the turn ran with no connectors'),
    }),
    errors: [
      { status: 403, description: 'The token does not belong to this fleet agent' },
      { status: 402, code: 'InsufficientBalance', description: "The plan's LLM tokens are used up" },
      { status: 502, description: 'The turn ended with no reply (body has turnId; turn.failed was sent)' },
      FULL,
    ],
    handler: ({ services, principal, params, body }) => services.fleet.message(principal, params.fleetAgentId, body),
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
    handler: async ({ services, principal, params, body }) =>
      new RawResponse(await services.fleet.messageStream(principal, params.fleetAgentId, body), 'text/event-stream', { 'cache-control': 'no-cache' }),
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
      'Accepts the agent token (web conversations, `web-<uuid>`, only) or an ephemeral public key (`flt_pk_`: its ' +
      'one conversation). The owner reads any conversation, Telegram chats included, with ' +
      '`GET /fleet-agents/{fleetAgentId}/conversations/{groupId}/messages`.',
    tags,
    auth: ['fleetAgent', 'fleetPublic'],
    params: FleetAgentId,
    query: z.object({ groupId: z.string().min(1).max(200).describe('Conversation id (`web-<uuid>`)'), ...SinceQuery }),
    response: MessagesPage,
    errors: [
      { status: 400, code: 'InvalidCursor', description: 'since is not a cursor of this conversation' },
      { status: 403, code: 'CredentialNotAllowed', description: "A token reading a conversation not on the web channel, or a public key another conversation" },
    ],
    handler: ({ services, principal, params, query }) => services.fleet.messages(principal, params.fleetAgentId, query),
  }),
  defineOperation({
    id: 'fleet.conversationMessages',
    method: 'GET',
    path: '/fleet-agents/{fleetAgentId}/conversations/{groupId}/messages',
    summary: "Read any conversation of your fleet agent (the owner's view, every channel)",
    description:
      'As `GET /fleet-agents/{fleetAgentId}/messages`, for the owner: any conversation, Telegram chats (`tg-<chat id>`) ' +
      'included, which the MESSAGE token (a public page\'s) cannot read.',
    tags,
    auth: ['owner'],
    params: FleetAgentId.extend({ groupId: z.string().min(1).max(200).describe('Conversation id') }),
    query: z.object(SinceQuery),
    response: MessagesPage,
    errors: [{ status: 400, code: 'InvalidCursor', description: 'since is not a cursor of this conversation' }],
    handler: ({ services, principal, params, query }) =>
      services.fleet.messages(principal, params.fleetAgentId, { ...query, groupId: params.groupId }),
  }),
];
