// Resource schemas and shared building blocks of the sandboxes operations.
import { z } from 'zod';
import type { RateLimitRule } from '../../platform/operation.js';
import { IsoTime, StringMap, WorkspaceIdInput, WorkspaceIdOutput } from '../../platform/schemas.js';
import { mountPathProblem, overlappingMounts } from './volume-binder.js';

/** Sandbox creations per owner: the spec's 10 a minute unless the operator sets NUBE_SANDBOX_CREATE_PER_MINUTE(_<PLAN>). */
export const CREATE_RATE: RateLimitRule = { points: 10, windowSeconds: 60, setting: 'sandboxCreate' };

// ---------------------------------------------------------------------------------------------------
// Building blocks

/** Key and hash of a derived template (spec Limits: template snapshot key and hash). */
export const TEMPLATE_KEY_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
export const TemplateKey = z
  .string()
  .regex(TEMPLATE_KEY_RE)
  .describe('Derived template key, `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`');
export const TemplateHash = z
  .string()
  .regex(TEMPLATE_KEY_RE)
  .describe(
    'Derived template hash, `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`; must never encode prompts or credentials',
  );
export const Env = StringMap.describe('Environment variables, name to value');
export const Lang = z.enum(['python', 'node', 'bash']).describe('Interpreter');
export const Port = z.number().int().min(1).max(65535).describe('Port inside the sandbox');
export const ExecTimeout = z.number().int().min(1).max(600);
/** Docker's USER forms; the name is looked up in the sandbox's /etc/passwd and /etc/group when used. */
export const RunAsUser = z
  .string()
  .regex(/^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}(:[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63})?$/, 'name, uid, name:group or uid:gid')
  .describe(
    "User to run as: a name, uid, name:group or uid:gid of the sandbox's /etc/passwd and /etc/group (default: the template's user, else root); an unknown one is a 400",
  );

export const SandboxStatus = z
  .enum(['starting', 'running', 'suspended', 'failed', 'lost'])
  .describe(
    'starting: creation not finished (see phase and progress); running; suspended: stopped with its disk ' +
      'kept (snapshot); failed: it could not start (see error): only get, list, logs and delete act on it, ' +
      'other calls answer 409 SandboxFailed; it stays until deleted or its timeout passes; lost: the node ' +
      'holding it is down (see error): other calls answer 503 until the node is back, delete removes the record',
  );

export const StartProgress = z
  .object({
    percent: z.number().int().min(0).max(100).describe('Estimated share of the template build done'),
    step: z.string().describe('Build step (`downloading and installing packages`, ...)'),
    elapsedSeconds: z.number().int().describe('Time since the build began'),
  })
  .meta({ id: 'StartProgress', description: 'How far the template build a starting sandbox waits for is' });

export const SandboxId = z.object({ id: z.string().min(1).max(200).describe('Sandbox id') });
export const BgParams = SandboxId.extend({
  execId: z.string().min(1).max(200).describe('Background process id'),
});

// ---------------------------------------------------------------------------------------------------
// Resources

