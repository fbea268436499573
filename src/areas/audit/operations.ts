import { z } from 'zod';
import { CursorPage } from '../../platform/cursor-page.js';
import { defineOperation, RawResponse } from '../../platform/operation.js';
import { IsoTime, qInt } from '../../platform/schemas.js';
import type { AuditService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    audit: AuditService;
  }
}

const NDJSON = 'application/x-ndjson';

const Entry = z
  .object({
    id: z.string(),
    time: IsoTime,
    accountId: z.string().describe("The account; '' for a refused credential that named none"),
    workspaceId: z.string().nullable().describe('The workspace the call named or created in (or its key\'s only one); null when the call did not say'),
    keyId: z.string().nullable().describe('Id of the credential (key id, token id, console session id); never its secret'),
    keyName: z.string().nullable().describe("An owner key's name"),
    credential: z.string().nullable().describe('Its scheme: owner, agent, database, ...'),
    operation: z.string().describe('Operation id (`databases.query`), or `mcp` for a refused MCP connection'),
    method: z.string(),
    resourceId: z.string().nullable(),
    status: z.number().int().describe('HTTP status of the answer'),
    errorCode: z.string().nullable(),
    sourceIp: z.string().nullable(),
    userAgent: z.string().nullable(),
    requestId: z.string(),
    via: z.enum(['rest', 'mcp']),
    seq: z.number().int().describe("Position in the account's hash chain"),
    hash: z.string().describe('HMAC over the entry and the previous hash (`nube audit verify` checks the chain)'),
  })
  .meta({ id: 'AuditEntry' });

const time = (what: string) =>
  z
    .string()
    .max(40)
    .refine((v) => !Number.isNaN(Date.parse(v)), 'an ISO 8601 time')
    .transform((v) => Date.parse(v))
    .optional()
    .describe(what);

export const auditOperations = [
  defineOperation({
    id: 'account.audit',
    method: 'GET',
    path: '/account/audit',
    summary: "The account's audit log: every change and every refused credential, newest first",
    description:
      'Every call that changes something (any operation but a GET, over REST or MCP) and every refused credential ' +
      '(401/403), with who (key id and name), what (operation, resource), the answer (status, error code) and from ' +
      'where (address, user agent, request id). Kept per plan (Byte 7 days, Mega 90, Tera 365). Filters combine; ' +
      '`format=ndjson` (or `Accept: application/x-ndjson`) streams every matching entry as NDJSON instead of a page.',
    tags: ['Account'],
    auth: ['owner'],
    query: z.object({
      since: time('Entries at or after this time'),
      until: time('Entries before this time'),
      operation: z.string().min(1).max(200).optional().describe('Operation id, e.g. `databases.query`'),
      keyId: z.string().min(1).max(200).optional(),
      resourceId: z.string().min(1).max(200).optional(),
      limit: qInt(1, 200).default(50).describe('Entries per page, 1-200 (default 50)'),
      cursor: z.string().max(500).optional().describe('Opaque cursor from a previous page'),
      format: z.enum(['json', 'ndjson']).optional().describe('ndjson: every matching entry, one a line (default json: a page)'),
    }),
    produces: `application/json, ${NDJSON}`,
    response: CursorPage(Entry),
    handler: ({ principal, query, headers, services }) => {
      const accept = String(headers.accept ?? '');
      if (query.format === 'ndjson' || (query.format === undefined && accept.includes(NDJSON) && !accept.includes('application/json'))) {
        return new RawResponse(services.audit.export(principal, query), NDJSON, {
          'content-disposition': 'attachment; filename="audit.ndjson"',
        });
      }
      return services.audit.list(principal, query);
    },
  }),
];
