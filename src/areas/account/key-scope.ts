import { z } from 'zod';
import type { HolderAddress, Principal } from '../../platform/auth.js';
import { ApiError } from '../../platform/errors.js';
import type { Services } from '../../platform/operation.js';
import { resourceArea } from '../../platform/scopes.js';
import type { KeyRequest, ResourceOwnership } from './service.js';

// The scope a key asks for, in the API's terms: POST /account/keys, and an agent's or machine's
// `nubeKey` (nube mints the key for the box and revokes it with the box).

const IpOrRange = z.union([z.ipv4(), z.ipv6(), z.cidrv4()]);
/** What a scoped key asks for; the same shape is an agent's or machine's `nubeKey`. */
export const KeyScopeInput = z.object({
  scopes: z
    .array(z.string().min(1).max(100))
    .min(1)
    .max(200)
    .describe('`<area>:read`, `<area>:write` (writes include reads) or operation ids such as `databases.query`'),
  workspaceIds: z
    .array(z.string().min(1).max(100))
    .min(1)
    .max(50)
    .optional()
    .describe('Narrow the key to these workspaces: it reaches, lists and creates only their resources (others are 404)'),
  resourceIds: z
    .array(z.string().min(1).max(100))
    .min(1)
    .max(100)
    .optional()
    .describe('Narrow the key to these sandboxes, databases, agents, files or machines (ids of this account)'),
  expiresAt: z.iso.datetime({ offset: true }).optional().describe('After this time the key is refused (401 KeyExpired)'),
  caps: z
    .object({
      aiCredits: z.number().int().min(0).optional().describe('AI credits (web queries included) this key may spend per month'),
      webQueries: z.number().int().min(0).optional().describe('Web queries this key may make per month'),
      llmTokens: z
        .number()
        .int()
        .min(0)
        .optional()
        .describe('LLM tokens the work this key starts may use per month (documents from a prompt, agent turns); checked before a call starts'),
      sandboxCpuSeconds: z.number().int().min(0).optional().describe('CPU seconds the sandboxes this key creates may use per month'),
    })
    .strict()
    .optional()
    .describe('Monthly spending limits of this key; past one, 402 KeyCapReached'),
  allowedIps: z.array(IpOrRange).min(1).max(50).optional().describe('Source addresses (IPv4/IPv6, or IPv4 CIDR) the key is accepted from'),
});
export type KeyScopeBody = z.infer<typeof KeyScopeInput>;

/** A key request's body in the service's terms. */
export function keyRequest(b: KeyScopeBody): Omit<KeyRequest, 'name'> {
  const caps = b.caps && Object.fromEntries(Object.entries(b.caps).filter(([, v]) => v !== undefined));
  return {
    scopes: b.scopes,
    resourceIds: b.resourceIds,
    workspaceIds: b.workspaceIds && [...new Set(b.workspaceIds)],
    expiresAt: b.expiresAt === undefined ? undefined : Date.parse(b.expiresAt),
    caps,
    allowedIps: b.allowedIps,
  };
}

/** Whether a resource id names one of the account's own (by its prefix, through that area's service). */

export function ownsResource(services: Services): ResourceOwnership {
  const get: Record<string, (owner: Principal, id: string) => Promise<unknown>> = {
    sandboxes: (owner, id) => services.sandboxes.get(owner, id),
    databases: (owner, id) => services.databases.get(owner, id),
    agents: (owner, id) => services.agents.core.get(owner, id),
    files: (owner, id) => services.files.get(owner, id),
    machines: (owner, id) => services.machines.core.get(owner, id),
  };
  return async (p, id) => {
    const area = resourceArea(id);
    if (!area) return false;
    // Looked up as the account's full owner: the creator's own narrowing is checked separately.
    const owner: Principal = { scheme: 'owner', ownerId: p.ownerId, plan: p.plan };
    try {
      await get[area]!(owner, id);
      return true;
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) return false;
      throw e;
    }
  };
}

/**
 * The sandboxes area's reach guard (server.ts wires it): for each box (a sandbox and the boxes it was
 * forked from), the agent or machine it belongs to, and whether the caller covers the key nube minted
 * for it. Only scoped callers are asked (SandboxesCore.own).
 */
export function boxReachGuard(services: Services): (p: Principal, sandboxIds: string[]) => Promise<void> {
  return async (p, sandboxIds) => {
    for (const id of sandboxIds) {
      const [agentId, machine] = await Promise.all([services.agents.core.repo.bySandbox(p.ownerId, id), services.machines.core.repo.bySandbox(id)]);
      const what = id === sandboxIds[0] ? `sandbox ${id}` : `sandbox ${sandboxIds[0]} (forked from ${id})`;
      if (agentId) await services.account.assertCovers(p, `agent:${agentId}`, what);
      if (machine && machine.owner_id === p.ownerId) await services.account.assertCovers(p, `machine:${machine.id}`, what);
    }
  };
}

/**
 * Where the box of a minted key's holder is now (server.ts hands it to the Authenticator): the bridge
 * address of the agent's or machine's current sandbox (a revive or restart's new one), null while it has
 * none running here. Read per request, never cached: an address freed by one box is another's next.
 */
export function holderAddress(services: Services): HolderAddress {
  return async (ownerId, holder) => {
    const [kind, id] = holder.split(':', 2) as [string, string | undefined];
    if (!id) return null;
    let sandboxId: string | null | undefined;
    if (kind === 'agent') {
      const a = await services.agents.core.repo.get(id);
      sandboxId = a?.owner_id === ownerId ? a.sandbox_id : null;
    } else if (kind === 'machine') {
      const m = await services.machines.core.repo.get(id);
      sandboxId = m?.owner_id === ownerId ? m.sandbox_id : null;
    }
    return sandboxId ? services.sandboxes.boxAddress(ownerId, sandboxId) : null;
  };
}
