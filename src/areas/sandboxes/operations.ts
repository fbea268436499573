import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { FreeObject, IsoTime, Ok, StringMap, qInt } from '../../platform/schemas.js';

const tags = ['Sandboxes'];

// ---------------------------------------------------------------------------------------------------
// Building blocks

/** Key and hash of a derived template (spec Limits: template snapshot key and hash). */
export const TEMPLATE_KEY_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const TemplateKey = z
  .string()
  .regex(TEMPLATE_KEY_RE)
  .describe('Derived template key, `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`');
const TemplateHash = z
  .string()
  .regex(TEMPLATE_KEY_RE)
  .describe(
    'Derived template hash, `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`; must never encode prompts or credentials',
  );
const Env = StringMap.describe('Environment variables, name to value');
const Lang = z.enum(['python', 'node', 'bash']).describe('Interpreter');
const Port = z.number().int().min(1).max(65535).describe('Port inside the sandbox');
const ExecTimeout = z.number().int().min(1).max(600);

const SandboxStatus = z
  .enum(['starting', 'running', 'suspended'])
  .describe('starting: creation not finished; running; suspended: stopped with its disk kept (snapshot)');

const SandboxId = z.object({ id: z.string().min(1).max(200).describe('Sandbox id') });
const BgParams = SandboxId.extend({ execId: z.string().min(1).max(200).describe('Background process id') });

// ---------------------------------------------------------------------------------------------------
// Resources

