// GET/DELETE /template-snapshots: derived templates (template-snapshot action) by id or (key, hash).
import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { DerivedTemplate, TemplateHash, TemplateKey } from './schemas.js';

const tags = ['Sandboxes'];

export const templateSnapshotOperations = [
  defineOperation({
    id: 'sandboxes.templateSnapshots.list',
    method: 'GET',
    path: '/template-snapshots',
    summary: 'List derived template snapshots, or look one up by key and hash',
    description:
      'Without query: `{ items: DerivedTemplate[] }`. With `key` and `hash`: that one DerivedTemplate, or ' +
      '404 DerivedTemplateNotProvisioned when the pair is unknown.',
    tags,
    auth: ['owner'],
    query: z
      .object({ key: TemplateKey.optional(), hash: TemplateHash.optional() })
      .refine((q) => (q.key === undefined) === (q.hash === undefined), {
        message: 'key and hash go together',
        path: ['hash'],
      }),
    response: z.union([z.object({ items: z.array(DerivedTemplate) }), DerivedTemplate]),
    errors: [
      {
        status: 404,
        code: 'DerivedTemplateNotProvisioned',
        description: 'No derived template for (key, hash)',
      },
    ],
    handler: ({ principal, services, query }) => services.sandboxes.forks.listTemplates(principal, query),
  }),
  defineOperation({
    id: 'sandboxes.templateSnapshots.get',
    method: 'GET',
    path: '/template-snapshots/{id}',
    summary: 'Get a derived template snapshot',
    tags,
    auth: ['owner'],
    params: z.object({ id: z.string().min(1).max(200).describe('Derived template id') }),
    response: DerivedTemplate,
    handler: ({ principal, services, params }) => services.sandboxes.forks.getTemplate(principal, params.id),
  }),
  defineOperation({
    id: 'sandboxes.templateSnapshots.delete',
    method: 'DELETE',
    path: '/template-snapshots/{id}',
    summary: 'Delete a derived template snapshot',
    description:
      'Refused with 409 DerivedTemplateInUse while sandboxes started from it are starting, running or suspended.',
    tags,
    auth: ['owner'],
    params: z.object({ id: z.string().min(1).max(200).describe('Derived template id') }),
    response: z.object({ ok: z.boolean() }),
    errors: [
      {
        status: 409,
        code: 'DerivedTemplateInUse',
        description: 'Live children exist; the body lists them in `children` (sandbox ids)',
      },
    ],
    handler: ({ principal, services, params }) => services.sandboxes.forks.deleteTemplate(principal, params.id),
  }),
];
