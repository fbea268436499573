import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok, WorkspaceFilter, WorkspaceIdInput, WorkspaceIdOutput } from '../../platform/schemas.js';
import type { DomainsService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    domains: DomainsService;
  }
}

const tags = ['Domains'];

const DomainName = z.string().min(1).max(253).describe('A fully qualified domain name, e.g. www.example.com');
const DomainParam = z.object({ domain: DomainName });
const AttachTo = z
  .object({
    kind: z.enum(['site', 'machine']).describe('What the domain serves'),
    id: z.string().min(1).max(200).describe('Website id or machine id'),
  })
  .meta({ id: 'DomainAttachTarget' });

export const Domain = z
  .object({
    domain: z.string(),
    target: z
      .object({
        kind: z.enum(['sandbox', 'machine', 'site', 'none']),
        id: z.string().nullable(),
        port: z.number().int().nullable().describe('Sandbox port (sandbox targets only)'),
      })
      .describe('What the domain serves once verified; kind none: attached to nothing'),
    verified: z.boolean(),
    verifiedAt: IsoTime.nullable(),
    workspaceId: WorkspaceIdOutput,
    records: z
      .array(z.object({ type: z.enum(['TXT', 'CNAME']), name: z.string(), value: z.string() }))
      .describe('DNS records to create: the TXT proves ownership, the CNAME sends traffic to nube'),
    certificate: z
      .object({
        status: z
          .enum(['none', 'pending', 'issued', 'unavailable'])
          .describe('none: not verified yet; pending: requested from the ACME CA; unavailable: no ACME CA configured'),
        notAfter: IsoTime.nullable(),
      })
      .describe('The TLS certificate nube serves for the domain on its HTTPS port'),
    reason: z.string().optional().describe('Why verification did not succeed (verify only)'),
  })
  .meta({ id: 'Domain', description: 'A custom domain for a site or a machine (Mega and Tera)' });

const PLAN = { status: 402, code: 'PlanRequired', description: 'custom domains come with Mega and Tera' } as const;
const TAKEN = { status: 409, code: 'DomainTaken', description: 'another account has verified this domain' } as const;

export const domainsOperations = [
  defineOperation({
    id: 'domains.create',
    method: 'POST',
    path: '/domains',
    summary: 'Add a custom domain (optionally attached to a site or machine); answers the DNS records to create',
    description:
      'Create the TXT record `_nube-challenge.<domain>` with the token and a CNAME to nube, then call verify. ' +
      'Until verified the domain routes nowhere. Adding a domain you already added keeps its token.',
    tags,
    auth: ['owner'],
    body: z.object({ domain: DomainName, target: AttachTo.optional(), workspaceId: WorkspaceIdInput.optional() }),
    successStatus: 201,
    response: Domain,
    errors: [PLAN, TAKEN],
    handler: ({ services, principal, body }) => services.domains.add(principal, body),
  }),
  defineOperation({
    id: 'domains.list',
    method: 'GET',
    path: '/domains',
    summary: "List your custom domains (sites', machines' and sandbox ports')",
    tags,
    auth: ['owner'],
    query: WorkspaceFilter,
    response: z.object({ domains: z.array(Domain) }),
    handler: ({ services, principal, query }) => services.domains.list(principal, query.workspaceId),
  }),
  defineOperation({
    id: 'domains.get',
    method: 'GET',
    path: '/domains/{domain}',
    summary: 'Get a custom domain: its records, verification, target and certificate',
    tags,
    auth: ['owner'],
    params: DomainParam,
    response: Domain,
    handler: ({ services, principal, params }) => services.domains.get(principal, params.domain),
  }),
  defineOperation({
    id: 'domains.verify',
    method: 'POST',
    path: '/domains/{domain}/verify',
    summary: 'Check the TXT record; once verified the domain routes to its target and a certificate is requested',
    description: 'Answers the domain with `verified` false and a `reason` while the record is missing or wrong.',
    tags,
    auth: ['owner'],
    params: DomainParam,
    response: Domain,
    errors: [TAKEN],
    handler: ({ services, principal, params }) => services.domains.verify(principal, params.domain),
  }),
  defineOperation({
    id: 'domains.attach',
    method: 'POST',
    path: '/domains/{domain}/attach',
    summary: 'Point a custom domain at one of your sites or machines',
    tags,
    auth: ['owner'],
    params: DomainParam,
    body: AttachTo,
    response: Domain,
    handler: ({ services, principal, params, body }) => services.domains.attach(principal, params.domain, body),
  }),
  defineOperation({
    id: 'domains.detach',
    method: 'POST',
    path: '/domains/{domain}/detach',
    summary: 'Stop serving anything at a custom domain, keeping it verified',
    tags,
    auth: ['owner'],
    params: DomainParam,
    response: Domain,
    handler: ({ services, principal, params }) => services.domains.detach(principal, params.domain),
  }),
  defineOperation({
    id: 'domains.delete',
    method: 'DELETE',
    path: '/domains/{domain}',
    summary: 'Remove a custom domain: it stops routing and its certificate is dropped',
    tags,
    auth: ['owner'],
    params: DomainParam,
    response: Ok,
    handler: ({ services, principal, params }) => services.domains.remove(principal, params.domain),
  }),
];
