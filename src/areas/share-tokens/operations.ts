import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok, ok } from '../../platform/schemas.js';
import type { ShareTokensService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    shareTokens: ShareTokensService;
  }
}

const tags = ['Share tokens'];

const ShareTokenFields = {
  id: z.string().describe('Share token id (`tokenId` in paths)'),
  fileId: z.string().nullable().describe('File it opens, or null'),
  documentId: z.string().nullable().describe('Document it opens (PDF export), or null'),
  preview: z.string().describe('First characters of the token'),
  expiresAt: IsoTime,
  createdAt: IsoTime,
};

export const ShareToken = z
  .object(ShareTokenFields)
  .meta({
    id: 'ShareToken',
    description: 'A temporary link to one file or document; the token itself is not shown',
  });

export const shareTokensOperations = [
  defineOperation({
    id: 'shareTokens.create',
    method: 'POST',
    path: '/share-tokens',
    summary: 'Create a temporary share link to one file or document',
    description:
      'Exactly one of fileId or documentId. The token (`shr_...`) and the ready-to-use `url` are returned ' +
      'only now. `url` (`/share/<token>`) shows the file or the document; for a document `pdfUrl` is its PDF ' +
      'export with `?token=` (the same token works there).',
    tags,
    auth: ['owner'],
    body: z
      .object({
        fileId: z.string().min(1).max(200).optional(),
        documentId: z.string().min(1).max(200).optional(),
        expiresInSeconds: z
          .number()
          .int()
          .min(60)
          .max(30 * 86_400)
          .default(3600)
          .describe('Lifetime, 60 s to 30 days (default 3600)'),
      })
      .refine((b) => (b.fileId === undefined) !== (b.documentId === undefined), {
        message: 'give exactly one of fileId or documentId',
        path: ['fileId'],
      }),
    successStatus: 201,
    response: z
      .object({
        ...ShareTokenFields,
        token: z.string().describe('The share token (`shr_...`); shown only once'),
        url: z.string().describe('Link that works without any other credential until expiresAt'),
        pdfUrl: z.string().nullable().describe("For a document: its PDF export with the token, else null"),
      })
      .meta({ id: 'ShareTokenCreated' }),
    handler: ({ principal, body, services }) => services.shareTokens.create(principal, body),
  }),
  defineOperation({
    id: 'shareTokens.list',
    method: 'GET',
    path: '/share-tokens',
    summary: 'List share tokens that have not expired',
    tags,
    auth: ['owner'],
    response: z.object({ items: z.array(ShareToken) }),
    handler: ({ principal, services }) => services.shareTokens.list(principal),
  }),
  defineOperation({
    id: 'shareTokens.revoke',
    method: 'DELETE',
    path: '/share-tokens/{tokenId}',
    summary: 'Revoke a share token; its link stops working at once',
    tags,
    auth: ['owner'],
    params: z.object({ tokenId: z.string().min(1).max(200).describe('Share token id') }),
    response: Ok,
    handler: async ({ principal, params, services }) => {
      await services.shareTokens.revoke(principal, params.tokenId);
      return ok;
    },
  }),
];
