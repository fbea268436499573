// Bodies of the actions (POST /sandboxes/{id}/{action}) and file operations, exactly per the spec; the
// operations declare a loose union for docs and tools, and the handlers validate with these.
import { z } from 'zod';
import { limited } from '../../platform/json-limits.js';
import { StringMap } from '../../platform/schemas.js';
import { Env, ExecTimeout, Lang, Port, RunAsUser, TemplateHash, TemplateKey } from './schemas.js';

// ---------------------------------------------------------------------------------------------------
// Per-action bodies (POST /sandboxes/{id}/{action}); the handler validates with these.

const Ttl = z.number().int().min(60);

export const ExecBody = z.object({
  command: z.string().min(1).describe('Shell command (run with `sh -c`)'),
  cwd: z.string().optional().describe('Working directory inside the sandbox'),
  timeoutSeconds: ExecTimeout.default(60).describe('Deadline in seconds, 1-600 (default 60)'),
  env: Env.optional(),
  user: RunAsUser.optional(),
});

export const RunCodeBody = z.object({
  code: z.string().min(1).describe('Source code to run'),
  lang: Lang.default('python'),
  timeoutSeconds: ExecTimeout.default(60).describe('Deadline in seconds, 1-600 (default 60)'),
});

export const NetworkRule = z
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
      'Destinations allowed even when `denyOut` or `internet: false` would deny them. Private, loopback, link-local (cloud metadata) and reserved ranges, the host and the other sandboxes stay closed whatever this says: such an entry (or a domain resolving into one) is a 400 naming it, unless the operator admitted the range (NUBE_SANDBOX_PRIVATE_ALLOW)',
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
  suspend: z.object({
    keepMemory: z
      .boolean()
      .optional()
      .describe(
        "Keep running processes and memory (frozen in the host's memory, released after the operator's hold time); default: the sandbox's suspendKeepsMemory",
      ),
  }),
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
  'run-cell': z.object({
    code: z.string().describe('Cell source'),
    lang: Lang.optional(),
    timeoutSeconds: ExecTimeout.optional().describe(
      'Cell deadline, 1-600 (default 120): the kernel is interrupted and keeps its state',
    ),
  }),
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

export const ACTION_DOC = `One route serves every action; the body depends on the action:
- extend: {extendSeconds?: integer}
- suspend: {keepMemory?: boolean}. Snapshot the sandbox and pause its TTL; keepMemory also keeps its running processes and memory (default: the sandbox's suspendKeepsMemory)
- resume: {env?: map}. Environment rewritten on wake
- idle: {suspendOnIdle: boolean, idleTtlSeconds?: integer >= 60 (required when suspendOnIdle is true; re-arms the inactivity clock from now), hardTtlSeconds?: integer >= 60 (destroys regardless)}
- bootstrap: {script: string (run by the host at every wake; "" turns it off), mode?: async|blocking, timeoutSeconds?}. Travels in metadata: must not contain credentials
- snapshot: {name?}
- fork: {count?: integer, name?, metadata?: map string to string, timeoutSeconds?: integer}. Copy-on-write; the parent keeps running
- template-snapshot: {key, hash (both ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$), name?}. Idempotent per (key, hash); afterwards POST /sandboxes with templateKey+templateHash starts with the bootstrap applied; 409 DerivedTemplateStale if the base template was rebuilt. The hash must never encode prompts or credentials
- exec: {command, cwd?, timeoutSeconds? 1-600, env?, user?} (same as POST /sandboxes/{id}/exec)
- run-code: {code, lang?: python|node|bash, timeoutSeconds? 1-600} (same as POST /sandboxes/{id}/run-code)
- run-cell: {code, lang?: python (only), timeoutSeconds? 1-600 (default 120)}. Persistent Jupyter kernel (code-interpreter template; 400 KernelUnavailable elsewhere). Answers {stdout, stderr, result (text/plain of the value), outputs [{type: execute_result|display_data, data: {mime: value; images base64}}], error {name, value, traceback} | null, executionCount, timedOut (the cell was interrupted; the kernel keeps its state), truncated, kernelStarted, kernelRestarted, durationMs}
- kernel-restart, logs, runtime, ssh-enable, ssh-disable, ssh-ticket, domain-list: none
- ssh-enable: turns SSH on ({ok, enabled, host, port, user}); ssh-ticket: {host, port, user (the sandbox id), password (valid 10 minutes), expiresAt, command}, 409 SshNotEnabled before ssh-enable; ssh-disable: revokes every ticket and closes live sessions ({ok, enabled: false, closedSessions}). The gateway gives a shell with a PTY, exec, SFTP/scp and local port forwarding (-L) inside the sandbox
- apply-patch: {patch: unified diff}
- expose: {port}. Yields a public HTTPS/WSS URL
- expose-raw, unexpose-raw: {port, protocol?: tcp|udp (default tcp)}. expose-raw answers {host, publicPort, protocol, port}: a host port forwarded to the port inside (idempotent; freed when the sandbox ends; a per-plan count limit, 402 RawPortLimit); unexpose-raw answers {ok, port, protocol, freed: the host port or null}
- domain-add: {domain, port? (default 80)}: answers {domain, port, verified, verifiedAt, records: [TXT _nube-challenge.<domain> = token, CNAME <domain> -> nube's public host]} (Mega and Tera; 409 DomainTaken when another account verified it); domain-verify: {domain}, reads the TXT record and, once it holds the token, HTTP requests whose Host is the domain reach the port (no expose needed); unverified answers carry a reason; domain-remove: {domain}; domain-list: {domains: [...]}
- network-policy: {internet?: boolean, allowOut?: string[], denyOut?: string[]} (CIDRs or domains)
The result is a free-form object per action.`;

