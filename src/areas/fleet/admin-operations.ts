// Managing the fleet (the spec: "fleet configuration: not shown"): fleet agents, configuration groups,
// client credentials, public read keys and the Telegram channel, designed like the rest of the registry.
import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok, WorkspaceIdInput } from '../../platform/schemas.js';
import { McpHttp, McpStdio } from '../agents/operations.js';
import { FleetAgent, FleetAgentId, GROUP_ID_RE, tags } from './schemas.js';

const Channels = z
  .array(z.enum(['web']))
  .min(1)
  .max(4)
  .refine((a) => new Set(a).size === a.length, { message: 'channels must not repeat' })
  .describe('Channels: `web` (messaging channels such as Telegram are not available yet)');
const FleetAgentFields = {
  name: z.string().min(1).max(128),
  model: z.string().min(1).max(200).nullable().optional(),
  instructions: z.string().max(32_000).optional(),
  channels: Channels.optional(),
  capacity: z.number().int().min(1).max(1000).optional().describe('Most boxes (default 2; at most NUBE_FLEET_MAX_BOXES)'),
  configGroupIds: z.array(z.string().min(1).max(200)).max(100).optional(),
};
const McpConnectors = z.array(z.union([McpStdio, McpHttp])).max(50).describe('MCP connectors: stdio {name, command, args?, env?} or http {name, type: http, url, headers?}');
export const ConfigGroup = z
  .object({
    id: z.string().describe('`configGroupId` in message bodies'),
    name: z.string(),
    prompt: z.string().describe('Prompt given to the model at the start of a conversation in this group'),
    mcpServers: McpConnectors,
    createdAt: IsoTime,
    updatedAt: IsoTime,
  })
  .meta({ id: 'FleetConfigGroup', description: 'A unit of configuration: a prompt and MCP connectors' });
const ConfigGroupId = z.object({ configGroupId: z.string().min(1).max(200).describe('Configuration group id') });
const ClientCredential = z.object({
  id: z.string(),
  name: z.string().nullable(),
  credential: z.string().nullable().describe('`nube_cc_...`, shown only when created'),
  createdAt: IsoTime,
});

