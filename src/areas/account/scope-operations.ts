import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { CAP_METRICS } from '../../platform/scopes.js';

// The scopes a key may name, from the operation registry: what the console's key form offers as
// checkboxes and what a program reads before asking for a scoped key.

const Area = z.object({
  area: z.string().describe('Area; its scopes are `<area>:read` and `<area>:write`'),
  read: z.array(z.string()).describe('Operation ids `<area>:read` grants'),
  write: z.array(z.string()).describe('Operation ids `<area>:write` grants besides the reads'),
});

export const scopeOperations = [
  defineOperation({
    id: 'account.scopes',
    method: 'GET',
    path: '/account/scopes',
    summary: 'The scopes a key may name: each area with the operations its read and write scopes grant',
    description:
      'A scope is `<area>:read`, `<area>:write` (writes include reads) or one operation id. Caps a key may carry: ' +
      '`aiCredits`, `webQueries`, `llmTokens`, `sandboxCpuSeconds` (monthly).',
    tags: ['Account'],
    auth: ['owner'],
    response: z.object({ areas: z.array(Area), caps: z.array(z.string()) }),
    handler: ({ services }) => ({ areas: services.account.scopeCatalog(), caps: [...CAP_METRICS] }),
  }),
];
