import { z } from 'zod';
import { errors } from '../../platform/errors.js';
import { defineOperation, RawResponse } from '../../platform/operation.js';
import { limited } from '../../platform/json-limits.js';
import { IsoTime, Ok, qInt } from '../../platform/schemas.js';
import { NetworkRule } from '../sandboxes/action-bodies.js';
import { RunAsUser } from '../sandboxes/schemas.js';
import { buildLogEvents } from './build-logs.js';
import type { Principal } from '../../platform/auth.js';
import type { Services } from '../../platform/operation.js';
import type { ContextInput, TemplatesService } from './service.js';

const MAX_CONTEXT_BYTES = 512 * 1024 * 1024;

declare module '../../platform/operation.js' {
  interface Services {
    templates: TemplatesService;
  }
}

const tags = ['Templates'];
const TemplateId = z.object({ id: z.string().min(1).max(200).describe('Template id (`tmpl_...`) or name') });

const Layer = z
  .object({ mediaType: z.string(), digest: z.string(), size: z.number().int() })
  .meta({ id: 'TemplateLayer' });

const BuildArgs = limited(
  z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).max(256), z.string().max(32_768)),
  { maxDepth: 1, maxKeys: 256, maxBytes: 64 * 1024 },
).describe(
  "A Dockerfile's ARG values (`docker build --build-arg`): each overrides the default of an ARG the Dockerfile declares (one it does not declare is a 400); RUN steps see them, and they are part of each step's cache key. Not for secrets: they are shown in the template",
);

const BuildNetwork = z
  .object({
    internet: z.boolean().optional().describe('Outbound internet at all for RUN steps (default true)'),
    allowOut: z
      .array(NetworkRule)
      .max(256)
      .optional()
      .describe("Destinations allowed even when `denyOut` or `internet: false` deny them (private ranges stay closed, as for sandboxes' network-policy)"),
    denyOut: z.array(NetworkRule).max(256).optional().describe('Destinations denied'),
  })
  .strict()
  .describe(
    "The network of a Dockerfile's RUN steps, in the shape of a sandbox's network-policy: default, the internet as any sandbox has it (the host, private ranges and other sandboxes closed); `{internet: false}` for none, `{internet: false, allowOut: [\"pypi.org\", \"*.pythonhosted.org\"]}` for a list",
  );

const Template = z
  .object({
    id: z.string(),
    name: z
      .string()
      .describe('Name to start sandboxes, machines and E2B sandboxes from (`template: <name>`)'),
    fromImage: z
      .string()
      .nullable()
      .describe('The image reference, normalized (`docker.io/library/python:3.12-slim`); null for a Dockerfile'),
    dockerfile: z.string().nullable().describe('The Dockerfile built from; null for an image'),
    status: z.enum(['building', 'ready', 'failed', 'canceled']),
    phase: z.string().describe('queued, resolving, pulling, unpacking, building (a Dockerfile\'s steps), done, failed, canceled'),
    progress: z
      .object({
        percent: z.number().int().min(0).max(100),
        layersDone: z.number().int(),
        layersTotal: z.number().int(),
        bytesDone: z.number().int(),
        bytesTotal: z.number().int(),
        stepsDone: z.number().int().optional().describe("A Dockerfile's steps run or found cached"),
        stepsTotal: z.number().int().optional(),
      })
      .describe(
        'Layers pulled of all, bytes fetched (a cached layer counts as fetched); unpacking is the last 20 %',
      ),
    error: z.string().nullable().describe('Why the build failed, in words'),
    errorCode: z
      .string()
      .nullable()
      .describe(
        'ImageNotFound, AuthRefused, RegistryRefused, RegistryUnreachable, RegistryError, DigestMismatch, UnsupportedImage, LayerRefused, TooLarge, Canceled, BuildFailed; for a Dockerfile also StepFailed (with the step, line, exit code and last lines), BadDockerfile, BaseNotReady, BadContext, ContextMissing, ContextUnreachable',
      ),
    digest: z.string().nullable().describe('Manifest digest of the linux/amd64 image built from'),
    sizeBytes: z.number().int().describe('Bytes of file content unpacked'),
    layers: z.array(Layer),
    cpuCount: z.number().nullable(),
    memoryMB: z.number().int().nullable(),
    env: z.record(z.string(), z.string()),
    startCmd: z.string().nullable(),
    readyCmd: z.string().nullable(),
    workdir: z.string().nullable(),
    diskMB: z.number().int().nullable().describe("Its sandboxes' disk, MiB; null: the plan's"),
    user: z.string().nullable().describe('Who its sandboxes run commands as (`user`, else the image\'s USER); null: root'),
    buildArgs: z.record(z.string(), z.string()).describe("A Dockerfile's ARG values given"),
    buildNetwork: BuildNetwork.nullable().describe("A Dockerfile's RUN steps' network; null: the default"),
    imageConfig: z
      .object({
        env: z.array(z.string()),
        cmd: z.array(z.string()).nullable(),
        entrypoint: z.array(z.string()).nullable(),
        workdir: z.string().nullable(),
        user: z.string().nullable(),
        exposedPorts: z.array(z.string()),
      })
      .nullable()
      .describe(
        "The image's own settings; its Env is every sandbox's environment (under `env` and the create's)",
      ),
    createdAt: IsoTime,
    updatedAt: IsoTime,
    builtAt: IsoTime.nullable(),
  })
  .meta({ id: 'Template', description: 'A sandbox template of your own, built from an OCI image or a Dockerfile' });

