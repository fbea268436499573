import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { limited } from '../../platform/json-limits.js';
import { IsoTime, Ok } from '../../platform/schemas.js';

const tags = ['Documents'];

const DocId = z.object({ id: z.string().min(1).max(200).describe('Document id') });

const Section = limited(
  z.looseObject({
    id: z.string().max(100).optional().describe('Section id (used by the PDF export `sections` filter)'),
    title: z.string().max(500).optional(),
    content: z.string().optional().describe('HTML or text content, or instructions for generating it'),
  }),
  { maxDepth: 8, maxBytes: 1024 * 1024 },
).describe('A section: free-form object (at most 8 levels, 1 MiB); id, title and content are understood');

const DocMetadata = limited(
  z.looseObject({
    format: z
      .enum(['A4', 'Letter', 'Legal', 'A3', 'A5', 'Tabloid'])
      .optional()
      .describe('Page format, respected by the PDF export (default A4)'),
  }),
  { maxDepth: 16, maxKeys: 256, maxBytes: 16 * 1024 },
).describe('Free-form metadata (at most 16 levels, 256 keys, 16 KiB); `format` is respected by the PDF export');

const Colors = limited(z.record(z.string().max(100), z.string().max(200)), { maxDepth: 1, maxKeys: 100 }).describe(
  'Named colors (for example `primary: #0a7`; at most 100)',
);

const DocFields = {
  name: z.string().min(1).max(200),
  prompt: z.string().max(20_000).optional().describe('What the document should contain, for generation'),
  theme: z.string().max(100).optional(),
  customColors: Colors.optional(),
  sections: z.array(Section).max(200).optional(),
  metadata: DocMetadata.optional(),
};

export const Page = z
  .object({
    id: z.string(),
    index: z.number().int().describe('0-based position'),
    sectionId: z.string().nullable(),
    title: z.string().nullable(),
    html: z.string().describe('The page as HTML'),
  })
  .meta({ id: 'DocumentPage' });

const DocumentFields = {
  id: z.string(),
  name: z.string(),
  prompt: z.string().nullable(),
  theme: z.string().nullable(),
  customColors: z.record(z.string(), z.string()),
  sections: z.array(z.record(z.string(), z.unknown())),
  metadata: z.record(z.string(), z.unknown()),
  status: z.enum(['draft', 'published']),
  url: z.string().nullable().describe('Site URL while published'),
  websiteId: z.string().nullable(),
  slug: z.string().nullable(),
  pageCount: z.number().int(),
  createdAt: IsoTime,
  updatedAt: IsoTime,
};

export const Document = z
  .object({
    ...DocumentFields,
    pages: z.array(Page).optional().describe('Present on GET /documents/{id}'),
  })
  .meta({
    id: 'Document',
    description: 'An HTML document made of pages; publishable as a site and exportable to PDF',
  });

export const documentsOperations = [
  defineOperation({
    id: 'documents.list',
    method: 'GET',
    path: '/documents',
    summary: 'List your documents',
    tags,
    auth: ['owner'],
    response: z.object({ items: z.array(Document) }),
  }),
  defineOperation({
    id: 'documents.create',
    method: 'POST',
    path: '/documents',
    summary: 'Create an HTML document from a name, optional prompt, theme, colors and sections',
    tags,
    auth: ['owner'],
    body: z.object(DocFields),
    response: z.object({ document: Document }),
  }),
  defineOperation({
    id: 'documents.get',
    method: 'GET',
    path: '/documents/{id}',
    summary: 'Get a document with its pages',
    tags,
    auth: ['owner'],
    params: DocId,
    response: Document,
  }),
  defineOperation({
    id: 'documents.update',
    method: 'PATCH',
    path: '/documents/{id}',
    summary: "Update a document's name, prompt, theme, colors, sections or metadata",
    tags,
    auth: ['owner'],
    params: DocId,
    body: z.object(DocFields).partial(),
    response: Document,
  }),
  defineOperation({
    id: 'documents.delete',
    method: 'DELETE',
    path: '/documents/{id}',
    summary: 'Delete a document (and unpublish its site)',
    tags,
    auth: ['owner'],
    params: DocId,
    response: Ok,
  }),
  defineOperation({
    id: 'documents.deploy',
    method: 'POST',
    path: '/documents/{id}/deploy',
    summary: 'Publish a document as a website and get its URL',
    description:
      'Needs at least one page (400 DocumentHasNoPages). Moves the document from draft to published.',
    tags,
    auth: ['owner'],
    params: DocId,
    response: z.object({ url: z.string(), websiteId: z.string(), slug: z.string() }),
    errors: [{ status: 400, code: 'DocumentHasNoPages', description: 'The document has no page yet' }],
  }),
  defineOperation({
    id: 'documents.unpublish',
    method: 'POST',
    path: '/documents/{id}/unpublish',
    summary: "Take a published document's site down (back to draft)",
    tags,
    auth: ['owner'],
    params: DocId,
    response: Ok,
  }),
  defineOperation({
    id: 'documents.pdf',
    method: 'GET',
    path: '/documents/{id}/pdf',
    summary: 'Export a document to PDF',
    description:
      'Responds application/pdf in the page format of metadata.format. A share token in `token` replaces ' +
      'the credential. `inline=1` asks the browser to display instead of download.',
    tags,
    auth: ['owner', 'share'],
    params: DocId,
    query: z.object({
      sections: z
        .string()
        .max(4000)
        .optional()
        .describe('Comma-separated section ids to include (default all)'),
      inline: z.literal('1').optional().describe('`1`: Content-Disposition inline instead of attachment'),
      token: z.string().max(500).optional().describe('Share token (`shr_...`) in place of the credential'),
    }),
    produces: 'application/pdf',
    response: z.string().describe('The PDF bytes'),
    errors: [{ status: 403, description: 'The share token does not grant this document' }],
  }),
];
