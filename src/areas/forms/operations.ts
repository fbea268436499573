import { z } from 'zod';
import { CursorPage } from '../../platform/cursor-page.js';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok, PageQuery } from '../../platform/schemas.js';
import { FORM_LIMITS } from './body.js';
import type { FormsService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    forms: FormsService;
  }
}

const tags = ['Forms'];
const FormId = z.object({ formId: z.string().min(1).max(200).describe('Form id') });

const Form = z
  .object({
    id: z.string(),
    name: z.string().describe('The `data-nube-form` name its pages declare'),
    websiteId: z.string().describe('The site whose pages declare it (the form outlives the site)'),
    siteSlug: z.string(),
    siteUrl: z.string(),
    submissionCount: z.number().int(),
    lastSubmissionAt: IsoTime.nullable(),
    createdAt: IsoTime.describe('When its first submission was accepted'),
  })
  .meta({ id: 'Form', description: "A form on one of the owner's sites, with its submissions' count" });

const StoredFile = z.object({
  field: z.string(),
  fileId: z.string().describe('A private file of yours (GET /files/{fileId})'),
  name: z.string(),
  contentType: z.string(),
  size: z.number().int(),
});

const FormSubmission = z
  .object({
    id: z.string(),
    formId: z.string(),
    fields: z
      .record(z.string(), z.union([z.string(), z.array(z.string())]))
      .describe(
        'Field values as sent (a name sent more than once: a list); `_gotcha` and `_redirect` are not kept',
      ),
    files: z.array(StoredFile).describe('Uploaded files, stored as files of yours'),
    createdAt: IsoTime,
  })
  .meta({ id: 'FormSubmission', description: 'One accepted submission of a form' });

const HOW =
  'A published site (or deployed document) declares a form with `<form data-nube-form="contact">`; nube reads the ' +
  'names at each deploy and gives such forms `action="/f/<name>" method="post"` when served. Visitors post to ' +
  "`/f/<name>` on the site's host, or to `/f/<slug>/<name>` on nube's host (CORS: the site's own host and verified " +
  'custom domains only), urlencoded, multipart (up to ' +
  `${FORM_LIMITS.files} files of ${FORM_LIMITS.fileBytes / 2 ** 20} MiB, stored as private files of yours and counted in your storage) ` +
  "or JSON. A filled `_gotcha` field is answered as a success and stored nowhere; `_redirect` (on the site's own origin) is " +
  "where the visitor goes next, else nube's thank-you page; `Accept: application/json` gets JSON. Each address may send " +
  'NUBE_FORMS_PER_MINUTE submissions a minute (429 with Retry-After). Each accepted submission sends form.submitted ' +
  'with its fields and file ids. A form is listed from its first accepted submission.';

export const formsOperations = [
  defineOperation({
    id: 'forms.list',
    method: 'GET',
    path: '/forms',
    summary: "List your sites' forms that took submissions, newest first",
    description: `${HOW} Cursor pagination: pass \`nextCursor\` back as \`cursor\`.`,
    tags,
    auth: ['owner'],
    query: PageQuery,
    response: CursorPage(Form),
    handler: ({ principal, query, services }) => services.forms.list(principal, query),
  }),
  defineOperation({
    id: 'forms.get',
    method: 'GET',
    path: '/forms/{formId}',
    summary: 'Get a form with its site and submission count',
    tags,
    auth: ['owner'],
    params: FormId,
    response: Form,
    handler: ({ principal, params, services }) => services.forms.get(principal, params.formId),
  }),
  defineOperation({
    id: 'forms.delete',
    method: 'DELETE',
    path: '/forms/{formId}',
    summary: 'Delete a form and all its submissions',
    description:
      'Their uploaded files go to your trash (restorable for 7 days). The site keeps taking submissions while its pages declare the form: they start a new record.',
    tags,
    auth: ['owner'],
    params: FormId,
    response: Ok,
    handler: ({ principal, params, services }) => services.forms.delete(principal, params.formId),
  }),
  defineOperation({
    id: 'forms.submissions.list',
    method: 'GET',
    path: '/forms/{formId}/submissions',
    summary: "List a form's submissions, newest first",
    description: 'Cursor pagination: pass `nextCursor` back as `cursor`.',
    tags,
    auth: ['owner'],
    params: FormId,
    query: PageQuery,
    response: CursorPage(FormSubmission),
    handler: ({ principal, params, query, services }) =>
      services.forms.submissions(principal, params.formId, query),
  }),
  defineOperation({
    id: 'forms.submissions.delete',
    method: 'DELETE',
    path: '/forms/{formId}/submissions/{submissionId}',
    summary: 'Delete one submission of a form',
    description: 'Its uploaded files go to your trash (restorable for 7 days).',
    tags,
    auth: ['owner'],
    params: FormId.extend({ submissionId: z.string().min(1).max(200).describe('Submission id') }),
    response: Ok,
    handler: ({ principal, params, services }) =>
      services.forms.deleteSubmission(principal, params.formId, params.submissionId),
  }),
];
