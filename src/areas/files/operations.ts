import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { hlsOperations } from './hls-operations.js';
import { FreeObjectInput, IsoTime, Ok, ok, PageQuery, WorkspaceFilter, WorkspaceIdInput } from '../../platform/schemas.js';
import { File, FileAccess, FileRegion, MAX_FILE_BYTES, paginated } from './schemas.js';
import type { FilesService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    files: FilesService;
  }
}

const tags = ['Files'];

const FileId = z.object({ fileId: z.string().min(1).max(200).describe('File id') });
const FileName = z.string().min(1).max(255).describe('File name');
const STORAGE_QUOTA = {
  status: 402,
  description: "Insufficient plan: the plan's storage allowance is used up",
};

export const filesOperations = [
  ...hlsOperations,
  defineOperation({
    id: 'files.list',
    method: 'GET',
    path: '/files',
    summary: 'List files, newest first, optionally by asset id or status (DELETED lists the trash)',
    description:
      'Cursor pagination: pass `nextCursor` back as `cursor`. Deleted files carry `daysUntilPurge`.',
    tags,
    auth: ['owner'],
    query: PageQuery.extend({
      assetId: z.string().max(200).optional().describe('Only files with this asset id'),
      status: z.enum(['DONE', 'DELETED']).default('DONE').describe('DONE (default) or DELETED (the trash)'),
    }).extend(WorkspaceFilter.shape),
    response: paginated(File),
    handler: ({ principal, query, services }) => services.files.list(principal, query),
  }),
  defineOperation({
    id: 'files.create',
    method: 'POST',
    path: '/files',
    summary: 'Create a file record and get a presigned URL to upload its bytes with PUT',
    description:
      'Upload the bytes with `PUT putUrl` (same Content-Type as declared); the file is then DONE. ' +
      'Up to 5 GB per file.',
    tags,
    auth: ['owner'],
    body: z.object({
      fileName: FileName,
      contentType: z.string().min(1).max(255).describe('MIME type of the bytes'),
      size: z.number().int().min(0).max(MAX_FILE_BYTES).describe('Size in bytes, up to 5 GB'),
      access: FileAccess.default('private'),
      region: FileRegion.default('LATAM'),
      assetId: z.string().max(200).optional().describe('Caller-chosen grouping id'),
      metadata: FreeObjectInput.optional().describe(
        'Free-form metadata object (at most 16 levels, 256 keys, 16 KiB as JSON)',
      ),
      workspaceId: WorkspaceIdInput.optional(),
      hls: z
        .boolean()
        .optional()
        .describe(
          'Make HLS renditions once the bytes arrive (a video; Mega and Tera): see GET /files/{fileId}/hls',
        ),
    }),
    successStatus: 201,
    response: z.object({
      file: File,
      putUrl: z.string().describe('Presigned URL: PUT the bytes here'),
      putUrlExpiresAt: IsoTime.describe('When putUrl stops working'),
    }),
    errors: [
      STORAGE_QUOTA,
      {
        status: 402,
        code: 'PlanUpgradeRequired',
        description: '`hls: true` on a plan without HLS streaming (Byte)',
      },
    ],
    handler: async ({ principal, body, services }) => {
      const { hls, ...input } = body;
      if (hls) services.files.hls!.assertPlan(principal);
      const out = await services.files.create(principal, input);
      if (hls)
        await services.files.hls!.requestAtUpload(principal, {
          id: out.file.id,
          owner_id: principal.ownerId,
          region: out.file.region,
        });
      return out;
    },
  }),
  defineOperation({
    id: 'files.search',
    method: 'GET',
    path: '/files/search',
    summary: 'Semantic search over your files in natural language (up to 20 results)',
    description: 'Uses the AI key configured by the account; 400 AiKeyNotConfigured without one.',
    tags,
    auth: ['owner'],
    query: z.object({
      q: z.string().min(1).max(1000).describe('What to look for, in natural language'),
      limit: z.coerce.number().int().min(1).max(20).default(20).describe('Results, 1-20 (default 20)'),
    }),
    response: z.object({ items: z.array(File) }),
    errors: [
      { status: 400, code: 'AiKeyNotConfigured', description: 'No AI key is configured for semantic search' },
    ],
    handler: ({ principal, query, services }) =>
      services.files.searchIndex.search(principal, query.q, query.limit),
  }),
  defineOperation({
    id: 'files.get',
    method: 'GET',
    path: '/files/{fileId}',
    summary: 'Get a file with a presigned read URL (valid 1 hour)',
    tags,
    auth: ['owner'],
    params: FileId,
    response: File,
    handler: ({ principal, params, services }) => services.files.get(principal, params.fileId),
  }),
  defineOperation({
    id: 'files.update',
    method: 'PATCH',
    path: '/files/{fileId}',
    summary: 'Rename a file, change its access or metadata, or restore it (status DONE)',
    description: 'Changing `access` copies the object between the public and private buckets.',
    tags,
    auth: ['owner'],
    params: FileId,
    body: z.object({
      name: FileName.optional(),
      access: FileAccess.optional(),
      metadata: FreeObjectInput.optional().describe(
        'Replaces the metadata object (at most 16 levels, 256 keys, 16 KiB as JSON)',
      ),
      status: z.literal('DONE').optional().describe('Only DONE: restores a deleted file'),
    }),
    response: File,
    errors: [{ status: 409, code: 'FileDeleted', description: 'The file is in the trash: restore it first' }],
    handler: ({ principal, params, body, services }) => services.files.update(principal, params.fileId, body),
  }),
  defineOperation({
    id: 'files.delete',
    method: 'DELETE',
    path: '/files/{fileId}',
    summary: 'Move a file to the trash (recoverable for 7 days)',
    tags,
    auth: ['owner'],
    params: FileId,
    response: Ok,
    handler: async ({ principal, params, services }) => {
      await services.files.delete(principal, params.fileId);
      return ok;
    },
  }),
  defineOperation({
    id: 'files.restore',
    method: 'POST',
    path: '/files/{fileId}/restore',
    summary: 'Restore a deleted file from the trash (within 7 days)',
    tags,
    auth: ['owner'],
    params: FileId,
    response: File,
    errors: [
      { status: 409, code: 'RetentionExpired', description: 'The file was deleted more than 7 days ago' },
    ],
    handler: ({ principal, params, services }) => services.files.restore(principal, params.fileId),
  }),
  defineOperation({
    id: 'files.duplicate',
    method: 'POST',
    path: '/files/{fileId}/duplicate',
    summary: 'Copy a file (object and record) into a new file',
    tags,
    auth: ['owner'],
    params: FileId,
    body: z.object({ name: FileName.optional().describe('Name of the copy (default: "<name> (copy)")') }),
    bodyOptional: true,
    response: File,
    errors: [STORAGE_QUOTA, { status: 409, code: 'FileDeleted', description: 'The file is in the trash' }],
    handler: ({ principal, params, body, services }) =>
      services.files.duplicate(principal, params.fileId, body?.name),
  }),
];