const Dockerfile = z
  .string()
  .min(1)
  .max(1_000_000)
  .describe(
    'A Dockerfile: FROM (an image, or one of your templates), RUN, COPY/ADD (from the context; --chown, --chmod; ADD unpacks a local .tar/.tar.gz), ENV, ARG, WORKDIR, USER, EXPOSE, CMD/ENTRYPOINT (the start command), LABEL. Other instructions, multi-stage builds and heredocs answer 400 naming the line',
  );
const Context = z
  .string()
  .min(1)
  .max(4096)
  .describe('The build context, a .tar or .tar.gz: the id of one of your files, or an http(s) URL nube fetches');

const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

const CreateTemplate = z
  .object({
    name: z
      .string()
      .regex(NAME, 'lowercase letters, digits, . _ - (at most 63, starting with a letter or digit)')
      .describe('Unique among your templates'),
    fromImage: z
      .string()
      .min(1)
      .max(512)
      .optional()
      .describe(
        'Image reference: `python:3.12-slim`, `ghcr.io/org/img:tag`, `registry.lan:5000/img@sha256:...` (or give `dockerfile`)',
      ),
    dockerfile: Dockerfile.optional(),
    context: Context.optional(),
    registryAuth: z
      .object({ username: z.string().min(1).max(256), password: z.string().min(1).max(4096) })
      .strict()
      .optional()
      .describe('Credentials for a private repository (Basic, or the registry token flow); kept sealed'),
    cpuCount: z.number().min(0.25).max(64).optional().describe('CPUs of its sandboxes (default 1)'),
    memoryMB: z
      .number()
      .int()
      .min(128)
      .max(262_144)
      .optional()
      .describe('Memory of its sandboxes, MB (default 1024)'),
    env: limited(z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).max(256), z.string().max(32_768)), {
      maxDepth: 1,
      maxKeys: 256,
      maxBytes: 64 * 1024,
    })
      .optional()
      .describe("Environment over the image's own"),
    diskMB: z
      .number()
      .int()
      .min(16)
      .max(1_048_576)
      .optional()
      .describe(
        "Writable disk of its sandboxes, MiB (default: the plan's); writing past it fails inside with ENOSPC/EDQUOT. At most the plan's sandbox disk (402 DiskTooLarge); a create's own diskMB wins",
      ),
    startCmd: z
      .string()
      .min(1)
      .max(8192)
      .optional()
      .describe(
        "Started in the background at every start of a sandbox of it (a Dockerfile's CMD/ENTRYPOINT when not given)",
      ),
    readyCmd: z
      .string()
      .min(1)
      .max(8192)
      .optional()
      .describe('Run after startCmd until it exits 0 (at most 60 s): the create answers once it has'),
    workdir: z
      .string()
      .regex(/^\//, 'an absolute path')
      .max(4096)
      .optional()
      .describe("Where commands run when they name no cwd (a Dockerfile's WORKDIR when not given)"),
    user: RunAsUser.optional().describe(
      "Who its sandboxes' commands (exec, background, run-code, the start and ready commands) run as, and who owns the files the API writes, when a call names no `user`: a name, uid, name:group or uid:gid of the image's /etc/passwd and /etc/group (default: the image's or Dockerfile's USER, else root). Looked up in the sandbox when a command runs: one the sandbox lacks is a 409 TemplateUserMissing",
    ),
    buildArgs: BuildArgs.optional(),
    buildNetwork: BuildNetwork.optional(),
  })
  .strict();

