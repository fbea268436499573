import { z } from 'zod';
import { PLAN_NAMES } from '../../platform/plans.js';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok, ok } from '../../platform/schemas.js';
import { KeyScopeInput, keyRequest } from './key-scope.js';
import type { KeyRow } from './repo.js';
import type { AccountService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    account: AccountService;
  }
}

const tags = ['Account'];
const Allowance = z.object({ used: z.number(), limit: z.number().nullable(), remaining: z.number().nullable() });
const Key = z.object({
  id: z.string(),
  name: z.string(),
  preview: z.string().describe('First characters of the key'),
  createdAt: IsoTime,
  revokedAt: IsoTime.nullable(),
  scopes: z.array(z.string()).nullable().describe('Null for a full owner key'),
  resourceIds: z.array(z.string()).nullable(),
  workspaceIds: z.array(z.string()).nullable().describe('The workspaces the key is narrowed to; null: every workspace'),
  expiresAt: IsoTime.nullable(),
  caps: z.object({ aiCredits: z.number().optional(), webQueries: z.number().optional(), llmTokens: z.number().optional(), sandboxCpuSeconds: z.number().optional() }).nullable(),
  allowedIps: z.array(z.string()).nullable(),
  holder: z.string().nullable().describe('`agent:<id>` or `machine:<id>` for keys nube minted for a box'),
});
const AiKeyOut = z.object({
  configured: z.boolean(),
  baseUrl: z.string().nullable(),
  model: z.string().nullable(),
  keyPreview: z.string().nullable().describe('First and last characters of the key'),
  updatedAt: IsoTime.nullable(),
});
const keyOut = (k: KeyRow) => ({
  id: k.id,
  name: k.name,
  preview: k.preview,
  createdAt: new Date(k.createdAt).toISOString(),
  revokedAt: k.revokedAt === null ? null : new Date(k.revokedAt).toISOString(),
  scopes: k.limits?.scopes ?? null,
  resourceIds: k.limits?.resourceIds ?? null,
  workspaceIds: k.limits?.workspaceIds ?? null,
  expiresAt: k.expiresAt === null ? null : new Date(k.expiresAt).toISOString(),
  caps: k.limits?.caps ?? null,
  allowedIps: k.limits?.allowedIps ?? null,
  holder: k.holder,
});

