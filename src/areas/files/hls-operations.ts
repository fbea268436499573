// HLS streaming of video files (the spec's "Mega and Tera also include ... HLS streaming").
import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok } from '../../platform/schemas.js';

const tags = ['Files'];
const FileId = z.object({ fileId: z.string().min(1).max(200).describe('File id') });

const Hls = z
  .object({
    fileId: z.string(),
    status: z
      .enum(['none', 'requested', 'processing', 'ready', 'failed'])
      .describe('requested: starts when the upload arrives'),
    progress: z.number().describe('0..1 while processing'),
    error: z.string().nullable().describe('Why it failed, in words (not a video, unreadable...)'),
    bytes: z.number().int().describe('Bytes of the playlists and segments (counted in your storage)'),
    renditions: z.array(
      z.object({
        name: z.string(),
        width: z.number().int(),
        height: z.number().int(),
        bandwidth: z.number().int(),
      }),
    ),
    playlistUrl: z
      .string()
      .nullable()
      .describe(
        "The master playlist: a public file's stable URL, or a private file's signed URL that opens its playlists and segments for an hour",
      ),
    playlistUrlExpiresAt: IsoTime.nullable(),
  })
  .meta({ id: 'FileHls', description: "A video file's HLS renditions" });

const PLAN = {
  status: 402,
  code: 'PlanUpgradeRequired',
  description: 'HLS streaming is included in the Mega and Tera plans',
};

export const hlsOperations = [
  defineOperation({
    id: 'files.hls',
    method: 'POST',
    path: '/files/{fileId}/hls',
    summary: 'Make HLS renditions of a video file (360p and 720p, H.264/AAC, 5 s segments)',
    description:
      'A durable job with progress (poll GET). Renditions above the source height are left out. A file that is ' +
      'not a video ends the job `failed` with why. Asking again while it runs or once ready answers its state.',
    tags,
    auth: ['owner'],
    params: FileId,
    response: Hls,
    errors: [PLAN, { status: 409, code: 'FileDeleted', description: 'The file is in the trash' }],
    handler: ({ services, principal, params }) => services.files.hls!.start(principal, params.fileId),
  }),
  defineOperation({
    id: 'files.hlsGet',
    method: 'GET',
    path: '/files/{fileId}/hls',
    summary: "A file's HLS renditions: state, progress and the playlist URL",
    tags,
    auth: ['owner'],
    params: FileId,
    response: Hls,
    handler: ({ services, principal, params }) => services.files.hls!.status(principal, params.fileId),
  }),
  defineOperation({
    id: 'files.hlsDelete',
    method: 'DELETE',
    path: '/files/{fileId}/hls',
    summary: "Remove a file's HLS renditions (the file stays)",
    tags,
    auth: ['owner'],
    params: FileId,
    response: Ok,
    handler: ({ services, principal, params }) => services.files.hls!.remove(principal, params.fileId),
  }),
];