/** A context given as a URL is fetched by the build; one of the caller's files is read now. */
async function contextOf(services: Services, principal: Principal, context: string): Promise<ContextInput> {
  if (/^https?:\/\//i.test(context)) return { url: context };
  const { row, stream } = await services.files.open(principal, context);
  if (row.size > MAX_CONTEXT_BYTES) {
    stream.destroy();
    throw errors.badRequest(`the context file is larger than ${MAX_CONTEXT_BYTES} bytes`, [
      { path: ['context'], message: 'too large' },
    ]);
  }
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return { bytes: Buffer.concat(chunks) };
}

export const templatesOperations = [
  defineOperation({
    id: 'templates.create',
    method: 'POST',
    path: '/templates',
    summary: 'Create a sandbox template from an OCI image',
    description:
      'nube pulls the image over the registry API (Docker Hub, GHCR, any OCI registry; a private one on a private ' +
      'address only when the operator allows it with NUBE_TEMPLATE_REGISTRY_ALLOW), picks linux/amd64 from a ' +
      'multi-platform index, verifies every layer against its digest, keeps layers by digest (a second pull of ' +
      'the same image fetches nothing) and unpacks them into a read-only root filesystem. The build runs in a ' +
      'durable job: poll GET /templates/{id} (status, phase, progress) or stream GET /templates/{id}/build-logs. ' +
      'Once `ready`, `POST /sandboxes {template: <name>}` starts from it (also machines and E2B). An image ' +
      "without /bin/sh still runs commands: nube's static shell stands in.",
    tags,
    auth: ['owner'],
    body: CreateTemplate,
    response: Template,
    errors: [
      { status: 409, code: 'TemplateExists', description: 'You already have a template by that name' },
      { status: 402, code: 'DiskTooLarge', description: "diskMB is past the plan's sandbox disk" },
      { status: 402, code: 'StorageQuotaExceeded', description: "The plan's storage is used up (templates count in it)" },
    ],
    handler: async ({ principal, services, body }) => {
      const { context, ...rest } = body;
      return services.templates.create(principal, {
        ...rest,
        context: context === undefined ? undefined : await contextOf(services, principal, context),
      });
    },
  }),
  defineOperation({
    id: 'templates.list',
    method: 'GET',
    path: '/templates',
    summary: 'List your templates',
    tags,
    auth: ['owner'],
    response: z.object({ templates: z.array(Template) }),
    handler: ({ principal, services }) => services.templates.list(principal),
  }),
  defineOperation({
    id: 'templates.get',
    method: 'GET',
    path: '/templates/{id}',
    summary: 'Get a template (status, build phase and progress, digest, layers, size)',
    tags,
    auth: ['owner'],
    params: TemplateId,
    response: Template,
    handler: ({ principal, services, params }) => services.templates.get(principal, params.id),
  }),
  defineOperation({
    id: 'templates.delete',
    method: 'DELETE',
    path: '/templates/{id}',
    summary: 'Delete a template',
    description:
      'Refused with 409 TemplateInUse while sandboxes, machines or snapshots stand on it. A build under way is canceled.',
    tags,
    auth: ['owner'],
    params: TemplateId,
    response: Ok,
    errors: [{ status: 409, code: 'TemplateInUse', description: 'Sandboxes or snapshots use it' }],
    handler: ({ principal, services, params }) => services.templates.delete(principal, params.id),
  }),
  defineOperation({
    id: 'templates.cancel',
    method: 'POST',
    path: '/templates/{id}/cancel',
    summary: 'Cancel a template build under way',
    tags,
    auth: ['owner'],
    params: TemplateId,
    response: Template,
    errors: [{ status: 409, code: 'InvalidState', description: 'The template is not building' }],
    handler: ({ principal, services, params }) => services.templates.cancel(principal, params.id),
  }),
  defineOperation({
    id: 'templates.rebuild',
    method: 'POST',
    path: '/templates/{id}/rebuild',
    summary: 'Build a template again from its image (a tag that moved is pulled anew)',
    description:
      'Sandboxes running on the previous build keep it; new ones start from the new build once ready.',
    tags,
    auth: ['owner'],
    params: TemplateId,
    body: z
      .object({
        dockerfile: Dockerfile.optional(),
        context: Context.optional(),
        buildArgs: BuildArgs.optional().describe('New ARG values (all of them: replaces those given before)'),
        buildNetwork: BuildNetwork.optional(),
      })
      .strict()
      .optional()
      .describe(
        "A Dockerfile template's new Dockerfile, context, build args or build network (steps whose inputs did not change are reused)",
      ),
    response: Template,
    errors: [
      { status: 409, code: 'InvalidState', description: 'The template is already building' },
      { status: 402, code: 'StorageQuotaExceeded', description: "The plan's storage is used up (templates count in it)" },
    ],
    handler: async ({ principal, services, params, body }) =>
      services.templates.rebuild(principal, params.id, {
        dockerfile: body?.dockerfile,
        buildArgs: body?.buildArgs,
        buildNetwork: body?.buildNetwork,
        context: body?.context === undefined ? undefined : await contextOf(services, principal, body.context),
      }),
  }),
  defineOperation({
    id: 'templates.buildLogs',
    method: 'GET',
    path: '/templates/{id}/build-logs',
    summary: "Stream a template build's log (Server-Sent Events)",
    description:
      'Events `log` ({seq, at, line}; the SSE id is seq) for every line so far and then as they come, and a last ' +
      '`done` ({status, error, errorCode}) when the build ends. Resume with `Last-Event-ID` or `after`.',
    tags,
    auth: ['owner'],
    params: TemplateId,
    query: z.object({
      after: qInt(0, Number.MAX_SAFE_INTEGER).optional().describe('Lines after this seq only'),
    }),
    produces: 'text/event-stream',
    response: z.string().describe('Server-Sent Events stream'),
    handler: async ({ principal, services, params, query, headers, signal }) => {
      const r = await services.templates.own(principal, params.id);
      const last = Number(headers['last-event-id']);
      const after = query.after ?? (Number.isSafeInteger(last) && last >= 0 ? last : 0);
      return new RawResponse(
        buildLogEvents(services.templates.repo, r.id, after, signal),
        'text/event-stream',
        {
          'cache-control': 'no-cache',
          'x-accel-buffering': 'no',
        },
      );
    },
  }),
];