export const accountOperations = [
  defineOperation({
    id: 'account.get',
    method: 'GET',
    path: '/account',
    summary: 'Identity and plan of the calling account',
    tags,
    auth: ['owner'],
    response: z.object({
      id: z.string(),
      name: z.string(),
      createdAt: IsoTime,
      credential: z.object({ scheme: z.string(), id: z.string().nullable() }),
      plan: z.object({
        name: z.enum(PLAN_NAMES),
        title: z.string(),
        monthlyMxn: z.number(),
        listMonthlyMxn: z.number(),
        currency: z.literal('MXN'),
      }),
    }),
    handler: ({ services, principal }) => services.account.getAccount(principal),
  }),
  defineOperation({
    id: 'account.usage',
    method: 'GET',
    path: '/account/usage',
    summary: "Usage this month against the plan's allowances",
    tags,
    auth: ['owner'],
    response: z.object({
      plan: z.enum(PLAN_NAMES),
      period: z.string().describe('YYYY-MM'),
      storageBytes: Allowance,
      aiCredits: Allowance,
      llmTokens: Allowance,
      databases: Allowance,
      boxes: Allowance,
      simultaneousAgents: Allowance,
      volumes: Allowance,
      volumeGB: Allowance.describe('The sum of the volumes\' limits in GiB'),
      sessionSeconds: z.number(),
      trashRetentionDays: z.number(),
      workspaces: z
        .array(
          z.object({
            id: z.string(),
            name: z.string(),
            resources: z.record(z.string(), z.number().int()).describe('Resources per kind; kinds with none are left out'),
            storageBytes: z.number().describe('Bytes stored by its files and databases'),
          }),
        )
        .describe("Per workspace the caller reaches (the plan's allowances above stay per account)"),
    }),
    handler: async ({ services, principal }) => {
      const [usage, workspaces] = await Promise.all([services.account.getUsage(principal), services.workspaces.usage(principal)]);
      return { ...usage, workspaces };
    },
  }),
  defineOperation({
    id: 'account.llmBalance',
    method: 'GET',
    path: '/account/llm-tokens',
    summary: 'LLM token balance for agents this month',
    tags,
    auth: ['owner'],
    response: z.object({
      period: z.string(),
      allowance: z.number(),
      used: z.number(),
      remaining: z.number(),
      included: z.boolean().describe('False when the plan includes no LLM tokens'),
    }),
    handler: ({ services, principal }) => services.account.getLlmBalance(principal),
  }),
  defineOperation({
    id: 'account.keys.list',
    method: 'GET',
    path: '/account/keys',
    summary: "The account's API keys (never their secrets)",
    tags,
    auth: ['owner'],
    response: z.object({ items: z.array(Key) }),
    handler: async ({ services, principal }) => ({
      items: (await services.account.listKeys(principal.ownerId)).map(keyOut),
    }),
  }),
  defineOperation({
    id: 'account.keys.create',
    method: 'POST',
    path: '/account/keys',
    summary: 'Create an API key; its secret is returned only now',
    tags,
    auth: ['owner'],
    description:
      'A key in `format: "e2b"` looks like E2B\'s (`e2b_` and 40 hex digits), so E2B\'s SDKs take it as it is ' +
      '(E2B_API_KEY). Without `scopes` the key has every right of the account; with them it reaches only those ' +
      'operations (403 ScopeMissing otherwise), narrowed to `resourceIds` and `workspaceIds`, until `expiresAt`, within `caps`, from ' +
      '`allowedIps`. A scoped key creates keys only within its own scope (403 KeyScopeTooWide).',
    body: KeyScopeInput.partial({ scopes: true }).extend({
      name: z.string().min(1).max(64).default('api'),
      format: z.enum(['nube', 'e2b']).default('nube').describe('`nube` (nube_sk_live_...) or `e2b` (e2b_<hex>)'),
    }),
    bodyOptional: true,
    successStatus: 201,
    errors: [
      { status: 400, code: 'UnknownScope', description: 'A scope names no area or operation; the answer lists the valid ones' },
      { status: 403, code: 'KeyScopeTooWide', description: 'A scoped key asked for more than it has' },
      { status: 404, code: 'NotFound', description: 'A resource or workspace id names none of the account\'s' },
    ],
    response: Key.extend({ secret: z.string() }),
    handler: async ({ services, principal, body }) => {
      const asked = { ...keyRequest({ ...body, scopes: body.scopes ?? [] }), scopes: body.scopes };
      const { key, secret } = await services.account.createKeyFor(principal, { name: body.name, format: body.format, ...asked });
      return { ...keyOut(key), secret };
    },
  }),
  defineOperation({
    id: 'account.keys.revoke',
    method: 'DELETE',
    path: '/account/keys/{keyId}',
    summary: 'Revoke an API key',
    tags,
    auth: ['owner'],
    params: z.object({ keyId: z.string().min(1).max(100) }),
    response: Ok,
    handler: async ({ services, principal, params }) => {
      await services.account.revokeKey(params.keyId, principal.ownerId, principal);
      return ok;
    },
  }),
  defineOperation({
    id: 'account.aiKey.get',
    method: 'GET',
    path: '/account/ai-key',
    summary: "The account's own AI key settings (never the key itself)",
    tags,
    auth: ['owner'],
    response: AiKeyOut,
    handler: ({ services, principal }) => services.account.aiKeyView(principal),
  }),
  defineOperation({
    id: 'account.aiKey.set',
    method: 'PUT',
    path: '/account/ai-key',
    summary: 'Set the AI key (OpenAI-compatible endpoint) used for semantic file search',
    description:
      'The key is stored encrypted and never returned. `baseUrl` must be a public http(s) address (the operator may allow others with NUBE_OUTBOUND_ALLOW).',
    tags,
    auth: ['owner'],
    body: z.object({
      apiKey: z.string().min(1).max(500).describe('Bearer key for the endpoint'),
      baseUrl: z.url().max(500).default('https://api.openai.com/v1').describe('OpenAI-compatible base URL (POST {baseUrl}/embeddings)'),
      model: z.string().min(1).max(200).default('text-embedding-3-small').describe('Embeddings model'),
    }),
    errors: [{ status: 400, code: 'UrlRefused', description: 'baseUrl is not a public address' }],
    response: AiKeyOut,
    handler: ({ services, principal, body }) => services.account.setAiKey(principal, body),
  }),
  defineOperation({
    id: 'account.aiKey.delete',
    method: 'DELETE',
    path: '/account/ai-key',
    summary: 'Remove the AI key',
    tags,
    auth: ['owner'],
    response: Ok,
    handler: async ({ services, principal }) => {
      await services.account.removeAiKey(principal);
      return ok;
    },
  }),
];
