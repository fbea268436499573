// Schemas the fleet's operations share (spec operations and management operations).
import { z } from 'zod';
import { IsoTime, WorkspaceIdOutput } from '../../platform/schemas.js';

export const tags = ['Fleet'];

export const FleetAgentId = z.object({ fleetAgentId: z.string().min(1).max(200).describe('Fleet agent id') });

export const FleetAgent = z
  .object({
    id: z.string().describe('Fleet agent id (`fleetAgentId` in paths)'),
    name: z.string(),
    token: z
      .string()
      .describe('Per-agent token with scope MESSAGE, for message, message-stream and messages'),
    model: z.string().nullable().describe("Model asked for; the LLM gateway's upstream decides (usage.model says which ran)"),
    instructions: z.string().describe('Instructions given to the model at the start of every conversation'),
    channels: z.array(z.string()).describe('Channels it answers on (`web`, messaging channels)'),
    capacity: z.number().int().describe('Most boxes (sandboxes) the fleet agent grows to'),
    configGroupIds: z.array(z.string()).describe('Configuration groups (prompt, MCP connectors) it accepts; empty: any of yours'),
    createdAt: IsoTime,
    updatedAt: IsoTime,
    workspaceId: WorkspaceIdOutput,
  })
  .meta({ id: 'FleetAgent', description: 'An agent of the elastic multichannel fleet' });

/** Spec: "conversation id chosen by the caller, shape web-<uuid>". */
export const GROUP_ID_RE =
  /^web-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
