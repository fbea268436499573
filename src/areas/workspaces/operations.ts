import { z } from 'zod';
import { defineOperation } from '../../platform/operation.js';
import { IsoTime } from '../../platform/schemas.js';
import type { WorkspacesService } from './service.js';

declare module '../../platform/operation.js' {
  interface Services {
    workspaces: WorkspacesService;
  }
}

const tags = ['Workspaces'];

const Name = z
  .string()
  .trim()
  .min(1)
  .max(64)
  .regex(/^[^\u0000-\u001f]+$/, 'no control characters')
  .describe('Unique in the account; `default` is the default workspace\'s');
const WorkspaceIdParam = z.object({ workspaceId: z.string().min(1).max(100).describe('Workspace id (`default` or `wsp_...`)') });
const Counts = z.record(z.string(), z.number().int()).describe('Resources per kind (sandboxes, databases, files, ...); kinds with none are left out');
export const Workspace = z
  .object({
    id: z.string(),
    name: z.string(),
    isDefault: z.boolean().describe('The `default` workspace: resources created without a workspaceId land there'),
    createdAt: IsoTime,
  })
  .meta({ id: 'Workspace', description: 'A group of an account\'s resources; keys can be narrowed to workspaces' });

export const workspacesOperations = [
  defineOperation({
    id: 'workspaces.list',
    method: 'GET',
    path: '/workspaces',
    summary: "The account's workspaces (the default one first)",
    tags,
    auth: ['owner'],
    response: z.object({ items: z.array(Workspace) }),
    handler: ({ services, principal }) => services.workspaces.list(principal),
  }),
  defineOperation({
    id: 'workspaces.create',
    method: 'POST',
    path: '/workspaces',
    summary: 'Create a workspace',
    description:
      'Resources (sandboxes, databases, files, documents, webhooks, ...) take `workspaceId` on create and as a list filter; ' +
      'a key created with `workspaceIds` reaches only those workspaces\' resources.',
    tags,
    auth: ['owner'],
    body: z.object({ name: Name }),
    successStatus: 201,
    errors: [
      { status: 403, code: 'KeyScopeTooWide', description: 'A key narrowed to workspaces cannot create another' },
      { status: 409, code: 'WorkspaceNameTaken', description: 'The account has a workspace by that name' },
    ],
    response: Workspace,
    handler: ({ services, principal, body }) => services.workspaces.create(principal, body),
  }),
  defineOperation({
    id: 'workspaces.get',
    method: 'GET',
    path: '/workspaces/{workspaceId}',
    summary: 'Get a workspace and how many resources it holds',
    tags,
    auth: ['owner'],
    params: WorkspaceIdParam,
    response: Workspace.extend({ resources: Counts }),
    handler: ({ services, principal, params }) => services.workspaces.get(principal, params.workspaceId),
  }),
  defineOperation({
    id: 'workspaces.update',
    method: 'PATCH',
    path: '/workspaces/{workspaceId}',
    summary: 'Rename a workspace',
    tags,
    auth: ['owner'],
    params: WorkspaceIdParam,
    body: z.object({ name: Name.optional() }),
    errors: [
      { status: 409, code: 'DefaultWorkspace', description: 'The default workspace cannot be renamed' },
      { status: 409, code: 'WorkspaceNameTaken', description: 'The account has a workspace by that name' },
    ],
    response: Workspace,
    handler: ({ services, principal, params, body }) => services.workspaces.update(principal, params.workspaceId, body),
  }),
  defineOperation({
    id: 'workspaces.delete',
    method: 'DELETE',
    path: '/workspaces/{workspaceId}',
    summary: 'Delete a workspace (with force=true, and its resources)',
    description:
      'Refused (409 WorkspaceNotEmpty, with the counts) while the workspace holds resources, unless `force=true`: ' +
      'then each resource is deleted as its own DELETE would, and the answer counts them.',
    tags,
    auth: ['owner'],
    params: WorkspaceIdParam,
    query: z.object({ force: z.enum(['true', 'false']).default('false').transform((v) => v === 'true').describe('Delete the resources it holds too') }),
    errors: [
      { status: 409, code: 'DefaultWorkspace', description: 'The default workspace cannot be deleted' },
      { status: 409, code: 'WorkspaceNotEmpty', description: 'The workspace holds resources (counts in `resources`)' },
    ],
    response: z.object({ ok: z.literal(true), deleted: Counts.describe('What force=true deleted, per kind') }),
    handler: ({ services, principal, params, query }) => services.workspaces.delete(principal, params.workspaceId, query.force),
  }),
];
