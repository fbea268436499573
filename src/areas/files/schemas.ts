import { z } from 'zod';
import { FreeObject, IsoTime, WorkspaceIdOutput } from '../../platform/schemas.js';

// Schemas shared by files, images and share tokens. Response-only: each is used in output form alone,
// so the named components stay single-form.

export const FILE_STATUSES = ['DONE', 'DELETED'] as const;
export const FILE_ACCESS = ['public', 'private'] as const;
export const FILE_REGIONS = ['LATAM', 'US', 'EU'] as const;

/** Spec: up to 5 GB per file. */
export const MAX_FILE_BYTES = 5 * 1024 ** 3;

// PENDING appears only in the answer to POST /files: the record waits for its bytes at putUrl and is
// neither listed nor readable until they arrive (then DONE). Saying DONE before that would be false.
export const FileStatus = z
  .enum(['PENDING', ...FILE_STATUSES])
  .describe('PENDING: created, bytes not uploaded yet (POST /files answer only); DONE: stored and readable; DELETED: in the trash');
export const FileAccess = z
  .enum(FILE_ACCESS)
  .describe(
    'public: served by the CDN at `url` with no credential; private: only through presigned `readUrl`',
  );
export const FileRegion = z.enum(FILE_REGIONS).describe('Storage region');

export const File = z
  .object({
    id: z.string().describe('File id (`fileId` in paths)'),
    name: z.string().describe('File name as shown to users'),
    contentType: z.string().describe('MIME type given at creation'),
    size: z.number().int().min(0).describe('Size in bytes'),
    access: FileAccess,
    status: FileStatus,
    region: FileRegion,
    assetId: z.string().nullable().describe('Caller-chosen grouping id given at creation, or null'),
    metadata: FreeObject.describe('Free-form metadata object'),
    url: z.string().nullable().describe('Permanent CDN URL when access is public; null for private files'),
    readUrl: z
      .string()
      .optional()
      .describe('Presigned read URL, valid for 1 hour; present on GET /files/{fileId}'),
    readUrlExpiresAt: IsoTime.optional().describe('When `readUrl` stops working'),
    daysUntilPurge: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe('Days left before a deleted file is purged for good (listed with status=DELETED)'),
    createdAt: IsoTime,
    updatedAt: IsoTime,
    deletedAt: IsoTime.nullable().describe('When the file went to the trash, or null'),
    workspaceId: WorkspaceIdOutput,
  })
  .meta({ id: 'File', description: 'A stored file (object plus record)' });
export type File = z.output<typeof File>;

/** Cursor pagination envelope of list endpoints. */
export const paginated = <T extends z.ZodType>(item: T) =>
  z.object({
    items: z.array(item),
    nextCursor: z
      .string()
      .nullable()
      .describe('Pass as `cursor` to get the next page; null on the last page'),
    hasMore: z.boolean().describe('Whether another page exists'),
  });