export const fleetAdminOperations = [
  defineOperation({
    id: 'fleet.create',
    method: 'POST',
    path: '/fleet-agents',
    summary: 'Create a fleet agent (its MESSAGE token is in the answer)',
    tags,
    auth: ['owner'],
    body: z.object({ ...FleetAgentFields, workspaceId: WorkspaceIdInput.optional() }),
    response: FleetAgent,
    handler: ({ services, principal, body }) => services.fleet.admin.create(principal, body),
  }),
  defineOperation({
    id: 'fleet.get',
    method: 'GET',
    path: '/fleet-agents/{fleetAgentId}',
    summary: 'Get a fleet agent with its token',
    tags,
    auth: ['owner'],
    params: FleetAgentId,
    response: FleetAgent,
    handler: async ({ services, principal, params }) => services.fleet.admin.view(await services.fleet.admin.own(principal, params.fleetAgentId)),
  }),
  defineOperation({
    id: 'fleet.update',
    method: 'PATCH',
    path: '/fleet-agents/{fleetAgentId}',
    summary: 'Change a fleet agent (rotateToken issues a new token; the old one stops working)',
    tags,
    auth: ['owner'],
    params: FleetAgentId,
    body: z.object({ ...FleetAgentFields, name: FleetAgentFields.name.optional(), rotateToken: z.boolean().optional() }),
    response: FleetAgent,
    handler: ({ services, principal, params, body }) => services.fleet.admin.update(principal, params.fleetAgentId, body),
  }),
  defineOperation({
    id: 'fleet.delete',
    method: 'DELETE',
    path: '/fleet-agents/{fleetAgentId}',
    summary: 'Delete a fleet agent, its boxes and its conversations',
    tags,
    auth: ['owner'],
    params: FleetAgentId,
    response: Ok,
    handler: ({ services, principal, params }) => services.fleet.deleteAgent(principal, params.fleetAgentId),
  }),
  defineOperation({
    id: 'fleet.publicKey',
    method: 'POST',
    path: '/fleet-agents/{fleetAgentId}/public-keys',
    summary: 'Issue an ephemeral public key (`flt_pk_`) that reads one conversation',
    description: 'Short-lived and read-only: a browser reads the conversation `groupId` with it (GET messages).',
    tags,
    auth: ['owner', 'fleetAgent'],
    params: FleetAgentId,
    body: z.object({
      groupId: z.string().regex(GROUP_ID_RE).describe('The conversation it reads: `web-<uuid>`'),
      ttlSeconds: z.number().int().min(30).max(86_400).optional().describe('Lifetime (default 900 s)'),
    }),
    response: z.object({ key: z.string(), groupId: z.string(), expiresAt: IsoTime }),
    handler: ({ services, principal, params, body }) => services.fleet.admin.publicKey(principal, params.fleetAgentId, body.groupId, body.ttlSeconds),
  }),
  defineOperation({
    id: 'fleet.telegram.connect',
    method: 'PUT',
    path: '/fleet-agents/{fleetAgentId}/telegram',
    summary: 'Connect a Telegram bot: its chats become conversations of this fleet agent',
    description:
      "nube registers its webhook with the bot (setWebhook, with a secret); each text message runs a turn in the conversation " +
      '`tg-<chat id>` and the reply is sent with sendMessage. Read it with GET messages (groupId `tg-<chat id>`).',
    tags,
    auth: ['owner'],
    params: FleetAgentId,
    body: z.object({ botToken: z.string().regex(/^\d{1,20}:[A-Za-z0-9_-]{20,100}$/).describe('The token BotFather gave the bot') }),
    response: z.object({ fleetAgentId: z.string(), channel: z.literal('telegram'), webhookUrl: z.string(), channels: z.array(z.string()) }),
    errors: [{ status: 502, code: 'TelegramError', description: 'Telegram refused setWebhook (wrong token, unreachable URL)' }],
    handler: ({ services, principal, params, body }) => services.fleet.telegram.connect(principal, params.fleetAgentId, body.botToken),
  }),
  defineOperation({
    id: 'fleet.telegram.disconnect',
    method: 'DELETE',
    path: '/fleet-agents/{fleetAgentId}/telegram',
    summary: 'Disconnect the Telegram bot (deleteWebhook)',
    tags,
    auth: ['owner'],
    params: FleetAgentId,
    response: Ok,
    handler: ({ services, principal, params }) => services.fleet.telegram.disconnect(principal, params.fleetAgentId),
  }),
  defineOperation({
    id: 'fleet.configGroups.create',
    method: 'POST',
    path: '/fleet-config-groups',
    summary: 'Create a configuration group (a prompt and MCP connectors)',
    tags,
    auth: ['owner'],
    body: z.object({ name: z.string().min(1).max(128), prompt: z.string().max(32_000).optional(), mcpServers: McpConnectors.optional() }),
    response: ConfigGroup,
    handler: ({ services, principal, body }) => services.fleet.admin.createGroup(principal, body),
  }),
  defineOperation({
    id: 'fleet.configGroups.list',
    method: 'GET',
    path: '/fleet-config-groups',
    summary: 'List configuration groups',
    tags,
    auth: ['owner'],
    response: z.object({ configGroups: z.array(ConfigGroup) }),
    handler: ({ services, principal }) => services.fleet.admin.listGroups(principal),
  }),
  defineOperation({
    id: 'fleet.configGroups.get',
    method: 'GET',
    path: '/fleet-config-groups/{configGroupId}',
    summary: 'Get a configuration group',
    tags,
    auth: ['owner'],
    params: ConfigGroupId,
    response: ConfigGroup,
    handler: async ({ services, principal, params }) => services.fleet.admin.groupView(await services.fleet.admin.ownGroup(principal, params.configGroupId)),
  }),
  defineOperation({
    id: 'fleet.configGroups.update',
    method: 'PATCH',
    path: '/fleet-config-groups/{configGroupId}',
    summary: 'Change a configuration group (new conversations use it; running ones keep their connectors)',
    tags,
    auth: ['owner'],
    params: ConfigGroupId,
    body: z.object({ name: z.string().min(1).max(128).optional(), prompt: z.string().max(32_000).optional(), mcpServers: McpConnectors.optional() }),
    response: ConfigGroup,
    handler: ({ services, principal, params, body }) => services.fleet.admin.updateGroup(principal, params.configGroupId, body),
  }),
  defineOperation({
    id: 'fleet.configGroups.delete',
    method: 'DELETE',
    path: '/fleet-config-groups/{configGroupId}',
    summary: 'Delete a configuration group no fleet agent lists',
    tags,
    auth: ['owner'],
    params: ConfigGroupId,
    response: Ok,
    errors: [{ status: 409, code: 'ConfigGroupInUse', description: 'Fleet agents still list it (body has fleetAgentIds)' }],
    handler: ({ services, principal, params }) => services.fleet.admin.deleteGroup(principal, params.configGroupId),
  }),
  defineOperation({
    id: 'fleet.clientCredentials.create',
    method: 'POST',
    path: '/fleet-client-credentials',
    summary: 'Create a client credential (`nube_cc_`) that lists fleet agents with their tokens',
    tags,
    auth: ['owner'],
    bodyOptional: true,
    body: z.object({ name: z.string().min(1).max(128).optional() }),
    response: ClientCredential,
    handler: ({ services, principal, body }) => services.fleet.admin.createClient(principal, body?.name),
  }),
  defineOperation({
    id: 'fleet.clientCredentials.list',
    method: 'GET',
    path: '/fleet-client-credentials',
    summary: 'List client credentials (without their secret)',
    tags,
    auth: ['owner'],
    response: z.object({ clientCredentials: z.array(ClientCredential) }),
    handler: ({ services, principal }) => services.fleet.admin.listClients(principal),
  }),
  defineOperation({
    id: 'fleet.clientCredentials.delete',
    method: 'DELETE',
    path: '/fleet-client-credentials/{credentialId}',
    summary: 'Revoke a client credential',
    tags,
    auth: ['owner'],
    params: z.object({ credentialId: z.string().min(1).max(200) }),
    response: Ok,
    handler: ({ services, principal, params }) => services.fleet.admin.deleteClient(principal, params.credentialId),
  }),
];
