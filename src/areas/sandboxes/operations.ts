import { z } from 'zod';
import { errors } from '../../platform/errors.js';
import { defineOperation } from '../../platform/operation.js';
import { FreeObject, Ok, qInt, WorkspaceFilter } from '../../platform/schemas.js';
import {
  ACTION_DOC,
  ActionBody,
  ExecBody,
  FILE_OP_DOC,
  FileOpBody,
  RunCodeBody,
  SANDBOX_ACTIONS,
  SANDBOX_FILE_OPS,
} from './action-bodies.js';
import type { SandboxesService } from './facade.js';
import {
  BgExec,
  CREATE_RATE,
  BgParams,
  Env,
  ExecResult,
  RunAsUser,
  Sandbox,
  SandboxCreate,
  SandboxId,
} from './schemas.js';
import { templateSnapshotOperations } from './template-operations.js';
import { openTerminal, TerminalQuery } from './terminal.js';

export { SANDBOX_ACTIONS, SANDBOX_FILE_OPS, sandboxActionBodies, sandboxFileBodies } from './action-bodies.js';
export type { SandboxAction, SandboxFileOp } from './action-bodies.js';

declare module '../../platform/operation.js' {
  interface Services {
    sandboxes: SandboxesService;
  }
}

const tags = ['Sandboxes'];

// ---------------------------------------------------------------------------------------------------
// Operations

export const sandboxesOperations = [
  defineOperation({
    id: 'sandboxes.list',
    method: 'GET',
    path: '/sandboxes',
    summary: 'List your live and suspended sandboxes',
    tags,
    auth: ['owner'],
    query: WorkspaceFilter,
    response: z.object({ sandboxes: z.array(Sandbox) }),
    handler: ({ principal, services, query }) => services.sandboxes.list(principal, query.workspaceId),
  }),
  defineOperation({
    id: 'sandboxes.create',
    method: 'POST',
    path: '/sandboxes',
    summary: 'Create a sandbox (an isolated Linux VM with root and internet access)',
    description:
      'Returns the sandbox with status `starting` (it may already be `running`). Without suspendOnIdle the ' +
      'sandbox is destroyed, not suspended, when timeoutSeconds (default 300) elapses. Rate limited to 10 ' +
      'creations per minute unless the operator sets another rate (NUBE_SANDBOX_CREATE_PER_MINUTE). With templateKey + templateHash it starts from a derived template with its ' +
      'bootstrap already applied.',
    tags,
    auth: ['owner'],
    body: SandboxCreate,
    response: Sandbox,
    rateLimit: CREATE_RATE,
    errors: [
      { status: 402, description: 'Insufficient balance or plan (boxes allowance reached)' },
      {
        status: 404,
        code: 'DerivedTemplateNotProvisioned',
        description: 'No derived template for (templateKey, templateHash)',
      },
      { status: 429, description: 'More sandbox creations in a minute than allowed (10 by default)' },
    ],
    handler: ({ principal, services, body }) => services.sandboxes.create(principal, body),
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
    handler: ({ principal, services, params }) => services.sandboxes.get(principal, params.id),
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
    handler: ({ principal, services, params }) => services.sandboxes.delete(principal, params.id),
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
    handler: ({ principal, services, params, body }) => services.sandboxes.work.exec(principal, params.id, body),
  }),
  defineOperation({
    id: 'sandboxes.terminal',
    method: 'GET',
    path: '/sandboxes/{id}/terminal',
    summary: 'Open an interactive shell with a PTY in a sandbox (WebSocket)',
    description:
      'A WebSocket: connect with `Upgrade: websocket` (a plain GET answers 426). Binary messages carry the ' +
      "terminal's bytes both ways; text messages from the client are JSON controls, " +
      '`{"type":"resize","rows":R,"cols":C}` (or `{"type":"input","data":"..."}`); when the shell ends nube ' +
      'sends `{"type":"exit","code":N}` and closes. A suspended sandbox is resumed. The SDK opens it with ' +
      '`nube.openTerminal(sandboxId)`.',
    tags,
    auth: ['owner'],
    params: SandboxId,
    query: TerminalQuery,
    response: z.object({}).describe('Never sent: the answer is the 101 upgrade'),
    errors: [
      { status: 409, description: 'The sandbox is not running and cannot be resumed' },
      { status: 426, code: 'UpgradeRequired', description: 'Called without Upgrade: websocket' },
    ],
    rateLimit: { points: 60, windowSeconds: 60 },
    handler: () => {
      throw errors.upgradeRequired();
    },
    websocket: ({ principal, services, params, query }) => openTerminal(services.sandboxes, principal, params.id, query),
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
    // The code goes into a file inside the sandbox; the interpreter judges it.
    anyText: ['code'],
    response: ExecResult,
    handler: ({ principal, services, params, body }) => services.sandboxes.work.runCode(principal, params.id, body),
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
    handler: ({ principal, services, params }) => services.sandboxes.work.bgList(principal, params.id),
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
      user: RunAsUser.optional(),
    }),
    response: z.object({ execId: z.string().describe('Id of the background process') }),
    handler: ({ principal, services, params, body }) => services.sandboxes.work.bgStart(principal, params.id, body),
  }),
  defineOperation({
    id: 'sandboxes.bg.get',
    method: 'GET',
    path: '/sandboxes/{id}/bg/{execId}',
    summary: 'Get the state and logs of a background process',
    tags,
    auth: ['owner'],
    params: BgParams,
    query: z.object({
      stdoutOffset: qInt(0, Number.MAX_SAFE_INTEGER).optional().describe('Read stdout from this byte offset'),
      stderrOffset: qInt(0, Number.MAX_SAFE_INTEGER).optional().describe('Read stderr from this byte offset'),
    }),
    response: BgExec,
    handler: ({ principal, services, params, query }) =>
      services.sandboxes.work.bgGet(principal, params.id, params.execId, query),
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
    handler: ({ principal, services, params, query }) =>
      services.sandboxes.work.bgKill(principal, params.id, params.execId, query.graceSeconds),
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
    // A file's content goes into the sandbox, never into the metadata store.
    anyText: ['content'],
    response: FreeObject,
    handler: ({ principal, services, params, body }) =>
      services.sandboxes.work.file(principal, params.id, params.op, body),
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
    handler: ({ principal, services, params, query }) => {
      if (params.op !== 'read' && params.op !== 'list') {
        throw errors.badRequest(`GET serves read and list; use POST for ${params.op}`, [
          { path: ['params', 'op'], message: 'read or list' },
        ]);
      }
      return services.sandboxes.work.file(principal, params.id, params.op, query);
    },
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
    // run-code and run-cell code, and an apply-patch diff, go into the sandbox (bootstrap scripts are stored: no).
    anyText: ['code', 'patch'],
    response: FreeObject,
    errors: [
      { status: 402, description: 'fork: insufficient plan (boxes allowance reached)' },
      {
        status: 409,
        code: 'DerivedTemplateStale',
        description: 'template-snapshot: the base template was rebuilt',
      },
    ],
    handler: ({ principal, services, params, body }) =>
      services.sandboxes.action(principal, params.id, params.action, body),
  }),
  ...templateSnapshotOperations,
];
