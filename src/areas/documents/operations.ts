import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { PDF_FORMATS } from '../../browser/types.js';
import { RawResponse } from '../../platform/operation.js';
import { limited } from '../../platform/json-limits.js';
import { IsoTime, Ok, ok, WorkspaceFilter, WorkspaceIdInput, WorkspaceIdOutput } from '../../platform/schemas.js';
import { FORM_NAME } from '../websites/site-forms.js';
import { FORM_FIELD_TYPES } from './render/form.js';
import { COLOR_KEY, COLOR_NAMES, COLOR_VALUE, THEME_NAMES } from './render/themes.js';
import { contentDisposition, type DocumentsService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    documents: DocumentsService;
  }
}

const tags = ['Documents'];

const DocId = z.object({ id: z.string().min(1).max(200).describe('Document id') });

const Image = z
  .object({
    fileId: z.string().min(1).max(200).optional().describe('A DONE file of yours (served with the document)'),
    url: z
      .url({ protocol: /^https?$/ })
      .max(2000)
      .optional()
      .describe(
        'An http(s) image URL (shown on the site; left out of the PDF, which fetches nothing outside nube)',
      ),
    alt: z.string().max(500).optional(),
    caption: z.string().max(1000).optional(),
  })
  .refine((i) => (i.fileId === undefined) !== (i.url === undefined), {
    message: 'give exactly one of fileId or url',
  });

const FormField = z
  .object({
    name: z
      .string()
      .regex(/^[A-Za-z][A-Za-z0-9_-]{0,63}$/, 'a letter, then letters, digits, _ and - (64 at most)')
      .describe('The field name submissions carry'),
    label: z.string().min(1).max(200).optional().describe('Shown to visitors (default the name)'),
    type: z.enum(FORM_FIELD_TYPES).optional().describe('Default text'),
    required: z.boolean().optional(),
    options: z.array(z.string().min(1).max(200)).min(1).max(50).optional().describe('The choices of a select'),
    placeholder: z.string().max(200).optional(),
  })
  .strict()
  .refine((f) => (f.type === 'select') === (f.options !== undefined), {
    message: 'a select needs options, and only a select takes them',
    path: ['options'],
  });

const DocForm = z
  .object({
    name: z.string().regex(FORM_NAME, 'letters, digits, _ and - (64 at most)').describe('The form name (`GET /forms`)'),
    fields: z
      .array(FormField)
      .min(1)
      .max(50)
      .refine((fs) => new Set(fs.map((f) => f.name)).size === fs.length, 'field names appear once'),
    submitLabel: z.string().min(1).max(100).optional().describe('The button (default Send)'),
  })
  .strict()
  .describe('A form visitors of the deployed site can send (see GET /forms)');

const Section = limited(
  z.looseObject({
    id: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,100}$/, 'letters, digits, _ and -')
      .optional()
      .describe('Section id (used by the PDF export `sections` filter); assigned (s1, s2, ...) when absent'),
    heading: z.string().max(500).optional().describe('The page heading'),
    title: z.string().max(500).optional().describe('Alias of heading'),
    body: z
      .string()
      .max(500_000)
      .optional()
      .describe('Markdown (default) or HTML, sanitized: no script, style or event handler'),
    content: z.string().max(500_000).optional().describe('Alias of body'),
    format: z.enum(['markdown', 'html']).optional().describe('How body is written (default markdown)'),
    images: z.array(Image).max(50).optional().describe('Images after the body, by file id or URL'),
    kind: z.enum(['page', 'form']).optional().describe('`form`: the page shows `form` after its body'),
    form: DocForm.optional(),
  }).refine((s) => (s.kind === 'form') === (s.form !== undefined), {
    message: 'a section of kind form needs form, and only such a section takes it',
    path: ['form'],
  }),
  { maxDepth: 8, maxBytes: 1024 * 1024 },
).describe(
  'A section becomes one page (at most 8 levels, 1 MiB): heading, body in Markdown or HTML, images by file id or URL; kind form adds a form',
);

const DocMetadata = limited(
  z.looseObject({
    format: z.enum(PDF_FORMATS).optional().describe('Page format, respected by the PDF export (default A4)'),
    lang: z
      .string()
      .regex(/^[a-zA-Z-]{2,20}$/)
      .optional()
      .describe('Language of the text (default es)'),
  }),
  { maxDepth: 16, maxKeys: 256, maxBytes: 16 * 1024 },
).describe(
  "Free-form metadata (at most 16 levels, 256 keys, 16 KiB); `format` is respected by the PDF export, `lang` sets the pages' language",
);