export const Sandbox = z
  .object({
    id: z.string().describe('Sandbox id; also its hostname'),
    status: SandboxStatus,
    phase: z
      .string()
      .nullable()
      .describe(
        'While starting, what it waits for: `building template <name>` (the first use of a template on ' +
          'a host builds it, minutes), `waiting to build template <name>`, or `starting`; null otherwise',
      ),
    progress: StartProgress.nullable().describe('While its template is being built; null otherwise'),
    error: z.string().nullable().describe('Why it failed to start (status failed); null otherwise'),
    template: z.string().describe('Base template name (`base`, `code-interpreter`, ...)'),
    templateKey: z.string().nullable().describe('Derived template key it started from, or null'),
    templateHash: z.string().nullable().describe('Derived template hash it started from, or null'),
    name: z.string().nullable().describe('Optional display name'),
    metadata: StringMap.describe('Caller metadata, string to string'),
    parentId: z.string().nullable().describe('Sandbox it was forked from, or null'),
    timeoutSeconds: z.number().int().describe('Lifetime from creation (or last extend) in seconds'),
    suspendOnIdle: z
      .boolean()
      .describe('When true the sandbox is suspended (not destroyed) when its timeout or idle TTL expires'),
    idleTtlSeconds: z
      .number()
      .int()
      .nullable()
      .describe('Inactivity TTL set with the `idle` action, or null'),
    hardTtlSeconds: z
      .number()
      .int()
      .nullable()
      .describe('Absolute TTL set with the `idle` action: destroys the sandbox regardless, or null'),
    cpuCount: z.number().int().describe('vCPUs'),
    memoryMB: z.number().int().describe('Memory limit in MiB'),
    diskMB: z.number().int().nullable().describe('Writable disk limit in MiB; null: no quota enforced'),
    createdAt: IsoTime,
    expiresAt: IsoTime.nullable().describe('When the timeout fires; null while suspended (TTL paused)'),
    hardExpiresAt: IsoTime.nullable().describe('When the hard TTL destroys the sandbox regardless, or null'),
    suspendedAt: IsoTime.nullable().describe('When it was suspended, or null'),
    suspendKeepsMemory: z.boolean().describe('Its suspends keep processes and memory by default'),
    memoryKept: z
      .boolean()
      .describe('Suspended with its processes and memory kept: a resume carries on where they were'),
    urls: z
      .array(z.object({ port: z.number().int(), url: z.string().describe('Public HTTPS/WSS URL') }))
      .describe('Ports exposed with the `expose` action'),
    workspaceId: WorkspaceIdOutput,
  })
  .meta({ id: 'Sandbox', description: 'A microVM-like sandbox with root and internet access' });

export const ExecResult = z
  .object({
    exitCode: z
      .number()
      .int()
      .nullable()
      .describe('Exit status; null when the process was killed (timeout or signal)'),
    stdout: z.string().describe('Standard output (UTF-8, possibly truncated)'),
    stderr: z.string().describe('Standard error (UTF-8, possibly truncated)'),
    timedOut: z.boolean().describe('True when the deadline killed the process group'),
    truncated: z.boolean().describe('True when stdout or stderr exceeded the capture limit'),
    durationMs: z.number().int().describe('Wall-clock time of the command'),
  })
  .meta({ id: 'ExecResult', description: 'Result of a synchronous command (exec, run-code)' });

export const BgExec = z
  .object({
    execId: z.string().describe('Background process id'),
    command: z.string(),
    state: z.enum(['running', 'exited']).describe('running, or exited (see exitCode)'),
    exitCode: z
      .number()
      .int()
      .nullable()
      .describe('Exit status once exited (128+N when ended by signal N); null while running or when unknown'),
    startedAt: IsoTime,
    endedAt: IsoTime.nullable(),
    logs: z
      .object({
        stdout: z.string().describe('Standard output from stdoutOffset (at most 1 MiB per read)'),
        stderr: z.string().describe('Standard error from stderrOffset (at most 1 MiB per read)'),
        stdoutNextOffset: z
          .number()
          .int()
          .describe('Pass as stdoutOffset to continue where this read stopped'),
        stderrNextOffset: z
          .number()
          .int()
          .describe('Pass as stderrOffset to continue where this read stopped'),
      })
      .optional()
      .describe('Output kept on disk; present on GET /sandboxes/{id}/bg/{execId}'),
  })
  .meta({ id: 'BgExec', description: 'A background process started with POST /sandboxes/{id}/bg' });

export const DerivedTemplate = z
  .object({
    id: z.string().describe('Derived template id'),
    key: z.string(),
    hash: z.string(),
    name: z.string().nullable(),
    baseTemplate: z.string().describe('Template it was derived from'),
    baseBuild: z.string().describe('Build of the base template; a rebuilt base makes it stale'),
    stale: z.boolean().describe('True when the base template was rebuilt since this snapshot'),
    sourceSandboxId: z.string().nullable().describe('Sandbox the snapshot was taken from'),
    sizeBytes: z.number().int().describe('Size of its layer'),
    liveChildren: z
      .number()
      .int()
      .describe('Sandboxes started from it that are starting, running or suspended'),
    createdAt: IsoTime,
  })
  .meta({
    id: 'DerivedTemplate',
    description: 'A derived template snapshot (bootstrap already applied), identified by (key, hash)',
  });

