import { z } from 'zod';
import { KeyScopeInput, keyRequest } from '../account/key-scope.js';
import { defineOperation } from '../../platform/operation.js';
import { limited } from '../../platform/json-limits.js';
import { IsoTime, Ok, StringMap, qBool, qInt, WorkspaceFilter, WorkspaceIdInput } from '../../platform/schemas.js';
import { VolumeMounts } from '../sandboxes/schemas.js';
import type { MachinesService } from './facade.js';
import { Backup, Checkout, CpuMode, LaunchResult, Machine, MachineId, MachineTier, Release } from './schemas.js';

declare module '../../platform/operation.js' {
  interface Services {
    machines: MachinesService;
  }
}

const tags = ['Machines'];

const SecretName = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/)
  .describe('Environment variable name');

export const machinesOperations = [
  defineOperation({
    id: 'machines.tiers',
    method: 'GET',
    path: '/machines/tiers',
    summary: 'List machine tiers with monthly prices in MXN',
    description: '`micro` is the practical minimum for an always-on Node app; `nano` cannot sustain a build.',
    tags,
    auth: ['owner'],
    response: z.object({ tiers: z.array(MachineTier) }),
    handler: ({ services }) => services.machines.core.tiers(),
  }),
  defineOperation({
    id: 'machines.list',
    method: 'GET',
    path: '/machines',
    summary: 'List your always-on machines',
    tags,
    auth: ['owner'],
    query: WorkspaceFilter,
    response: z.object({ machines: z.array(Machine) }),
    handler: ({ services, principal, query }) => services.machines.core.list(principal, query.workspaceId),
  }),
  defineOperation({
    id: 'machines.create',
    method: 'POST',
    path: '/machines',
    summary: 'Create an always-on machine, or promote an existing sandbox into one',
    description:
      'Without an active plan returns `{ checkoutUrl }`; the machine is created when payment confirms. ' +
      'fromSandboxId promotes an ephemeral sandbox, keeping its sandboxId.',
    tags,
    auth: ['owner'],
    body: z.object({
      tier: z.string().min(1).max(32).describe('Tier name from GET /machines/tiers'),
      cpuMode: CpuMode.default('shared'),
      diskAddonsGB: z
        .number()
        .int()
        .min(0)
        .max(2000)
        .multipleOf(100)
        .default(0)
        .describe('Extra disk in GB: multiples of 100, max 2000'),
      template: z.string().min(1).max(128).optional().describe('Sandbox template (default `base`)'),
      name: z.string().min(1).max(64).optional().describe('Display name, max 64'),
      fromSandboxId: z
        .string()
        .min(1)
        .max(200)
        .optional()
        .describe('Promote this sandbox (keeps its sandboxId)'),
      volumes: VolumeMounts.optional().describe(
        'Volumes the machine holds and its box mounts (at most 8; not with fromSandboxId), kept across restarts and releases and released when the machine is deleted. The machine is placed on their node. One writer per volume (409 VolumeBusy)',
      ),
      nubeKey: KeyScopeInput.optional().describe(
        'nube mints a key with this scope (never wider than the caller\'s), puts it in the box as NUBE_API_KEY with NUBE_BASE_URL (the sandbox\'s environment and the app\'s secrets), and revokes it when the machine is deleted',
      ),
      workspaceId: WorkspaceIdInput.optional(),
    }),
    response: z.union([Machine, Checkout]),
    handler: ({ services, principal, body }) =>
      services.machines.core.create(principal, { ...body, nubeKey: body.nubeKey && keyRequest(body.nubeKey) }),
  }),
  defineOperation({
    id: 'machines.launch',
    method: 'POST',
    path: '/machines/launch',
    summary: 'Launch an app from a git repo or archive URL in one call: build, release, HTTPS URL, domain',
    description:
      'Exactly one of repo or archiveUrl; sandboxId is the destination: alone it redeploys that machine, ' +
      'with a source it deploys the source there. Builds inside the box, publishes a recovery release, ' +
      'exposes an HTTPS URL and attaches the domain. Without an active plan returns `{ checkoutUrl }`.',
    tags,
    auth: ['owner'],
    body: z
      .object({
        repo: z.string().min(1).max(2048).optional().describe('Git repository URL'),
        ref: z
          .string()
          .min(1)
          .max(255)
          .optional()
          .describe('Branch, tag or commit of repo (default: default branch)'),
        archiveUrl: z.url().optional().describe('URL of a .tar.gz or .zip of the app'),
        sandboxId: z
          .string()
          .min(1)
          .max(200)
          .optional()
          .describe('Destination sandbox (machine) to deploy to'),
        tier: z.string().min(1).max(32).optional().describe('Tier for a new machine (default `micro`)'),
        name: z.string().min(1).max(64).optional(),
        domain: z.string().min(1).max(253).optional().describe('Custom domain to attach'),
        port: z
          .number()
          .int()
          .min(1)
          .max(65535)
          .optional()
          .describe('Port the app listens on (default: detected)'),
        buildCommand: z.string().max(4096).optional().describe('Build command (default: detected)'),
        startCommand: z.string().max(4096).optional().describe('Start command (default: detected)'),
        env: StringMap.optional().describe('Non-secret environment; use /secrets for secrets'),
        volumes: VolumeMounts.optional().describe(
          'Volumes a new machine holds and its box mounts (as POST /machines; not with sandboxId)',
        ),
      })
      .refine((b) => !(b.repo !== undefined && b.archiveUrl !== undefined), {
        message: 'give exactly one of repo or archiveUrl',
        path: ['archiveUrl'],
      })
      .refine((b) => !(b.volumes?.length && b.sandboxId !== undefined), {
        message: 'volumes apply to a new machine: an existing one keeps what it holds',
        path: ['volumes'],
      })
      .refine((b) => b.repo !== undefined || b.archiveUrl !== undefined || b.sandboxId !== undefined, {
        message: 'give repo or archiveUrl (or sandboxId alone to redeploy)',
        path: ['repo'],
      })
      .meta({ id: 'Launch' }),
    response: z.union([LaunchResult, Checkout]),
    handler: ({ services, principal, body }) => services.machines.launcher.launch(principal, body),
  }),
  defineOperation({
    id: 'machines.get',
    method: 'GET',
    path: '/machines/{id}',
    summary: 'Get a machine',
    tags,
    auth: ['owner'],
    params: MachineId,
    response: Machine,
    handler: ({ services, principal, params }) => services.machines.core.get(principal, params.id),
  }),
  defineOperation({
    id: 'machines.delete',
    method: 'DELETE',
    path: '/machines/{id}',
    summary: 'Delete a machine: cancels billing (prorated) and destroys the VM',
    description: 'Idempotent.',
    tags,
    auth: ['owner'],
    params: MachineId,
    response: Ok,
    handler: ({ services, principal, params }) => services.machines.delete(principal, params.id),
  }),
  defineOperation({
    id: 'machines.releases.list',
    method: 'GET',
    path: '/machines/{id}/releases',
    summary: "List a machine's releases (code snapshots), newest first",
    tags,
    auth: ['owner'],
    params: MachineId,
    response: z.object({ releases: z.array(Release) }),
    handler: ({ services, principal, params }) => services.machines.releases.list(principal, params.id),
  }),
  defineOperation({
    id: 'machines.releases.create',
    method: 'POST',
    path: '/machines/{id}/releases',
    summary: "Publish a release: a prebuilt snapshot of the machine's current code",
    tags,
    auth: ['owner'],
    params: MachineId,
    body: z.object({ message: z.string().max(500).optional().describe('Release note') }),
    bodyOptional: true,
    response: Release,
    handler: ({ services, principal, params, body }) =>
      services.machines.releases.publish(principal, params.id, body?.message ?? null),
  }),
  defineOperation({
    id: 'machines.rollback',
    method: 'POST',
    path: '/machines/{id}/rollback',
    summary: 'Roll a machine back to an earlier release (same machine, no rebuild)',
    tags,
    auth: ['owner'],
    params: MachineId,
    body: z.object({ releaseId: z.string().min(1).max(200) }),
    response: z.object({
      ok: z.literal(true),
      machineId: z.string(),
      releaseId: z.string().describe('Release now running'),
      previousReleaseId: z.string().nullable(),
    }),
    handler: ({ services, principal, params, body }) => services.machines.releases.rollback(principal, params.id, body.releaseId),
  }),
  defineOperation({
    id: 'machines.restart',
    method: 'POST',
    path: '/machines/{id}/restart',
    summary: 'Restart a machine, applying secrets and runspec without a rebuild',
    description:
      'Answers once the app serves again (its port answers the health check: any HTTP answer, or 2xx/3xx from ' +
      "the runspec's `health` path), or fails with why: 409 AppCrashing (it ended twice), AppOutOfMemory (the " +
      'kernel killed it for memory) or AppNotServing (no answer within NUBE_MACHINE_START_TIMEOUT_S), with ' +
      '`status`, `restarts`, `lastExit` and the last log lines (`logTail`). The supervisor keeps restarting it.',
    tags,
    auth: ['owner'],
    params: MachineId,
    response: z.object({
      ok: z.literal(true),
      machineId: z.string(),
      restartedAt: IsoTime,
      servingAfterMs: z.number().int().describe('How long after the restart the app answered its health check'),
    }),
    errors: [
      { status: 409, code: 'AppCrashing', description: 'The app ended twice after the restart without serving' },
      { status: 409, code: 'AppOutOfMemory', description: 'The kernel killed the app for memory (its tier is too small for it)' },
      { status: 409, code: 'AppNotServing', description: 'The app did not answer on its port in time' },
      { status: 409, code: 'RestartSuperseded', description: 'Another restart (or a launch) started the app again while this one waited' },
    ],
    handler: ({ services, principal, params }) => services.machines.apps.restart(principal, params.id),
  }),
  defineOperation({
    id: 'machines.secrets.get',
    method: 'GET',
    path: '/machines/{id}/secrets',
    summary: "List the names of a machine's secrets (values are never returned)",
    tags,
    auth: ['owner'],
    params: MachineId,
    response: z.object({
      secretNames: z.array(z.string()).describe('Names in the runspec'),
      inVault: z.array(z.string()).describe('Names with an encrypted value stored'),
    }),
    handler: ({ services, principal, params }) => services.machines.apps.getSecrets(principal, params.id),
  }),
  defineOperation({
    id: 'machines.secrets.set',
    method: 'POST',
    path: '/machines/{id}/secrets',
    aliases: [{ method: 'PUT', path: '/machines/{id}/secrets' }],
    summary: 'Set secrets (environment variables) of a machine; restarts it unless restart=false',
    description:
      'Body maps name to value. Values are stored encrypted; the runspec keeps only the names. With ' +
      'restart=false the secrets take effect at the next POST /machines/{id}/restart.',
    tags,
    auth: ['owner'],
    params: MachineId,
    query: z.object({ restart: qBool.optional().describe('Restart now to apply (default true)') }),
    body: limited(z.record(SecretName, z.string().max(65_536)), { maxDepth: 1, maxKeys: 100, maxBytes: 1024 * 1024 }).describe(
      'Secret name to value (at most 100 secrets, 1 MiB in all)',
    ),
    response: z.object({
      secretNames: z.array(z.string()),
      pendingRestart: z.boolean().describe('True when the new values wait for a restart'),
    }),
    handler: ({ services, principal, params, query, body }) =>
      services.machines.apps.setSecrets(principal, params.id, body, query.restart ?? true),
  }),
  defineOperation({
    id: 'machines.logs',
    method: 'GET',
    path: '/machines/{id}/logs',
    summary: "Read the last lines of a machine's logs, optionally filtered",
    tags,
    auth: ['owner'],
    params: MachineId,
    query: z.object({
      lines: qInt(1, 10_000).default(200).describe('Lines to return, 1-10000 (default 200)'),
      grep: z.string().min(1).max(500).optional().describe('Only lines containing this text'),
    }),
    response: z.object({ lines: z.array(z.string()) }),
    handler: ({ services, principal, params, query }) => services.machines.apps.logs(principal, params.id, query),
  }),
  defineOperation({
    id: 'machines.backups.list',
    method: 'GET',
    path: '/machines/{id}/backups',
    summary: "List a machine's backups (daily, kept 7 days, included in the price)",
    description: 'Backups copy runspec.dataPaths, not the root filesystem.',
    tags,
    auth: ['owner'],
    params: MachineId,
    response: z.object({ backups: z.array(Backup) }),
    handler: ({ services, principal, params }) => services.machines.backups.list(principal, params.id),
  }),
  defineOperation({
    id: 'machines.backups.restore',
    method: 'POST',
    path: '/machines/{id}/backups/{backupId}/restore',
    summary: "Put a backup's data paths back (the app is stopped meanwhile, then restarted)",
    description: 'Replaces each path the backup holds with its copy; paths the backup does not hold are untouched.',
    tags,
    auth: ['owner'],
    params: MachineId.extend({ backupId: z.string().min(1).max(200) }),
    response: z.object({ ok: z.literal(true), machineId: z.string(), backupId: z.string(), restoredPaths: z.array(z.string()) }),
    handler: ({ services, principal, params }) => services.machines.backups.restore(principal, params.id, params.backupId),
  }),
];
