import { z } from 'zod';
import { KeyScopeInput, keyRequest } from '../account/key-scope.js';
import { defineOperation, RawResponse } from '../../platform/operation.js';
import { IsoTime, Ok, StringMap, WorkspaceFilter, WorkspaceIdInput, WorkspaceIdOutput } from '../../platform/schemas.js';
import { HeldVolume, VolumeMounts } from '../sandboxes/schemas.js';
import type { AgentsService } from './facade.js';

declare module '../../platform/operation.js' {
  interface Services {
    agents: AgentsService;
  }
}

const tags = ['Agents'];

/** The longest message a turn takes (characters): what an agent keeps in its sessions stays bounded. */
export const MAX_MESSAGE_CHARS = 64 * 1024;

const AgentId = z.object({ id: z.string().min(1).max(200).describe('Agent id') });
const AgentStatus = z
  .enum(['building', 'running', 'lost'])
  .describe('building: wait until running before the first message; lost: its box is gone (revive it)');

export const Agent = z
  .object({
    id: z.string(),
    agentId: z.string().describe('Same as id'),
    name: z.string().nullable(),
    template: z
      .string()
      .describe('Agent template (`goose`, the default ACP template, a code-agent template)'),
    status: AgentStatus,
    sandboxId: z.string().nullable().describe('The microVM the agent runs in'),
    wsUrl: z.string().nullable().describe("The agent's own endpoint (WebSocket)"),
    embedToken: z
      .string()
      .nullable()
      .describe('Agent-scoped token (`agt_...`) for message, try and GET of this agent (browsers too). Shown only by POST /agents: it is stored hashed'),
    timeoutSeconds: z.number().int().nullable(),
    volumes: z.array(HeldVolume).describe('Volumes the agent holds; every box of it mounts them (across revives)'),
    error: z.string().nullable().describe('Why the build failed or the agent was lost, if known'),
    createdAt: IsoTime,
    updatedAt: IsoTime,
    workspaceId: WorkspaceIdOutput,
  })
  .meta({ id: 'Agent', description: 'A persistent agent in its own microVM, with its own endpoint' });

export const McpStdio = z.object({
  name: z.string().min(1).max(64),
  type: z.literal('stdio').optional(),
  command: z.string().min(1).max(4096),
  args: z.array(z.string()).optional(),
  env: StringMap.optional(),
});
export const McpHttp = z.object({
  name: z.string().min(1).max(64),
  type: z.literal('http'),
  url: z.url(),
  headers: StringMap.optional(),
});