const Colors = limited(
  z.record(
    z.string().regex(COLOR_KEY, 'lowercase name like primary or background'),
    z.string().regex(COLOR_VALUE, 'a CSS colour: #hex, rgb(), hsl() or a colour name'),
  ),
  { maxDepth: 1, maxKeys: 100 },
).describe(
  `Colours overriding the theme's (keys: ${COLOR_NAMES.join(', ')}; any other key sets --color-<key>)`,
);

const DocFields = {
  name: z.string().min(1).max(200),
  prompt: z.string().max(20_000).optional().describe('What the document should contain, for generation'),
  theme: z.enum(THEME_NAMES).optional().describe('Built-in theme (default classic)'),
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
  theme: z.string(),
  customColors: z.record(z.string(), z.string()),
  sections: z.array(z.record(z.string(), z.unknown())),
  metadata: z.record(z.string(), z.unknown()),
  status: z.enum(['draft', 'published']),
  url: z.string().nullable().describe('Site URL while published'),
  websiteId: z.string().nullable(),
  slug: z.string().nullable(),
  generation: z
    .object({
      status: z
        .enum(['queued', 'running', 'done', 'failed'])
        .describe('queued or running while the LLM writes the pages; done; failed with `error`'),
      error: z.string().nullable().describe('Why it failed (or why the last attempt did, while retrying)'),
      updatedAt: IsoTime,
    })
    .nullable()
    .describe('Pages written from `prompt` by the LLM; null when the pages are the sections sent'),
  pageCount: z.number().int(),
  createdAt: IsoTime,
  updatedAt: IsoTime,
  workspaceId: WorkspaceIdOutput,
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

const GENERATION_ERRORS = [
  {
    status: 400,
    code: 'LlmNotConfigured',
    description:
      'A prompt without sections needs an LLM: NUBE_LLM_BASE_URL on the server, or an AI key on the account',
  },
  { status: 400, code: 'ImageNotFound', description: 'An image names a file you do not have' },
  {
    status: 402,
    code: 'InsufficientBalance',
    description: "Writing pages from a prompt needs LLM tokens, and the plan's for this month are spent",
  },
];

export const documentsOperations = [
  defineOperation({
    id: 'documents.list',
    method: 'GET',
    path: '/documents',
    summary: 'List your documents',
    tags,
    auth: ['owner'],
    query: WorkspaceFilter,
    response: z.object({ items: z.array(Document) }),
    handler: ({ principal, services, query }) => services.documents.list(principal, query.workspaceId),
  }),
  defineOperation({
    id: 'documents.create',
    method: 'POST',
    path: '/documents',
    summary: 'Create an HTML document from a name, optional prompt, theme, colors and sections',
    description:
      'Pages come from `sections`. With a `prompt` and no sections, an LLM writes them as a background job: ' +
      'the document answers at once with `generation.status` queued; GET it until done (or failed, with `error`).',
    tags,
    auth: ['owner'],
    body: z.object({ ...DocFields, workspaceId: WorkspaceIdInput.optional() }),
    response: z.object({ document: Document }),
    errors: GENERATION_ERRORS,
    handler: ({ principal, body, services }) => services.documents.create(principal, body),
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
    handler: ({ principal, params, services }) => services.documents.get(principal, params.id),
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
    errors: GENERATION_ERRORS,
    handler: ({ principal, params, body, services }) => services.documents.update(principal, params.id, body),
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
    handler: async ({ principal, params, services }) => {
      await services.documents.delete(principal, params.id);
      return ok;
    },
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
    errors: [
      { status: 400, code: 'DocumentHasNoPages', description: 'The document has no page yet' },
      {
        status: 402,
        code: 'StorageQuotaExceeded',
        description: "The site would take the plan's storage allowance past its size",
      },
      {
        status: 409,
        code: 'DocumentChanged',
        description: 'Another deploy or unpublish of this document finished first',
      },
    ],
    handler: ({ principal, params, services }) => services.documents.deploy(principal, params.id),
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
    handler: async ({ principal, params, services }) => {
      await services.documents.unpublish(principal, params.id);
      return ok;
    },
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
    errors: [
      {
        status: 403,
        code: 'ShareTokenInvalid',
        description: 'The share token is unknown, revoked or expired',
      },
      {
        status: 403,
        code: 'ShareTokenNotForThis',
        description: 'The share token was made for something else',
      },
      {
        status: 400,
        code: 'DocumentHasNoPages',
        description: 'The document (or the sections asked) has no page',
      },
      {
        status: 503,
        code: 'Unavailable',
        description: 'The browser cannot start here, or the document took too long',
      },
    ],
    handler: async ({ principal, params, query, services }) => {
      const { pdf, name } = await services.documents.pdf(principal, params.id, query);
      return new RawResponse(pdf, 'application/pdf', {
        'content-disposition': contentDisposition(name, query.inline === '1'),
        'content-length': String(pdf.length),
        'cache-control': 'private, no-store',
      });
    },
  }),
];
