import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime, Ok, ok } from '../../platform/schemas.js';
import { KEEP_BACKUPS } from './backups.js';
import type { VolumesService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    volumes: VolumesService;
  }
}

const tags = ['Volumes'];

const SizeGB = z.number().int().min(1).max(4096);

export const Volume = z
  .object({
    id: z.string().describe("Volume id (`volumeId` in paths and in a sandbox's `volumes`)"),
    name: z.string(),
    status: z
      .enum(['ready', 'restoring', 'failed', 'lost'])
      .describe(
        'ready; restoring: being filled from a backup (fromBackupId); failed: that restore did not complete ' +
          '(error says why; delete it); lost: the node holding it is down: mounts and changes answer 409 ' +
          'VolumeLost, and its last backup (lastBackupId) restores onto another node',
      ),
    error: z.string().nullable().describe('Why it is failed or lost, and what restores it'),
    sizeGB: z
      .number()
      .describe('Its limit in GiB: a write past it fails inside the sandbox (EDQUOT or ENOSPC)'),
    sizeBytes: z.number().int(),
    usedBytes: z.number().int().nullable().describe('Bytes it holds now (GET of one volume); null in lists'),
    nodeId: z
      .string()
      .nullable()
      .describe('The node whose store holds it: sandboxes that mount it are placed there'),
    sourceId: z.string().nullable().describe('The volume, snapshot or backup it was copied from, or null'),
    lastBackupId: z.string().nullable().describe('Its newest completed backup, or null'),
    mounts: z
      .array(z.object({ sandboxId: z.string(), path: z.string(), readOnly: z.boolean() }))
      .describe('Sandboxes that mount it now'),
    heldBy: z
      .array(z.string())
      .describe('Machines and agents that hold it across their boxes (their boxes are in mounts while they run)'),
    createdAt: IsoTime,
  })
  .meta({ id: 'Volume', description: 'A quota-limited directory on a node that outlives sandboxes' });

export const VolumeSnapshot = z
  .object({
    id: z.string().describe('Snapshot id (`fromSnapshotId` of a new volume)'),
    volumeId: z.string(),
    sizeBytes: z.number().int().describe("The volume's limit when it was taken (a copy's default size)"),
    nodeId: z.string().nullable(),
    createdAt: IsoTime,
  })
  .meta({ id: 'VolumeSnapshot', description: 'A read-only copy-on-write copy of a volume' });

export const VolumeBackup = z
  .object({
    id: z.string().describe('Backup id (`fromBackupId` of a new volume)'),
    volumeId: z.string().describe('The volume it copies (it may be deleted or lost since)'),
    volumeName: z.string(),
    status: z
      .enum(['running', 'completed', 'failed'])
      .describe('running while it is taken; only a completed backup restores'),
    error: z.string().nullable().describe('Why it failed'),
    sizeBytes: z.number().int().describe('Bytes in the blob store (a zstd-compressed tar)'),
    usedBytes: z.number().int().describe('Bytes the volume held (a restore needs a limit at least this)'),
    volumeSizeBytes: z.number().int().describe("The volume's limit then: a restore's default size"),
    sha256: z.string().nullable().describe('SHA-256 of the stored bytes, checked on every restore'),
    nodeId: z.string().nullable().describe('The node that took it; a restore goes to any node'),
    createdAt: IsoTime,
    completedAt: IsoTime.nullable(),
  })
  .meta({
    id: 'VolumeBackup',
    description: "A consistent copy of a volume's files in the blob store (taken from a snapshot)",
  });

const VolumeParams = z.object({ volumeId: z.string().min(1).max(200).describe('Volume id') });
const BackupParams = z.object({ backupId: z.string().min(1).max(200).describe('Volume backup id') });