/**
 * Loose union of every action's fields, for documentation and tool input; the handler then validates
 * the body with `sandboxActionBodies[action]`.
 */
export const ActionBody = limited(z.looseObject({
  extendSeconds: z.number().int().optional().describe('extend'),
  env: Env.optional().describe('resume, exec'),
  suspendOnIdle: z.boolean().optional().describe('idle'),
  keepMemory: z.boolean().optional().describe('suspend'),
  idleTtlSeconds: z.number().int().optional().describe('idle'),
  hardTtlSeconds: z.number().int().optional().describe('idle'),
  script: z.string().optional().describe('bootstrap'),
  mode: z.string().optional().describe('bootstrap: async | blocking'),
  timeoutSeconds: z.number().int().optional().describe('bootstrap, fork, exec, run-code, run-cell'),
  name: z.string().optional().describe('snapshot, fork, template-snapshot'),
  count: z.number().int().optional().describe('fork'),
  metadata: StringMap.optional().describe('fork'),
  key: z.string().optional().describe('template-snapshot'),
  hash: z.string().optional().describe('template-snapshot'),
  command: z.string().optional().describe('exec'),
  cwd: z.string().optional().describe('exec'),
  user: z.string().optional().describe('exec'),
  code: z.string().optional().describe('run-code, run-cell'),
  lang: z.string().optional().describe('run-code, run-cell: python | node | bash'),
  patch: z.string().optional().describe('apply-patch'),
  port: z.number().int().optional().describe('expose, expose-raw, unexpose-raw, domain-add'),
  protocol: z.string().optional().describe('expose-raw, unexpose-raw: tcp | udp'),
  domain: z.string().optional().describe('domain-add, domain-remove, domain-verify'),
  internet: z.boolean().optional().describe('network-policy'),
  allowOut: z.array(z.string()).optional().describe('network-policy'),
  denyOut: z.array(z.string()).optional().describe('network-policy'),
}), { maxDepth: 4 });

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

export const FILE_OP_DOC = `Runs inside the sandbox's mount namespace, so symlinks never lead outside it. Body by op:
- write: {path, content, encoding?: utf8|base64}
- read: {path}
- list: {path}
- delete: {path, recursive?: boolean}
- move: {from, to}
- mkdir: {path}
The result is a free-form object (read: {path, content, encoding, size}; list: {path, entries: [{name, type, size, mtime}]}).`;

export const FileOpBody = limited(z.looseObject({
  path: z.string().optional().describe('write, read, list, delete, mkdir'),
  content: z.string().optional().describe('write'),
  encoding: z.string().optional().describe('write: utf8 | base64'),
  recursive: z.boolean().optional().describe('delete'),
  from: z.string().optional().describe('move'),
  to: z.string().optional().describe('move'),
}), { maxDepth: 4 });