export const agentsOperations = [
  defineOperation({
    id: 'agents.list',
    method: 'GET',
    path: '/agents',
    summary: 'List your hosted agents',
    tags,
    auth: ['owner'],
    query: WorkspaceFilter,
    response: z.object({ agents: z.array(Agent) }),
    handler: ({ services, principal, query }) => services.agents.core.list(principal, query.workspaceId),
  }),
  defineOperation({
    id: 'agents.create',
    method: 'POST',
    path: '/agents',
    summary: 'Create a persistent agent from a template in its own microVM',
    description:
      'Returns the agent with status `building`; poll GET /agents/{id} until `running` before the first ' +
      'message. `env` is required (`{}` when the template needs nothing). mcpServers apply to ACP templates only.',
    tags,
    auth: ['owner'],
    body: z.object({
      template: z.string().min(1).max(128).describe('Agent template, e.g. `goose`'),
      env: StringMap.describe('Environment for the agent (`{}` when the template needs nothing)'),
      name: z.string().min(1).max(128).optional(),
      timeoutSeconds: z.number().int().min(60).optional().describe('Lifetime of the agent box'),
      seedFiles: z
        .array(
          z.object({
            name: z.string().min(1).max(1024).describe('Path in the workspace'),
            contentBase64: z.string(),
          }),
        )
        .max(1000)
        .optional()
        .describe('Files written into the workspace before start'),
      mcpServers: z
        .array(z.union([McpStdio, McpHttp]))
        .max(50)
        .optional()
        .describe(
          'MCP servers (ACP templates only): stdio {name, command, args?, env?} or http {name, type: http, url, headers?}',
        ),
      volumes: VolumeMounts.optional().describe(
        'Volumes the agent holds and its box mounts (at most 8), kept across revives and released when the agent is deleted. The agent is placed on their node. One writer per volume (409 VolumeBusy)',
      ),
      nubeKey: KeyScopeInput.optional().describe(
        'nube mints a key with this scope (never wider than the caller\'s), puts it in the box as NUBE_API_KEY with NUBE_BASE_URL, and revokes it when the agent is deleted',
      ),
      workspaceId: WorkspaceIdInput.optional(),
    }),
    response: Agent,
    errors: [
      { status: 400, code: 'TemplateUnavailable', description: 'The template\'s program is not provisioned on this host (goose: scripts/install-goose.sh)' },
      { status: 402, code: 'InsufficientBalance', description: "The plan's LLM tokens for this month are used up (Byte includes none)" },
      { status: 402, code: 'SessionTooLong', description: "timeoutSeconds is above the plan's session length (1 h / 4 h / 24 h)" },
      { status: 403, code: 'PlanLimitReached', description: 'The simultaneous agents allowance (4 / 8 / 20) is used up' },
      { status: 503, code: 'LlmNotConfigured', description: 'No LLM upstream: the operator set no NUBE_LLM_BASE_URL and the account has no AI key' },
    ],
    handler: ({ services, principal, body }) =>
      services.agents.core.create(principal, { ...body, nubeKey: body.nubeKey && keyRequest(body.nubeKey) }),
  }),
  defineOperation({
    id: 'agents.get',
    method: 'GET',
    path: '/agents/{id}',
    summary: 'Get an agent and its status',
    description: "Also accepts the agent's own embedToken (`agt_`).",
    tags,
    auth: ['owner', 'agent'],
    params: AgentId,
    response: Agent,
    handler: ({ services, principal, params }) => services.agents.core.get(principal, params.id),
  }),
  defineOperation({
    id: 'agents.delete',
    method: 'DELETE',
    path: '/agents/{id}',
    summary: 'Delete an agent and its microVM',
    description: 'Its sandbox, gateway credential, embed token, sessions and transcript go with it.',
    tags,
    auth: ['owner'],
    params: AgentId,
    response: Ok,
    handler: ({ services, principal, params }) => services.agents.core.delete(principal, params.id),
  }),
  defineOperation({
    id: 'agents.message',
    method: 'POST',
    path: '/agents/{id}/message',
    summary: 'Send a message to an agent and stream its reply (Server-Sent Events)',
    description:
      'SSE events: `{type: "chunk", value}`, optionally `{type: "usage", ...}`, then `{type: "done", session}`. A lost ' +
      "agent is revived automatically. Also accepts the agent's embedToken (`agt_`) as bearer, from any CORS origin: " +
      "an embed caller never reaches the owner's sessions (without `session` it gets a new one of its own; `done` " +
      `says which). A message is at most ${MAX_MESSAGE_CHARS} characters.`,
    tags,
    auth: ['owner', 'agent'],
    params: AgentId,
    body: z.object({
      content: z.string().min(1).max(MAX_MESSAGE_CHARS).describe(`The message (at most ${MAX_MESSAGE_CHARS} characters)`),
      session: z.string().max(200).optional().describe('Session to continue (from a previous `done`); default: the owner\'s default session, or for an embed token a new one'),
    }),
    produces: 'text/event-stream',
    response: z.string().describe('Server-Sent Events stream'),
    handler: async ({ services, principal, params, body }) => {
      const stream = await services.agents.message(principal, params.id, body);
      return new RawResponse(stream, 'text/event-stream', { 'cache-control': 'no-cache', 'x-accel-buffering': 'no' });
    },
  }),
  defineOperation({
    id: 'agents.try',
    method: 'POST',
    path: '/agents/{id}/try',
    summary: 'Send a message to an agent and wait for its whole reply (up to 180 s)',
    description:
      'Waits up to 180 s. 409 with error `turno_en_curso` and `session` when a turn is already running in ' +
      'that session; 502 when the agent ends without text. `reset: true` opens a new session (the owner\'s ' +
      "new default). With an embed token the turn runs in a session of the embed callers' own, never the " +
      `owner's. A message is at most ${MAX_MESSAGE_CHARS} characters.`,
    tags,
    auth: ['owner', 'agent'],
    params: AgentId,
    body: z.object({
      text: z.string().min(1).max(MAX_MESSAGE_CHARS).describe(`The message (at most ${MAX_MESSAGE_CHARS} characters)`),
      session: z.string().max(200).optional().describe('Session to continue (from a previous answer)'),
      reset: z.boolean().optional().describe('Open a new session'),
    }),
    response: z.object({
      text: z.string().describe('The reply'),
      error: z.string().nullable(),
      session: z.string().nullable().describe('Session to pass next time'),
      ms: z.number().int().describe('Duration of the turn'),
    }),
    errors: [
      {
        status: 409,
        code: 'turno_en_curso',
        description: 'A turn is already running in that session (value of `error`); body has `session`',
      },
      { status: 402, code: 'InsufficientBalance', description: "The plan's LLM tokens for this month are used up" },
      { status: 502, description: 'The agent ended without producing text (code `AgentNoText`)' },
    ],
    handler: ({ services, principal, params, body }) => services.agents.try(principal, params.id, body),
  }),
  defineOperation({
    id: 'agents.revive',
    method: 'POST',
    path: '/agents/{id}/revive',
    summary: 'Revive a lost agent (same agentId and URL; its previous disk is lost)',
    description: 'Takes roughly 10-60 s; wait for the response and do not retry.',
    tags,
    auth: ['owner'],
    params: AgentId,
    response: z.object({
      agentId: z.string(),
      sandboxId: z.string(),
      status: AgentStatus,
      wsUrl: z.string(),
    }),
    handler: ({ services, principal, params }) => services.agents.revive(principal, params.id),
  }),
  defineOperation({
    id: 'agents.turns',
    method: 'GET',
    path: '/agents/{id}/turns',
    summary: "An agent's transcript: its latest turns, oldest first",
    description: 'Beyond the spec: every message and try is kept, also when its client disconnected.',
    tags,
    auth: ['owner'],
    params: AgentId,
    query: z.object({
      session: z.string().max(200).optional().describe('Only this session'),
      limit: z.coerce.number().int().min(1).max(500).default(100),
    }),
    response: z.object({
      turns: z.array(
        z.object({
          id: z.string(),
          session: z.string(),
          status: z.enum(['queued', 'running', 'done', 'failed']),
          input: z.string(),
          output: z.string(),
          error: z.object({ code: z.string(), message: z.string() }).nullable(),
          usage: z
            .object({ model: z.string().nullable(), inputTokens: z.number(), outputTokens: z.number(), toolCalls: z.number() })
            .nullable(),
          createdAt: IsoTime,
          finishedAt: IsoTime.nullable(),
        }),
      ),
    }),
    handler: ({ services, principal, params, query }) => services.agents.transcript(principal, params.id, query.session, query.limit),
  }),
];