export const VolumeMountBody = z
  .object({
    volumeId: z.string().min(1).max(200).describe('Volume id'),
    path: z
      .string()
      .max(1024)
      .regex(/^(\/[A-Za-z0-9_@+,=.-]+)+$/, 'an absolute path of plain names (letters, digits, _@+,=.-)')
      .refine((p) => !p.split('/').some((c) => c === '.' || c === '..'), 'no . or .. in the path')
      .superRefine((p, ctx) => {
        const why = mountPathProblem(p);
        if (why) ctx.addIssue({ code: 'custom', message: why });
      })
      .describe('Where the volume appears inside the sandbox (absolute; not in /proc, /sys, /dev or /.nube)'),
    readOnly: z.boolean().default(false).describe('Mount read-only (any number of sandboxes may)'),
  })
  .meta({ id: 'SandboxVolumeMount' });

/** A volume a machine or an agent holds, as its box mounts it. */
export const HeldVolume = z
  .object({ volumeId: z.string(), path: z.string(), readOnly: z.boolean() })
  .meta({ id: 'HeldVolume' });

/** Volumes of a sandbox, a machine or an agent: at most 8, no two paths overlapping. */
export const VolumeMounts = z
  .array(VolumeMountBody)
  .max(8)
  .superRefine((vs, ctx) => {
    for (const [i, j] of overlappingMounts(vs.map((v) => v.path))) {
      ctx.addIssue({ code: 'custom', message: `overlaps the mount at ${vs[i]!.path}`, path: [j, 'path'] });
    }
  });

export const SandboxCreate = z
  .object({
    template: z
      .string()
      .min(1)
      .max(128)
      .default('base')
      .describe(
        'Base template (default `base`; `code-interpreter` for run-cell; `goose`: base plus the goose binary, 400 TemplateUnavailable where goose is not installed)',
      ),
    timeoutSeconds: z
      .number()
      .int()
      .min(1)
      .max(86_400)
      .default(300)
      .describe(
        'Lifetime in seconds (default 300); capped by the plan session length (Byte 1 h, Mega 4 h, Tera 24 h)',
      ),
    suspendOnIdle: z
      .boolean()
      .default(false)
      .describe('Suspend (snapshot) instead of destroying the sandbox when the timeout elapses'),
    suspendKeepsMemory: z
      .boolean()
      .optional()
      .describe(
        "Its suspends (the timeout's too) keep running processes and memory, frozen in the host's memory, unless a suspend says keepMemory: false. Default false: a suspend keeps the files and ends the processes",
      ),
    templateKey: TemplateKey.optional().describe(
      'Start from the derived template (key, hash); needs templateHash',
    ),
    templateHash: TemplateHash.optional().describe(
      'Start from the derived template (key, hash); needs templateKey',
    ),
    name: z.string().max(128).optional(),
    metadata: StringMap.optional().describe('Caller metadata, string to string'),
    env: Env.optional().describe('Environment for every command in the sandbox'),
    diskMB: z
      .number()
      .int()
      .min(64)
      .max(1_048_576)
      .optional()
      .describe(
        "Writable disk in MiB (files, packages, logs of /bg processes); default and most: the plan's (Byte 2048, Mega 10240, Tera 51200). A write past it fails inside the sandbox (ENOSPC or EDQUOT); the sandbox keeps running",
      ),
    volumes: VolumeMounts.optional().describe(
      'Volumes to mount (at most 8). The sandbox is placed on their node. One writer per volume at a time (409 VolumeBusy), any number of read-only mounts',
    ),
    workspaceId: WorkspaceIdInput.optional(),
  })
  .refine((b) => (b.templateKey === undefined) === (b.templateHash === undefined), {
    message: 'templateKey and templateHash go together',
    path: ['templateHash'],
  })
  .meta({ id: 'SandboxCreate' });
