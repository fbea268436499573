// The machines area's resource schemas (shared by operations and the service's views).
import { z } from 'zod';
import { IsoTime, WorkspaceIdOutput } from '../../platform/schemas.js';
import { HeldVolume } from '../sandboxes/schemas.js';

export const MachineId = z.object({ id: z.string().min(1).max(200).describe('Machine id') });
export const CpuMode = z.enum(['shared', 'reserved']).describe('shared vCPU (default) or reserved cores');

export const MachineTier = z
  .object({
    name: z.string().describe('Tier name (`nano`, `micro`, ...)'),
    vcpus: z.number().describe('vCPUs'),
    memoryMB: z.number().int(),
    diskGB: z.number().int().describe('Included disk'),
    monthlyMxn: z.number().describe('Price in MXN per month with shared CPU'),
    reservedMonthlyMxn: z
      .number()
      .nullable()
      .describe('Price in MXN per month with reserved CPU, or null if not offered'),
    diskAddonMonthlyMxnPer100GB: z.number().describe('Price of each 100 GB disk add-on, MXN per month'),
    canBuild: z.boolean().describe('False when the tier cannot sustain a build (nano)'),
    notes: z
      .string()
      .nullable()
      .describe('Guidance, e.g. micro is the practical minimum for an always-on Node app'),
  })
  .meta({ id: 'MachineTier', description: 'A machine size with its monthly price in MXN' });

export const AppState = z
  .object({
    restarts: z.number().int().describe('Times the supervisor started the app again since the last restart, rollback or launch'),
    lastExit: z
      .object({
        code: z.number().int().describe('Exit code (128 + the signal when a signal ended it: 137 is SIGKILL)'),
        signal: z.number().int().nullable(),
        oom: z.boolean().describe('The kernel killed it for memory (the cgroup counted an OOM kill)'),
        at: IsoTime,
      })
      .nullable(),
    oomKills: z.number().int().describe('Processes the kernel killed for memory since the app was started'),
  })
  .meta({ id: 'MachineApp', description: "What the machine's app is doing (the supervisor's count and the kernel's)" });

export const Machine = z
  .object({
    id: z.string(),
    name: z.string(),
    status: z
      .enum(['provisioning', 'building', 'starting', 'running', 'crashing', 'oom', 'unhealthy', 'stopped', 'failed', 'lost'])
      .describe(
        'provisioning -> building (launch) -> starting -> running. With an app: starting (not answering yet), running ' +
          '(its port answers the health check), crashing (it keeps exiting: see app.lastExit and app.restarts), oom (the ' +
          'kernel killed it for memory), unhealthy (it runs but has not answered for NUBE_MACHINE_START_TIMEOUT_S), ' +
          'stopped. failed (see lastError); lost: the node holding its box is down (lastError says since when). ' +
          'lastError says in words what is wrong',
      ),
    tier: z.string(),
    cpuMode: CpuMode,
    diskAddonsGB: z.number().int(),
    monthlyMxn: z.number().describe('Monthly price in MXN (tier, CPU mode and disk add-ons)'),
    sandboxId: z.string().describe('The always-on sandbox behind the machine'),
    template: z.string().nullable(),
    url: z.string().nullable().describe('Public HTTPS URL of the app, once exposed'),
    domains: z.array(z.string()).describe('Custom domains attached'),
    volumes: z.array(HeldVolume).describe('Volumes the machine holds; its box mounts them across restarts and releases'),
    currentReleaseId: z.string().nullable(),
    phase: z
      .string()
      .nullable()
      .describe('While a launch runs: queued, unpacking, building, starting, publishing (output in the logs)'),
    pendingRestart: z.boolean().describe('Secrets changed with restart=false wait for POST /restart'),
    lastError: z.string().nullable(),
    app: AppState.nullable().describe('The app under the supervisor, once one was started (null before, or while its node is away)'),
    createdAt: IsoTime,
    updatedAt: IsoTime,
    workspaceId: WorkspaceIdOutput,
  })
  .meta({ id: 'Machine', description: 'Always-on hosting: a persistent sandbox billed monthly' });

export const Release = z
  .object({
    id: z.string(),
    machineId: z.string(),
    version: z.number().int().describe('1, 2, 3... per machine'),
    message: z.string().nullable(),
    source: z.enum(['launch', 'manual', 'recovery']).describe('What published it'),
    status: z.enum(['building', 'ready', 'failed']),
    current: z.boolean().describe('Whether the machine runs this release'),
    sizeBytes: z.number().int(),
    createdAt: IsoTime,
  })
  .meta({ id: 'Release', description: 'Code: a published, prebuilt snapshot of the app (not its data)' });

export const Backup = z
  .object({
    id: z.string(),
    machineId: z.string(),
    consistency: z
      .enum(['hot', 'consistent'])
      .describe(
        'hot: copied while the app ran (crash-consistent at best); consistent: see method',
      ),
    method: z
      .enum(['sqlite-backup-api', 'app-paused', 'app-stopped', 'hot-copy'])
      .describe(
        'sqlite-backup-api: every file was a SQLite database copied with its backup API; app-paused: the app was ' +
          'frozen (SIGSTOP) during the copy; app-stopped: no app ran; hot-copy: copied while running',
      ),
    paths: z.array(z.string()).describe('runspec.dataPaths copied'),
    error: z.string().nullable(),
    sizeBytes: z.number().int(),
    status: z.enum(['running', 'completed', 'failed']),
    createdAt: IsoTime,
    expiresAt: IsoTime.describe('Kept 7 days'),
  })
  .meta({ id: 'Backup', description: 'Data: a daily copy of runspec.dataPaths (not the root filesystem)' });

export const LaunchResult = z
  .object({
    machineId: z.string(),
    sandboxId: z.string(),
    releaseId: z.string().nullable().describe('Release published by the launch (the first launch publishes the recovery release)'),
    url: z.string().nullable().describe('Public HTTPS URL of the app'),
    domain: z.string().nullable().describe('Domain attached, or null'),
    status: z
      .enum(['running', 'failed', 'building'])
      .describe('building: still building after the request waited (or a paid launch order); poll GET /machines/{id}'),
    buildLog: z.string().describe('Tail of the build output'),
    error: z.string().nullable().describe('Why the launch failed, or null'),
  })
  .meta({ id: 'LaunchResult' });

export const Checkout = z
  .object({ checkoutUrl: z.string().describe("Pay here (Stripe Checkout when nube has Stripe configured, else nube's own page an operator confirms); the machine is created when the payment confirms") })
  .meta({ id: 'Checkout', description: 'Returned instead when the account has no active plan' });