export const volumesOperations = [
  defineOperation({
    id: 'volumes.create',
    method: 'POST',
    path: '/volumes',
    summary: 'Create a volume: empty, or a copy-on-write copy of a volume or a snapshot',
    description:
      "A directory limited to sizeGB on this node's sandbox store that outlives sandboxes and restarts of nube. " +
      'Mount it with `POST /sandboxes {volumes: [{volumeId, path, readOnly?}]}`. With fromVolumeId or fromSnapshotId ' +
      "the new volume shares blocks with its source (copy-on-write; milliseconds whatever the size); sizeGB defaults to the source's.",
    tags,
    auth: ['owner'],
    body: z
      .object({
        name: z.string().min(1).max(128),
        sizeGB: SizeGB.optional().describe('Limit in GiB (1-4096); required for an empty volume'),
        fromVolumeId: z.string().min(1).max(200).optional().describe('Copy this volume (it may be mounted)'),
        fromSnapshotId: z.string().min(1).max(200).optional().describe('Copy this volume snapshot'),
        fromBackupId: z
          .string()
          .min(1)
          .max(200)
          .optional()
          .describe(
            'Restore this completed backup into a new volume on this node (any node, also when its volume is lost): ' +
              'the volume is `restoring` until every byte is back and checked, then `ready`',
          ),
      })
      .refine(
        (b) => [b.fromVolumeId, b.fromSnapshotId, b.fromBackupId].filter((x) => x !== undefined).length <= 1,
        { message: 'give at most one of fromVolumeId, fromSnapshotId and fromBackupId', path: ['fromBackupId'] },
      )
      .refine(
        (b) =>
          b.sizeGB !== undefined ||
          b.fromVolumeId !== undefined ||
          b.fromSnapshotId !== undefined ||
          b.fromBackupId !== undefined,
        {
          message: 'sizeGB is required for an empty volume',
          path: ['sizeGB'],
        },
      ),
    successStatus: 201,
    response: Volume,
    errors: [
      { status: 400, code: 'VolumeTooSmall', description: 'sizeGB below what the source holds' },
      { status: 402, code: 'VolumeLimitReached', description: "the plan's number of volumes is reached" },
      { status: 402, code: 'VolumeSpaceExceeded', description: "the plan's total GiB of volumes would be passed" },
      { status: 409, code: 'VolumeLost', description: "the source volume's node is down (details.lastBackupId)" },
      { status: 409, code: 'BackupNotRestorable', description: 'the backup is running or failed' },
      { status: 501, code: 'NotImplemented', description: 'the sandbox driver keeps no volumes' },
      { status: 503, description: 'the store has no disk quotas' },
    ],
    handler: ({ principal, body, services }) => services.volumes.create(principal, body),
  }),
  defineOperation({
    id: 'volumes.list',
    method: 'GET',
    path: '/volumes',
    summary: 'List volumes',
    tags,
    auth: ['owner'],
    response: z.object({ items: z.array(Volume) }),
    handler: ({ principal, services }) => services.volumes.list(principal),
  }),
  defineOperation({
    id: 'volumes.get',
    method: 'GET',
    path: '/volumes/{volumeId}',
    summary: 'Get a volume with the bytes it holds',
    tags,
    auth: ['owner'],
    params: VolumeParams,
    response: Volume,
    handler: ({ principal, params, services }) => services.volumes.get(principal, params.volumeId),
  }),
  defineOperation({
    id: 'volumes.resize',
    method: 'PATCH',
    path: '/volumes/{volumeId}',
    summary: "Change a volume's limit (never below the bytes it holds)",
    description:
      'Takes effect at once, also for sandboxes that mount it. Below usedBytes: 400 VolumeTooSmall.',
    tags,
    auth: ['owner'],
    params: VolumeParams,
    body: z.object({ sizeGB: SizeGB.describe('New limit in GiB') }),
    response: Volume,
    errors: [
      { status: 400, code: 'VolumeTooSmall', description: 'below the bytes it holds' },
      { status: 402, code: 'VolumeSpaceExceeded', description: "the plan's total GiB of volumes would be passed" },
      { status: 409, code: 'VolumeLost', description: "its node is down (details.lastBackupId)" },
    ],
    handler: ({ principal, params, body, services }) =>
      services.volumes.resize(principal, params.volumeId, body.sizeGB),
  }),
  defineOperation({
    id: 'volumes.delete',
    method: 'DELETE',
    path: '/volumes/{volumeId}',
    summary: 'Delete a volume and its files (409 VolumeInUse while a sandbox mounts it or a machine or agent holds it)',
    description: "A lost volume's record goes at once (its files stay on its dead node); its backups stay.",
    tags,
    auth: ['owner'],
    params: VolumeParams,
    response: Ok,
    errors: [{ status: 409, code: 'VolumeInUse', description: 'a sandbox mounts it (details.sandboxes) or a machine or agent holds it (details.heldBy)' }],
    handler: async ({ principal, params, services }) => {
      await services.volumes.delete(principal, params.volumeId);
      return ok;
    },
  }),
  defineOperation({
    id: 'volumes.snapshot',
    method: 'POST',
    path: '/volumes/{volumeId}/snapshot',
    summary: 'Take a read-only copy-on-write snapshot of a volume',
    description: 'Milliseconds whatever the size; a new volume starts from it with `fromSnapshotId`.',
    tags,
    auth: ['owner'],
    params: VolumeParams,
    successStatus: 201,
    response: VolumeSnapshot,
    handler: ({ principal, params, services }) => services.volumes.snapshot(principal, params.volumeId),
  }),
  defineOperation({
    id: 'volumes.snapshots',
    method: 'GET',
    path: '/volumes/{volumeId}/snapshots',
    summary: "List a volume's snapshots",
    tags,
    auth: ['owner'],
    params: VolumeParams,
    response: z.object({ items: z.array(VolumeSnapshot) }),
    handler: ({ principal, params, services }) => services.volumes.snapshots(principal, params.volumeId),
  }),
  defineOperation({
    id: 'volumes.deleteSnapshot',
    method: 'DELETE',
    path: '/volume-snapshots/{snapshotId}',
    summary: 'Delete a volume snapshot (volumes copied from it keep their files)',
    tags,
    auth: ['owner'],
    params: z.object({ snapshotId: z.string().min(1).max(200).describe('Volume snapshot id') }),
    response: Ok,
    handler: async ({ principal, params, services }) => {
      await services.volumes.deleteSnapshot(principal, params.snapshotId);
      return ok;
    },
  }),
  defineOperation({
    id: 'volumes.backup',
    method: 'POST',
    path: '/volumes/{volumeId}/backups',
    summary: 'Back a volume up to the blob store (asynchronous: poll the backup until completed)',
    description:
      'Snapshots the volume (a consistent copy while sandboxes write to it), then streams a zstd-compressed ' +
      'tar of the snapshot to the blob store with its SHA-256, in a job on the volume\'s node. Answers 201 ' +
      `with the backup \`running\`; GET /volume-backups/{backupId} says when it is completed. The newest ` +
      `${KEEP_BACKUPS} completed backups of a volume are kept. Restore with \`POST /volumes {name, fromBackupId}\`, on any node.`,
    tags,
    auth: ['owner'],
    params: VolumeParams,
    successStatus: 201,
    response: VolumeBackup,
    errors: [
      { status: 409, code: 'VolumeLost', description: 'its node is down (details.lastBackupId)' },
      { status: 409, code: 'VolumeNotReady', description: 'it is being restored, or its restore failed' },
    ],
    handler: ({ principal, params, services }) => services.volumes.backup(principal, params.volumeId),
  }),
  defineOperation({
    id: 'volumes.backups',
    method: 'GET',
    path: '/volumes/{volumeId}/backups',
    summary: "List a volume's backups, newest first (also once it is lost or deleted)",
    tags,
    auth: ['owner'],
    params: VolumeParams,
    response: z.object({ items: z.array(VolumeBackup) }),
    handler: ({ principal, params, services }) => services.volumes.backupsOf(principal, params.volumeId),
  }),
  defineOperation({
    id: 'volumes.getBackup',
    method: 'GET',
    path: '/volume-backups/{backupId}',
    summary: 'Get a volume backup (its status while it is taken)',
    tags,
    auth: ['owner'],
    params: BackupParams,
    response: VolumeBackup,
    handler: async ({ principal, params, services }) =>
      services.volumes.backups.view(await services.volumes.backups.own(principal, params.backupId)),
  }),
  defineOperation({
    id: 'volumes.deleteBackup',
    method: 'DELETE',
    path: '/volume-backups/{backupId}',
    summary: 'Delete a volume backup and its bytes in the blob store',
    tags,
    auth: ['owner'],
    params: BackupParams,
    response: Ok,
    errors: [{ status: 409, code: 'BackupRunning', description: 'it is still being taken' }],
    handler: async ({ principal, params, services }) => {
      await services.volumes.backups.delete(principal, params.backupId);
      return ok;
    },
  }),
];
