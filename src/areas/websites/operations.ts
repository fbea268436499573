import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok, ok, WorkspaceFilter, WorkspaceIdInput, WorkspaceIdOutput } from '../../platform/schemas.js';
import type { WebsitesService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    websites: WebsitesService;
  }
}

const tags = ['Websites'];

export const Website = z
  .object({
    id: z.string(),
    name: z.string(),
    slug: z.string().describe('The site answers at `<slug>.<sites host>`'),
    url: z.string().describe('Where the site is served'),
    source: z.enum(['archive', 'document']).describe('Published from an archive, or a deployed document'),
    documentId: z.string().nullable(),
    fileCount: z.number().int(),
    totalBytes: z.number().int(),
    forms: z
      .array(z.string())
      .describe(
        'Form names its pages declare (`<form data-nube-form="name">`); they take submissions at `/f/<name>`',
      ),
    createdAt: IsoTime,
    updatedAt: IsoTime,
    workspaceId: WorkspaceIdOutput,
  })
  .meta({ id: 'Website', description: 'A static site published at its own host' });

const Archive = {
  fileId: z
    .string()
    .min(1)
    .max(200)
    .optional()
    .describe('A file of yours holding a .zip, .tar or .tar.gz of the site'),
  archiveBase64: z
    .string()
    .max(14_000_000)
    .optional()
    .describe('The archive itself, base64 (up to the request body limit); instead of fileId'),
};

const WebsiteId = z.object({ websiteId: z.string().min(1).max(200).describe('Website id') });

const archiveErrors = [
  {
    status: 400,
    code: 'InvalidArchive',
    description: 'Not a zip/tar/tar.gz, or an entry is a link or leaves its folder',
  },
  {
    status: 400,
    code: 'SiteHasNoIndex',
    description: 'No index.html at the root (or in the only top folder)',
  },
  { status: 400, code: 'SiteTooLarge', description: 'More than 5,000 files or 200 MB uncompressed' },
];

export const websitesOperations = [
  defineOperation({
    id: 'websites.create',
    method: 'POST',
    path: '/websites',
    summary: 'Publish a static site from an archive at its own host',
    description:
      'Exactly one of fileId (a DONE file of yours) or archiveBase64. The archive (.zip, .tar, .tar.gz) needs an ' +
      'index.html; a 404.html is served for missing paths. Mega and Tera (402 PlanUpgradeRequired on Byte, whose ' +
      'documents can still be deployed as sites). Emits website.created.',
    tags,
    auth: ['owner'],
    body: z.object({
      name: z.string().min(1).max(200).optional(),
      slug: z
        .string()
        .min(1)
        .max(63)
        .optional()
        .describe(
          'Host label to publish at (lowercase letters, digits, inner hyphens); default from the name',
        ),
      ...Archive,
      workspaceId: WorkspaceIdInput.optional(),
    }),
    successStatus: 201,
    response: Website,
    errors: [
      ...archiveErrors,
      { status: 402, code: 'PlanUpgradeRequired', description: 'Static sites are part of Mega and Tera' },
      {
        status: 402,
        code: 'StorageQuotaExceeded',
        description: "The site would take the plan's storage allowance past its size",
      },
      { status: 409, code: 'SlugTaken', description: 'Another site answers at that slug' },
    ],
    handler: ({ principal, body, services }) => services.websites.create(principal, body),
  }),
  defineOperation({
    id: 'websites.list',
    method: 'GET',
    path: '/websites',
    summary: 'List your websites (archives and deployed documents)',
    tags,
    auth: ['owner'],
    query: WorkspaceFilter,
    response: z.object({ items: z.array(Website) }),
    handler: ({ principal, services, query }) => services.websites.list(principal, query.workspaceId),
  }),
  defineOperation({
    id: 'websites.get',
    method: 'GET',
    path: '/websites/{websiteId}',
    summary: 'Get a website',
    tags,
    auth: ['owner'],
    params: WebsiteId,
    response: Website,
    handler: ({ principal, params, services }) => services.websites.get(principal, params.websiteId),
  }),
  defineOperation({
    id: 'websites.deploy',
    method: 'POST',
    path: '/websites/{websiteId}/deploy',
    summary: "Replace a website's files with a new archive (same slug and URL)",
    tags,
    auth: ['owner'],
    params: WebsiteId,
    body: z.object(Archive),
    response: Website,
    errors: [
      ...archiveErrors,
      {
        status: 409,
        code: 'WebsiteManagedByDocument',
        description: 'The site shows a document: deploy the document',
      },
      { status: 409, code: 'WebsiteChanged', description: 'Another deploy finished first; try again' },
    ],
    handler: ({ principal, params, body, services }) =>
      services.websites.deploy(principal, params.websiteId, body),
  }),
  defineOperation({
    id: 'websites.delete',
    method: 'DELETE',
    path: '/websites/{websiteId}',
    summary: 'Delete a website; its host answers 404 at once',
    description: 'A deployed document goes back to draft. Emits website.deleted.',
    tags,
    auth: ['owner'],
    params: WebsiteId,
    response: Ok,
    handler: async ({ principal, params, services }) => {
      await services.websites.delete(principal, params.websiteId);
      return ok;
    },
  }),
];