export const Sandbox = z
  .object({
    id: z.string().describe('Sandbox id; also its hostname'),
    status: SandboxStatus,
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
    diskMB: z.number().int().describe('Writable disk limit in MiB'),
    createdAt: IsoTime,
    expiresAt: IsoTime.nullable().describe('When the timeout fires; null while suspended (TTL paused)'),
    suspendedAt: IsoTime.nullable().describe('When it was suspended, or null'),
    urls: z
      .array(z.object({ port: z.number().int(), url: z.string().describe('Public HTTPS/WSS URL') }))
      .describe('Ports exposed with the `expose` action'),
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

const BgState = z
  .enum(['running', 'exited', 'killed'])
  .describe('running; exited: ended on its own (see exitCode); killed: ended by DELETE or a signal');

export const BgExec = z
  .object({
    execId: z.string().describe('Background process id'),
    command: z.string(),
    cwd: z.string().nullable(),
    state: BgState,
    pid: z.number().int().nullable().describe('Process id inside the sandbox, or null once reaped'),
    exitCode: z.number().int().nullable().describe('Exit status once exited, else null'),
    signal: z.string().nullable().describe('Signal that ended it (SIGTERM, SIGKILL), or null'),
    startedAt: IsoTime,
    endedAt: IsoTime.nullable(),
    logs: z
      .object({
        stdout: z.string().describe('Tail of standard output'),
        stderr: z.string().describe('Tail of standard error'),
        stdoutBytes: z.number().int().describe('Total bytes written to stdout so far'),
        stderrBytes: z.number().int().describe('Total bytes written to stderr so far'),
        truncated: z.boolean().describe('True when only the tail is returned'),
      })
      .optional()
      .describe('Output captured on disk; present on GET /sandboxes/{id}/bg/{execId}'),
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

// ---------------------------------------------------------------------------------------------------
// Per-action bodies (POST /sandboxes/{id}/{action}); the handler validates with these.

const Ttl = z.number().int().min(60);

const ExecBody = z.object({
  command: z.string().min(1).describe('Shell command (run with `sh -c`)'),
  cwd: z.string().optional().describe('Working directory inside the sandbox'),
  timeoutSeconds: ExecTimeout.default(60).describe('Deadline in seconds, 1-600 (default 60)'),
  env: Env.optional(),
});

const RunCodeBody = z.object({
  code: z.string().min(1).describe('Source code to run'),
  lang: Lang.default('python'),
  timeoutSeconds: ExecTimeout.default(60).describe('Deadline in seconds, 1-600 (default 60)'),
});

const NetworkRule = z
  .string()
  .min(1)
  .max(253)
  .describe('IPv4/IPv6 CIDR (`10.0.0.0/8`), address, or domain name (`example.com`, `*.example.com`)');

const NetworkPolicyBody = z.object({
  internet: z.boolean().optional().describe('Allow outbound internet at all (default true)'),
  allowOut: z
    .array(NetworkRule)
    .max(256)
    .optional()
    .describe(
      'Destinations allowed even when otherwise denied (private ranges, the host are denied by default)',
    ),
  denyOut: z.array(NetworkRule).max(256).optional().describe('Destinations denied'),
});

const IdleBody = z
  .object({
    suspendOnIdle: z.boolean().describe('Suspend instead of destroy when the idle TTL expires'),
    idleTtlSeconds: Ttl.optional().describe(
      'Inactivity TTL, min 60; required when suspendOnIdle is true; re-arms the inactivity clock from now',
    ),
    hardTtlSeconds: Ttl.optional().describe('Absolute TTL, min 60: destroys the sandbox regardless'),
  })
  .refine((b) => !b.suspendOnIdle || b.idleTtlSeconds !== undefined, {
    message: 'idleTtlSeconds is required when suspendOnIdle is true',
    path: ['idleTtlSeconds'],
  });

const PortProtocol = z.object({
  port: Port,
  protocol: z.enum(['tcp', 'udp']).default('tcp').describe('Transport (default tcp)'),
});

const Domain = z.string().min(1).max(253).describe('Fully qualified domain name');
const None = z.object({});

export const SANDBOX_ACTIONS = [
  'extend',
  'suspend',
  'resume',
  'idle',
  'bootstrap',
  'snapshot',
  'fork',
  'template-snapshot',
  'exec',
  'run-code',
  'run-cell',
  'kernel-restart',
  'logs',
  'runtime',
  'apply-patch',
  'expose',
  'expose-raw',
  'unexpose-raw',
  'ssh-enable',
  'ssh-disable',
  'ssh-ticket',
  'domain-add',
  'domain-remove',
  'domain-list',
  'domain-verify',
  'network-policy',
] as const;
export type SandboxAction = (typeof SANDBOX_ACTIONS)[number];

/** Body of each action, exactly per the spec's action table. */
export const sandboxActionBodies = {
  extend: z.object({
    extendSeconds: z
      .number()
      .int()
      .min(1)
      .optional()
      .describe('Seconds added to the timeout (default: timeoutSeconds)'),
  }),
  suspend: None,
  resume: z.object({ env: Env.optional().describe('Environment rewritten on wake') }),
  idle: IdleBody,
  bootstrap: z.object({
    script: z
      .string()
      .describe('Run by the host at every wake; empty string turns it off. Must not contain credentials'),
    mode: z.enum(['async', 'blocking']).optional().describe('blocking: wake waits for the script'),
    timeoutSeconds: z.number().int().min(1).optional(),
  }),
  snapshot: z.object({ name: z.string().max(128).optional() }),
  fork: z.object({
    count: z.number().int().min(1).optional().describe('Number of forks (default 1)'),
    name: z.string().max(128).optional(),
    metadata: StringMap.optional(),
    timeoutSeconds: z.number().int().min(1).optional(),
  }),
  'template-snapshot': z.object({
    key: TemplateKey,
    hash: TemplateHash,
    name: z.string().max(128).optional(),
  }),
  exec: ExecBody,
  'run-code': RunCodeBody,
  'run-cell': z.object({ code: z.string().describe('Cell source'), lang: Lang.optional() }),
  'kernel-restart': None,
  logs: None,
  runtime: None,
  'apply-patch': z.object({ patch: z.string().min(1).describe('Unified diff') }),
  expose: z.object({ port: Port }),
  'expose-raw': PortProtocol,
  'unexpose-raw': PortProtocol,
  'ssh-enable': None,
  'ssh-disable': None,
  'ssh-ticket': None,
  'domain-add': z.object({
    domain: Domain,
    port: Port.optional().describe('Port served on the domain (default 80)'),
  }),
  'domain-remove': z.object({ domain: Domain }),
  'domain-list': None,
  'domain-verify': z.object({ domain: Domain }),
  'network-policy': NetworkPolicyBody,
} satisfies Record<SandboxAction, z.ZodType>;

const ACTION_DOC = `One route serves every action; the body depends on the action:
- extend: {extendSeconds?: integer}
- suspend: none. Snapshot the sandbox and pause its TTL
- resume: {env?: map}. Environment rewritten on wake
- idle: {suspendOnIdle: boolean, idleTtlSeconds?: integer >= 60 (required when suspendOnIdle is true; re-arms the inactivity clock from now), hardTtlSeconds?: integer >= 60 (destroys regardless)}
- bootstrap: {script: string (run by the host at every wake; "" turns it off), mode?: async|blocking, timeoutSeconds?}. Travels in metadata: must not contain credentials
- snapshot: {name?}
- fork: {count?: integer, name?, metadata?: map string to string, timeoutSeconds?: integer}. Copy-on-write; the parent keeps running
- template-snapshot: {key, hash (both ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$), name?}. Idempotent per (key, hash); afterwards POST /sandboxes with templateKey+templateHash starts with the bootstrap applied; 409 DerivedTemplateStale if the base template was rebuilt. The hash must never encode prompts or credentials
- exec: {command, cwd?, timeoutSeconds? 1-600, env?} (same as POST /sandboxes/{id}/exec)
- run-code: {code, lang?: python|node|bash, timeoutSeconds? 1-600} (same as POST /sandboxes/{id}/run-code)
- run-cell: {code, lang?: python|node|bash}. Persistent Jupyter kernel (code-interpreter template)
- kernel-restart, logs, runtime, ssh-enable, ssh-disable, ssh-ticket, domain-list: none
- apply-patch: {patch: unified diff}
- expose: {port}. Yields a public HTTPS/WSS URL
- expose-raw, unexpose-raw: {port, protocol?: tcp|udp}
- domain-add: {domain, port?}; domain-remove, domain-verify: {domain}
- network-policy: {internet?: boolean, allowOut?: string[], denyOut?: string[]} (CIDRs or domains)
The result is a free-form object per action.`;

/**
 * Loose union of every action's fields, for documentation and tool input; the handler then validates
 * the body with `sandboxActionBodies[action]`.
 */
const ActionBody = z.looseObject({
  extendSeconds: z.number().int().optional().describe('extend'),
  env: Env.optional().describe('resume, exec'),
  suspendOnIdle: z.boolean().optional().describe('idle'),
  idleTtlSeconds: z.number().int().optional().describe('idle'),
  hardTtlSeconds: z.number().int().optional().describe('idle'),
  script: z.string().optional().describe('bootstrap'),
  mode: z.string().optional().describe('bootstrap: async | blocking'),
  timeoutSeconds: z.number().int().optional().describe('bootstrap, fork, exec, run-code'),
  name: z.string().optional().describe('snapshot, fork, template-snapshot'),
  count: z.number().int().optional().describe('fork'),
  metadata: StringMap.optional().describe('fork'),
  key: z.string().optional().describe('template-snapshot'),
  hash: z.string().optional().describe('template-snapshot'),
  command: z.string().optional().describe('exec'),
  cwd: z.string().optional().describe('exec'),
  code: z.string().optional().describe('run-code, run-cell'),
  lang: z.string().optional().describe('run-code, run-cell: python | node | bash'),
  patch: z.string().optional().describe('apply-patch'),
  port: z.number().int().optional().describe('expose, expose-raw, unexpose-raw, domain-add'),
  protocol: z.string().optional().describe('expose-raw, unexpose-raw: tcp | udp'),
  domain: z.string().optional().describe('domain-add, domain-remove, domain-verify'),
  internet: z.boolean().optional().describe('network-policy'),
  allowOut: z.array(z.string()).optional().describe('network-policy'),
  denyOut: z.array(z.string()).optional().describe('network-policy'),
});

// ---------------------------------------------------------------------------------------------------
// Sandbox file operations

export const SANDBOX_FILE_OPS = ['write', 'read', 'list', 'delete', 'move', 'mkdir'] as const;
export type SandboxFileOp = (typeof SANDBOX_FILE_OPS)[number];

const Path = z.string().min(1).max(4096).describe('Path inside the sandbox (absolute, or relative to /root)');

/** Body of each file operation, per the spec. */
export const sandboxFileBodies = {
  write: z.object({
    path: Path,
    content: z.string().describe('File content, encoded per `encoding`'),
    encoding: z.enum(['utf8', 'base64']).default('utf8'),
  }),
  read: z.object({ path: Path }),
  list: z.object({ path: Path }),
  delete: z.object({
    path: Path,
    recursive: z.boolean().optional().describe('Delete a directory and its contents'),
  }),
  move: z.object({ from: Path, to: Path }),
  mkdir: z.object({ path: Path }),
} satisfies Record<SandboxFileOp, z.ZodType>;

const FILE_OP_DOC = `Runs inside the sandbox's mount namespace, so symlinks never lead outside it. Body by op:
- write: {path, content, encoding?: utf8|base64}
- read: {path}
- list: {path}
- delete: {path, recursive?: boolean}
- move: {from, to}
- mkdir: {path}
The result is a free-form object (read: {path, content, encoding, size}; list: {path, entries: [{name, type, size, mtime}]}).`;

const FileOpBody = z.looseObject({
  path: z.string().optional().describe('write, read, list, delete, mkdir'),
  content: z.string().optional().describe('write'),
  encoding: z.string().optional().describe('write: utf8 | base64'),
  recursive: z.boolean().optional().describe('delete'),
  from: z.string().optional().describe('move'),
  to: z.string().optional().describe('move'),
});

// ---------------------------------------------------------------------------------------------------
// Operations

const SandboxCreate = z
  .object({
    template: z
      .string()
      .min(1)
      .max(128)
      .default('base')
      .describe('Base template (default `base`; `code-interpreter` for run-cell)'),
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
    templateKey: TemplateKey.optional().describe(
      'Start from the derived template (key, hash); needs templateHash',
    ),
    templateHash: TemplateHash.optional().describe(
      'Start from the derived template (key, hash); needs templateKey',
    ),
    name: z.string().max(128).optional(),
    metadata: StringMap.optional().describe('Caller metadata, string to string'),
    env: Env.optional().describe('Environment for every command in the sandbox'),
  })
  .refine((b) => (b.templateKey === undefined) === (b.templateHash === undefined), {
    message: 'templateKey and templateHash go together',
    path: ['templateHash'],
  })
  .meta({ id: 'SandboxCreate' });

export const sandboxesOperations = [
  defineOperation({
    id: 'sandboxes.list',
    method: 'GET',
    path: '/sandboxes',
    summary: 'List your live and suspended sandboxes',
    tags,
    auth: ['owner'],
    response: z.object({ sandboxes: z.array(Sandbox) }),
  }),
  defineOperation({
    id: 'sandboxes.create',
    method: 'POST',
    path: '/sandboxes',
    summary: 'Create a sandbox (an isolated Linux VM with root and internet access)',
    description:
      'Returns the sandbox with status `starting` (it may already be `running`). Without suspendOnIdle the ' +
      'sandbox is destroyed, not suspended, when timeoutSeconds (default 300) elapses. Rate limited to 10 ' +
      'creations per minute. With templateKey + templateHash it starts from a derived template with its ' +
      'bootstrap already applied.',
    tags,
    auth: ['owner'],
    body: SandboxCreate,
    response: Sandbox,
    rateLimit: { points: 10, windowSeconds: 60 },
    errors: [
      { status: 402, description: 'Insufficient balance or plan (boxes allowance reached)' },
      {
        status: 404,
        code: 'DerivedTemplateNotProvisioned',
        description: 'No derived template for (templateKey, templateHash)',
      },
      { status: 429, description: 'More than 10 sandbox creations in a minute' },
    ],
  }),
  defineOperation({
    id: 'sandboxes.get',
    method: 'GET',
    path: '/sandboxes/{id}',
    summary: 'Get a sandbox and its status',
    tags,
    auth: ['owner'],
    params: SandboxId,
    response: Sandbox,
  }),
  defineOperation({
    id: 'sandboxes.delete',
    method: 'DELETE',
    path: '/sandboxes/{id}',
    summary: 'Destroy a sandbox (irreversible: VM and disk are freed)',
    tags,
    auth: ['owner'],
    params: SandboxId,
    response: Ok,
  }),
  defineOperation({
    id: 'sandboxes.exec',
    method: 'POST',
    path: '/sandboxes/{id}/exec',
    summary: 'Run a shell command in a sandbox and wait for its output',
    description:
      'Synchronous: waits up to timeoutSeconds (default 60, max 600), then kills the whole process group. ' +
      'A process that must outlive the request must be started with POST /sandboxes/{id}/bg; a ' +
      'backgrounded child inside exec dies when the shell ends.',
    tags,
    auth: ['owner'],
    params: SandboxId,
    body: ExecBody,
    response: ExecResult,
  }),
  defineOperation({
    id: 'sandboxes.runCode',
    method: 'POST',
    path: '/sandboxes/{id}/run-code',
    summary: 'Run a Python, Node or Bash snippet in a sandbox and wait for its output',
    description:
      'One-shot interpreter process; waits up to timeoutSeconds (max 600). For a persistent kernel use the ' +
      '`run-cell` action on the code-interpreter template.',
    tags,
    auth: ['owner'],
    params: SandboxId,
    body: RunCodeBody,
    response: ExecResult,
  }),
  defineOperation({
    id: 'sandboxes.bg.list',
    method: 'GET',
    path: '/sandboxes/{id}/bg',
    summary: 'List background processes of a sandbox',
    tags,
    auth: ['owner'],
    params: SandboxId,
    response: z.object({ count: z.number().int(), processes: z.array(BgExec) }),
  }),
  defineOperation({
    id: 'sandboxes.bg.start',
    method: 'POST',
    path: '/sandboxes/{id}/bg',
    summary: 'Start a long-running background process (server, watcher) in a sandbox',
    description:
      'The process outlives the request; its output is kept in logs read with GET /sandboxes/{id}/bg/{execId}. ' +
      'Start the command with `exec <program>` so the shell is replaced by the process.',
    tags,
    auth: ['owner'],
    params: SandboxId,
    body: z.object({
      command: z.string().min(1).describe('Shell command; prefer `exec <program> ...`'),
      cwd: z.string().optional().describe('Working directory inside the sandbox'),
      env: Env.optional(),
    }),
    response: z.object({ execId: z.string().describe('Id of the background process') }),
  }),
  defineOperation({
    id: 'sandboxes.bg.get',
    method: 'GET',
    path: '/sandboxes/{id}/bg/{execId}',
    summary: 'Get the state and logs of a background process',
    tags,
    auth: ['owner'],
    params: BgParams,
    response: BgExec,
  }),
  defineOperation({
    id: 'sandboxes.bg.kill',
    method: 'DELETE',
    path: '/sandboxes/{id}/bg/{execId}',
    summary: 'Stop a background process and its whole process group',
    description: 'Sends SIGTERM to the process group, then SIGKILL after graceSeconds (0-30).',
    tags,
    auth: ['owner'],
    params: BgParams,
    query: z.object({
      graceSeconds: qInt(0, 30).optional().describe('Seconds between SIGTERM and SIGKILL, 0-30'),
    }),
    response: Ok,
  }),
  defineOperation({
    id: 'sandboxes.files.post',
    method: 'POST',
    path: '/sandboxes/{id}/files/{op}',
    summary: 'Write, read, list, delete, move or mkdir files inside a sandbox',
    description: FILE_OP_DOC,
    tags,
    auth: ['owner'],
    params: SandboxId.extend({ op: z.enum(SANDBOX_FILE_OPS).describe('File operation') }),
    body: FileOpBody,
    response: FreeObject,
  }),
  defineOperation({
    id: 'sandboxes.files.get',
    method: 'GET',
    path: '/sandboxes/{id}/files/{op}',
    summary: 'Read a file or list a directory inside a sandbox',
    description: 'Query form of the file operations: for `read` and `list`, `path` comes in the query.',
    tags,
    auth: ['owner'],
    params: SandboxId.extend({ op: z.enum(SANDBOX_FILE_OPS).describe('File operation (read or list)') }),
    query: z.object({
      path: z.string().min(1).max(4096).optional().describe('Path inside the sandbox (read, list)'),
      encoding: z
        .enum(['utf8', 'base64'])
        .optional()
        .describe('read: encoding of the returned content (default utf8)'),
    }),
    response: FreeObject,
  }),
  defineOperation({
    id: 'sandboxes.action',
    method: 'POST',
    path: '/sandboxes/{id}/{action}',
    summary:
      'Run a sandbox action: suspend, resume, fork, snapshot, expose a port, SSH, domains, network policy, ...',
    description: ACTION_DOC,
    tags,
    auth: ['owner'],
    params: SandboxId.extend({ action: z.enum(SANDBOX_ACTIONS).describe('Action to run') }),
    body: ActionBody,
    bodyOptional: true,
    response: FreeObject,
    errors: [
      { status: 402, description: 'fork: insufficient plan (boxes allowance reached)' },
      {
        status: 409,
        code: 'DerivedTemplateStale',
        description: 'template-snapshot: the base template was rebuilt',
      },
    ],
  }),
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
  }),
];
