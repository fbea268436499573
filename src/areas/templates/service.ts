// Templates of an owner's own: from any OCI image (pulled by nube over the registry API), built in a
// durable job with phases, progress and a log, and usable by name wherever a template is accepted.
// The root filesystem is the sandboxes driver's (importTemplate): this area only fills it.
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type BlobStore, NotFound } from '../../blob/index.js';
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { assertStorageAvailable } from '../../platform/limits.js';
import { PLANS } from '../../platform/plans.js';
import { cutShort, type JobContext } from '../../platform/jobs-contract.js';
import type { PlatformDeps } from '../deps.js';
import { isRootSpec } from '../sandboxes/run-as.js';
import { driverPolicy } from '../sandboxes/runtime/protected-ranges.js';
import { SandboxRuntimeError, type SandboxRuntime, type TemplateInfo } from '../sandboxes/runtime/driver.js';
import { type BuildBase, buildSteps } from './dockerfile/build.js';
import { ContextError, readArchive } from './dockerfile/context.js';
import { DockerfileError } from './dockerfile/parse.js';
import { fromOf, planOf, startCommandOf } from './dockerfile/plan.js';
import { TemplateBuildError } from './oci/errors.js';
import { parseImageRef } from './oci/reference.js';
import { type Descriptor, type ImageConfig, type RegistryAuth, RegistryClient } from './oci/registry.js';
import { Unpacker } from './oci/unpack.js';
import type { TemplatesRepo, TemplatesTable } from './repo.js';

export const BUILD_JOB = 'templates.build';
/** A build job's payload: the template, and what is left of its owner's plan storage when it was asked for. */
export interface BuildJob {
  id: string;
  /** Bytes the image may unpack to (the plan's storage less what the owner stores besides); unset: no plan cap (an older job). */
  quotaBytes?: number;
}
/** Names nube's own templates have: an owner's template cannot take them. */
export const RESERVED = new Set(['base', 'code-interpreter', 'goose', 'acp']);
/** What every imported build adds besides the image (bump when that changes, so builds are redone; 2: /.nube/runas). */
const IMPORT_VERSION = 2;
const MAX_ENTRIES = 2_000_000;

export interface TemplateSettings {
  cpuCount?: number;
  memoryMB?: number;
  env?: Record<string, string>;
  startCmd?: string;
  readyCmd?: string;
  workdir?: string;
  /** Its sandboxes' disk (MiB); unset: the plan's. */
  diskMB?: number;
  /** Who its sandboxes run commands as; unset: the image's USER. */
  user?: string;
}

/** A Dockerfile's RUN steps' network, in the shape of a sandbox's network-policy. */
export interface BuildNetwork {
  internet?: boolean;
  allowOut?: string[];
  denyOut?: string[];
}

/** A Dockerfile's context: bytes given (kept by digest under the blob dir) or a URL fetched at build. */
export type ContextInput = { bytes: Buffer } | { url: string };

export interface CreateTemplateInput extends TemplateSettings {
  name: string;
  fromImage?: string;
  dockerfile?: string;
  context?: ContextInput;
  registryAuth?: RegistryAuth;
  buildArgs?: Record<string, string>;
  buildNetwork?: BuildNetwork;
}

interface Source {
  fromImage?: string;
  dockerfile?: string;
  context?: { sha256: string } | { url: string };
  buildArgs?: Record<string, string>;
  buildNetwork?: BuildNetwork;
}

const MAX_CONTEXT = 512 * 1024 * 1024;

export interface Progress {
  percent: number;
  layersDone: number;
  layersTotal: number;
  bytesDone: number;
  bytesTotal: number;
  /** A Dockerfile's steps run or found cached, of all. */
  stepsDone?: number;
  stepsTotal?: number;
}

/** What a sandbox of an owner's template starts with (sandboxes' create merges it under the caller's). */
export interface ResolvedTemplate {
  template: string;
  snapshot: string | null;
  env: Record<string, string>;
  limits?: { cpus: number; memoryMb: number };
  diskMb?: number;
  start: { start?: string; ready?: string; cwd?: string; user?: string } | null;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** Who a template's sandboxes run as: its `user`, else its image's (or Dockerfile's) USER; undefined: root. */
function userOf(settings: TemplateSettings, image: ImageConfig | null): string | undefined {
  const u = settings.user ?? image?.user ?? undefined;
  return u && !isRootSpec(u) ? u : undefined;
}

/** `KEY=value` lines of an image config as a map (a line without `=` is dropped). */
export function envMap(lines: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const l of lines) {
    const i = l.indexOf('=');
    if (i > 0) out[l.slice(0, i)] = l.slice(i + 1);
  }
  return out;
}

export class TemplatesService {
  readonly registry: RegistryClient;
  /** Builds running in this process, to cancel them. */
  private readonly running = new Map<string, AbortController>();
  /** Imports of another node's template under way here, by driver name (one at a time per template). */
  private readonly fetching = new Map<string, Promise<TemplateInfo | null>>();

  constructor(
    readonly repo: TemplatesRepo,
    private readonly runtime: SandboxRuntime,
    private readonly deps: PlatformDeps,
    private readonly sandboxes: {
      /**
       * Pooled sandboxes of a template go before it can be removed (the sandboxes area's warm pool); a
       * refill asked for before never starts (the pool retires the source).
       */
      drainPool(source: { template: string; snapshot?: string }): Promise<void>;
      /** A sandbox disk (MiB) the owner's plan allows: 402 DiskTooLarge past it. */
      diskFor(p: Principal, mb: number): number;
      /** A network policy's allowOut refusals (private ranges): 400 ProtectedRange. */
      checkAllowOut(allowOut: string[], path: (string | number)[]): Promise<void>;
    },
    /** The blob store every node shares (the files area's default location), for image layers. */
    private readonly blobs: () => BlobStore | null = () => null,
  ) {
    const c = deps.config.templates;
    this.registry = new RegistryClient(deps.outbound, c.registryAllow, c.blobDir);
  }

  view(r: TemplatesTable) {
    const settings = JSON.parse(r.settings) as TemplateSettings;
    const source = JSON.parse(r.source) as Source;
    return {
      id: r.id,
      name: r.name,
      fromImage: source.fromImage ?? null,
      dockerfile: source.dockerfile ?? null,
      status: r.status,
      phase: r.phase,
      progress: JSON.parse(r.progress) as Progress,
      error: r.error,
      errorCode: r.error_code,
      digest: r.digest,
      sizeBytes: r.size_bytes,
      layers: JSON.parse(r.layers) as Descriptor[],
      cpuCount: settings.cpuCount ?? null,
      memoryMB: settings.memoryMB ?? null,
      env: settings.env ?? {},
      startCmd: settings.startCmd ?? null,
      readyCmd: settings.readyCmd ?? null,
      workdir: settings.workdir ?? null,
      diskMB: settings.diskMB ?? null,
      user: userOf(settings, r.image_config ? (JSON.parse(r.image_config) as ImageConfig) : null) ?? null,
      buildArgs: source.buildArgs ?? {},
      buildNetwork: source.buildNetwork ?? null,
      imageConfig: r.image_config ? (JSON.parse(r.image_config) as ImageConfig) : null,
      createdAt: iso(r.created_at)!,
      updatedAt: iso(r.updated_at)!,
      builtAt: iso(r.built_at),
    };
  }

  async create(p: Principal, input: CreateTemplateInput) {
    if (RESERVED.has(input.name)) {
      throw errors.badRequest(`${input.name} is the name of one of nube's own templates`, [
        { path: ['name'], message: 'reserved name' },
      ]);
    }
    if (input.diskMB !== undefined) this.sandboxes.diskFor(p, input.diskMB);
    const quotaBytes = await this.storageLeft(p, null);
    const source = await this.sourceOf(p, input);
    if (await this.repo.byName(p.ownerId, input.name)) {
      throw errors.conflict(`you already have a template named ${input.name}`, 'TemplateExists');
    }
    const now = Date.now();
    const settings: TemplateSettings = {
      cpuCount: input.cpuCount,
      memoryMB: input.memoryMB,
      env: input.env,
      startCmd: input.startCmd,
      readyCmd: input.readyCmd,
      workdir: input.workdir,
      diskMB: input.diskMB,
      user: input.user,
    };
    const row: TemplatesTable = {
      id: newId('tmpl'),
      owner_id: p.ownerId,
      name: input.name,
      source: JSON.stringify(source),
      registry_auth: input.registryAuth ? this.deps.secretBox.seal(JSON.stringify(input.registryAuth)) : null,
      settings: JSON.stringify(settings),
      status: 'building',
      phase: 'queued',
      progress: JSON.stringify({ percent: 0, layersDone: 0, layersTotal: 0, bytesDone: 0, bytesTotal: 0 }),
      error: null,
      error_code: null,
      digest: null,
      build: null,
      size_bytes: 0,
      layers: '[]',
      image_config: null,
      base_template: null,
      top_layer: null,
      created_at: now,
      updated_at: now,
      built_at: null,
    };
    try {
      await this.repo.insert(row);
    } catch (e) {
      // Two creates of one name at once: the unique index decides.
      if (await this.repo.byName(p.ownerId, input.name))
        throw errors.conflict(`you already have a template named ${input.name}`, 'TemplateExists');
      throw e;
    }
    await this.deps.jobs.enqueue(BUILD_JOB, { id: row.id, quotaBytes } satisfies BuildJob, { key: `template-build:${row.id}` });
    return this.view(row);
  }

  /**
   * What the owner's plan storage has left for a template's image (files, databases, sites and the
   * other templates count against it; a rebuilt template's own bytes do not): 402 StorageQuotaExceeded
   * when nothing is.
   */
  private async storageLeft(p: Principal, rebuilt: TemplatesTable | null): Promise<number> {
    const used = (await this.deps.usage.gauge('storageBytes', p.ownerId)) - (rebuilt?.size_bytes ?? 0);
    assertStorageAvailable(p.plan, used, 1);
    return PLANS[p.plan].storageBytes - used;
  }

  /** What a template is built from, checked: an image reference, or a Dockerfile (every line) and its context. */
  private async sourceOf(
    p: Principal,
    input: Pick<CreateTemplateInput, 'fromImage' | 'dockerfile' | 'context' | 'buildArgs' | 'buildNetwork'>,
  ): Promise<Source> {
    if ((input.fromImage === undefined) === (input.dockerfile === undefined))
      throw errors.badRequest('give either fromImage or dockerfile', [
        { path: [input.fromImage === undefined ? 'fromImage' : 'dockerfile'], message: 'give one of fromImage, dockerfile' },
      ]);
    if (input.fromImage !== undefined) {
      for (const k of ['context', 'buildArgs', 'buildNetwork'] as const)
        if (input[k] !== undefined) throw errors.badRequest(`${k} goes with a dockerfile`, [{ path: [k], message: 'only with dockerfile' }]);
      const ref = parseImageRef(input.fromImage);
      if (typeof ref === 'string') throw errors.badRequest(`fromImage: ${ref}`, [{ path: ['fromImage'], message: ref }]);
      return { fromImage: ref.canonical };
    }
    const dockerfile = input.dockerfile!;
    const { buildArgs, buildNetwork } = input;
    try {
      const { from, declared } = fromOf(dockerfile, buildArgs);
      planOf(dockerfile, null, buildArgs);
      const unused = Object.keys(buildArgs ?? {}).filter((k) => !declared.has(k));
      if (unused.length)
        throw errors.badRequest(
          `buildArgs ${unused.join(', ')}: the Dockerfile declares no such ARG`,
          unused.map((k) => ({ path: ['buildArgs', k], message: 'no ARG of that name in the Dockerfile' })),
        );
      const own = await this.repo.byName(p.ownerId, from);
      if (!own) {
        const ref = parseImageRef(from);
        if (typeof ref === 'string') throw new DockerfileError(fromOf(dockerfile).line, `FROM ${from}: ${ref}`);
      }
    } catch (e) {
      if (e instanceof DockerfileError)
        throw errors.badRequest(`dockerfile ${e.message}`, [{ path: ['dockerfile'], message: e.message }]);
      throw e;
    }
    if (buildNetwork?.allowOut?.length) await this.sandboxes.checkAllowOut(buildNetwork.allowOut, ['buildNetwork', 'allowOut']);
    const base: Source = { dockerfile, ...(buildArgs && { buildArgs }), ...(buildNetwork && { buildNetwork }) };
    if (!input.context) return base;
    if ('url' in input.context) return { ...base, context: { url: input.context.url } };
    try {
      await readArchive(input.context.bytes, MAX_CONTEXT);
    } catch (e) {
      if (e instanceof ContextError)
        throw errors.badRequest(`context: ${e.message}`, [{ path: ['context'], message: e.message }]);
      throw e;
    }
    const sha256 = createHash('sha256').update(input.context.bytes).digest('hex');
    const path = this.contextPath(sha256);
    if (!existsSync(path)) {
      await mkdir(`${this.deps.config.templates.blobDir}/contexts`, { recursive: true });
      await writeFile(`${path}.${process.pid}.tmp`, input.context.bytes);
      await rename(`${path}.${process.pid}.tmp`, path);
    }
    return { ...base, context: { sha256 } };
  }

  private contextPath(sha256: string): string {
    return `${this.deps.config.templates.blobDir}/contexts/${sha256}.tar`;
  }

  /** The caller's template by id or by name; 404 otherwise. */
  async own(p: Principal, idOrName: string): Promise<TemplatesTable> {
    const r = (await this.repo.owned(p.ownerId, idOrName)) ?? (await this.repo.byName(p.ownerId, idOrName));
    if (!r) throw errors.notFound('template');
    return r;
  }

  async list(p: Principal) {
    return { templates: (await this.repo.list(p.ownerId)).map((r) => this.view(r)) };
  }

  async get(p: Principal, id: string) {
    return this.view(await this.own(p, id));
  }

  async cancel(p: Principal, id: string) {
    const r = await this.own(p, id);
    if (r.status !== 'building')
      throw errors.conflict(`template ${r.name} is ${r.status}, not building`, 'InvalidState');
    await this.repo.updateBuilding(r.id, {
      status: 'canceled',
      phase: 'canceled',
      error: 'the build was canceled',
      error_code: 'Canceled',
    });
    this.running.get(r.id)?.abort();
    await this.deps.jobs.cancel({ key: `template-build:${r.id}` });
    await this.repo.log(r.id, 'build canceled');
    return this.view((await this.repo.get(r.id)) ?? r);
  }

  /** Builds the template again from its source (a moved tag is pulled anew); sandboxes on the old build keep it. */
  async rebuild(
    p: Principal,
    id: string,
    change: Pick<CreateTemplateInput, 'dockerfile' | 'context' | 'buildArgs' | 'buildNetwork'> = {},
    /** Settings replaced with the build (a key given as undefined is cleared). */
    settings?: TemplateSettings,
  ) {
    const r = await this.own(p, id);
    if (settings?.diskMB !== undefined) this.sandboxes.diskFor(p, settings.diskMB);
    if (r.status === 'building')
      throw errors.conflict(`template ${r.name} is already building`, 'InvalidState');
    const quotaBytes = await this.storageLeft(p, r);
    const was = JSON.parse(r.source) as Source;
    let source: Source | undefined;
    const changed = (['dockerfile', 'context', 'buildArgs', 'buildNetwork'] as const).filter((k) => change[k] !== undefined);
    if (changed.length) {
      if (!was.dockerfile)
        throw errors.badRequest(`template ${r.name} is built from an image, not a Dockerfile`, [
          { path: [changed[0]!], message: 'not a Dockerfile template' },
        ]);
      source = await this.sourceOf(p, {
        dockerfile: change.dockerfile ?? was.dockerfile,
        context: change.context,
        buildArgs: change.buildArgs ?? was.buildArgs,
        buildNetwork: change.buildNetwork ?? was.buildNetwork,
      });
      if (change.context === undefined && was.context) source.context = was.context;
    }
    const merged = settings ? { ...(JSON.parse(r.settings) as TemplateSettings), ...settings } : undefined;
    await this.repo.update(r.id, {
      ...(source ? { source: JSON.stringify(source) } : {}),
      ...(merged ? { settings: JSON.stringify(merged) } : {}),
      status: 'building',
      phase: 'queued',
      error: null,
      error_code: null,
      progress: JSON.stringify({ percent: 0, layersDone: 0, layersTotal: 0, bytesDone: 0, bytesTotal: 0 }),
    });
    await this.repo.clearLog(r.id);
    await this.deps.jobs.enqueue(BUILD_JOB, { id: r.id, quotaBytes } satisfies BuildJob, { key: `template-build:${r.id}` });
    return this.view((await this.repo.get(r.id)) ?? r);
  }

  /** A build's state and its log lines after `after` (at most `limit`), read in that order. */
  async logs(p: Principal, id: string, after: number, limit: number) {
    const r = await this.own(p, id);
    const lines = await this.repo.logsAfter(r.id, after, limit);
    return { template: this.view(r), lines };
  }

  async delete(p: Principal, id: string) {
    const r = await this.own(p, id);
    if (r.status === 'building') {
      this.running.get(r.id)?.abort();
      await this.deps.jobs.cancel({ key: `template-build:${r.id}` });
    }
    // Its pools go: the bare image's, and a Dockerfile's, which the pool keys by its top layer.
    const pools = [{ template: r.id }, ...(r.top_layer ? [{ template: r.base_template ?? r.id, snapshot: r.top_layer }] : [])];
    for (const src of pools) await this.sandboxes.drainPool(src);
    try {
      await this.dropLayers(r);
      await this.runtime.removeTemplate(r.id);
    } catch (e) {
      if (e instanceof SandboxRuntimeError && e.code === 'InvalidState') {
        const sandboxes = (e.details?.sandboxes as string[] | undefined) ?? [];
        throw errors.conflict(
          `template ${r.name} is in use by ${sandboxes.length} sandbox(es) or snapshots: delete them first`,
          'TemplateInUse',
          {
            sandboxes: sandboxes.length,
          },
        );
      }
      throw e;
    }
    await this.repo.delete(r.id);
    return { ok: true as const };
  }

  /** A Dockerfile template's cached layers, newest first (each stands on older ones). */
  private async dropLayers(r: TemplatesTable): Promise<void> {
    for (const snap of await this.repo.layersOf(r.id)) {
      try {
        if (await this.runtime.getSnapshot(snap)) await this.runtime.deleteSnapshot(snap);
      } catch (e) {
        if (e instanceof SandboxRuntimeError && (e.code === 'SnapshotInUse' || e.code === 'InvalidState')) {
          throw new SandboxRuntimeError('InvalidState', e.message, {
            sandboxes: (e.details?.sandboxes as string[] | undefined) ?? ['?'],
          });
        }
        throw e;
      }
      await this.repo.dropLayer(r.id, snap);
    }
  }

  /**
   * An owner's template by name (or id) for a create: null when the owner has none by that name (a
   * built-in name, or unknown: the sandboxes area answers). A template not ready is a 409.
   */
  async resolve(ownerId: string, name: string): Promise<ResolvedTemplate | null> {
    const r =
      (await this.repo.byName(ownerId, name)) ??
      (name.startsWith('tmpl_') ? await this.repo.owned(ownerId, name) : undefined);
    if (!r) return null;
    if (r.status !== 'ready') {
      throw errors.conflict(
        r.status === 'building'
          ? `template ${r.name} is still building (${r.phase})`
          : `template ${r.name} has no build: ${r.error ?? r.status}`,
        'TemplateNotReady',
      );
    }
    const settings = JSON.parse(r.settings) as TemplateSettings;
    const image = r.image_config ? (JSON.parse(r.image_config) as ImageConfig) : null;
    const limits =
      settings.cpuCount || settings.memoryMB
        ? { cpus: settings.cpuCount ?? 1, memoryMb: settings.memoryMB ?? 1024 }
        : undefined;
    const source = JSON.parse(r.source) as Source;
    const start = settings.startCmd ?? (source.dockerfile && image ? startCommandOf(image) : null);
    const cwd = settings.workdir ?? (source.dockerfile && image?.workdir && image.workdir !== '/' ? image.workdir : undefined);
    const user = userOf(settings, image);
    return {
      template: r.base_template ?? r.id,
      snapshot: r.top_layer,
      env: { ...envMap(image?.env ?? []), ...settings.env },
      limits,
      diskMb: settings.diskMB,
      start:
        start || cwd || user
          ? { start: start ?? undefined, ready: start ? settings.readyCmd : undefined, cwd, user }
          : null,
    };
  }

  /** Where an image layer is kept in the shared blob store: by its digest, so images share them too. */
  private static layerKey(digest: string): string {
    return `templates/layers/${digest.replace(':', '/')}`;
  }

  /** The blob store when layers go to it: an S3 store, or any store once this nube has other nodes. */
  private sharedStore(): BlobStore | null {
    const store = this.blobs();
    return store && (store.backend === 's3' || !this.deps.nodes.solo) ? store : null;
  }

  /** Copies an image's layers to the shared blob store (those not there yet), for other nodes to fetch. */
  private async shareLayers(id: string, layers: Descriptor[]): Promise<void> {
    const store = this.sharedStore();
    if (!store) return;
    let put = 0;
    for (const l of layers) {
      const key = TemplatesService.layerKey(l.digest);
      if (await store.head(key)) continue;
      await store.put(key, createReadStream(this.registry.blobPath(l.digest)), { contentType: l.mediaType });
      put++;
    }
    await this.repo.log(id, `layers in the blob store for other nodes: ${put} copied, ${layers.length - put} there already`);
  }

  /**
   * An image template built on another node, imported here from its layers in the shared blob store
   * (by digest, checked), never pulled or built again: its driver build is the same as there. Null when
   * `name` is no ready template of an image. A Dockerfile's step layers are driver snapshots of the
   * node that built them: 501 on another node.
   */
  async fetchBuilt(name: string, snapshot?: string): Promise<TemplateInfo | null> {
    const r = await this.repo.get(name);
    if (!r || r.status !== 'ready' || !r.build) return null;
    const source = JSON.parse(r.source) as Source;
    const store = this.sharedStore();
    if (source.dockerfile !== undefined || snapshot !== undefined)
      throw errors.notImplemented(
        `a sandbox of Dockerfile template ${r.name} on a node other than the one that built it (its step layers stay there)`,
      );
    if (!store)
      throw errors.badRequest(`template ${r.name} is not on this node and no shared blob store holds its layers`, [
        { path: ['template'], message: 'template unavailable on this node' },
      ], 'TemplateUnavailable');
    let running = this.fetching.get(name);
    if (!running) {
      running = this.importShared(r, store).finally(() => this.fetching.delete(name));
      this.fetching.set(name, running);
    }
    return running;
  }

  private async importShared(r: TemplatesTable, store: BlobStore): Promise<TemplateInfo> {
    const layers = JSON.parse(r.layers) as Descriptor[];
    for (const l of layers) {
      const path = this.registry.blobPath(l.digest);
      if (existsSync(path)) continue;
      let got: Awaited<ReturnType<BlobStore['get']>>;
      try {
        got = await store.get(TemplatesService.layerKey(l.digest));
      } catch (e) {
        if (e instanceof NotFound)
          throw errors.conflict(
            `layer ${l.digest} of template ${r.name} is not in the blob store: rebuild the template`,
            'TemplateUnavailable',
          );
        throw e;
      }
      const hash = createHash('sha256');
      const tmp = `${path}.${process.pid}.fetch`;
      await mkdir(`${path.slice(0, path.lastIndexOf('/'))}`, { recursive: true });
      const check = new Transform({
        transform(chunk: Buffer, _enc, done) {
          hash.update(chunk);
          done(null, chunk);
        },
      });
      try {
        await pipeline(got.stream, check, createWriteStream(tmp, { mode: 0o600 }));
        if (`sha256:${hash.digest('hex')}` !== l.digest)
          throw errors.conflict(`layer ${l.digest} of template ${r.name} in the blob store has other bytes: refused`, 'TemplateUnavailable');
        await rename(tmp, path);
      } finally {
        await rm(tmp, { force: true });
      }
    }
    const max = this.deps.config.templates.maxBytes;
    return this.runtime.importTemplate(r.id, r.build!, async (rootfs, ids) => {
      const u = new Unpacker(rootfs, ids, { maxBytes: max, maxEntries: MAX_ENTRIES });
      for (const l of layers) await u.layer(this.registry.blobPath(l.digest), l.digest, new AbortController().signal);
      return undefined;
    });
  }

  private async progress(id: string, patch: Partial<TemplatesTable>, line?: string): Promise<void> {
    if (line) await this.repo.log(id, line);
    if (!(await this.repo.updateBuilding(id, patch)))
      throw new TemplateBuildError('Canceled', 'the build was canceled');
  }

  /** Job: pull, unpack and install the template's image. A failure leaves the template `failed` with why. */
  async build(id: string, job?: Pick<JobContext, 'signal' | 'stopping'>, quotaBytes?: number): Promise<void> {
    const row = await this.repo.get(id);
    if (row?.status !== 'building') return;
    const ac = new AbortController();
    this.running.set(id, ac);
    const signal = job ? AbortSignal.any([ac.signal, job.signal]) : ac.signal;
    const started = Date.now();
    try {
      await this.pull(row, signal, quotaBytes);
      await this.repo.log(
        id,
        `template ${row.name} built in ${((Date.now() - started) / 1000).toFixed(1)} s`,
      );
    } catch (e) {
      if (job && cutShort(job) && !ac.signal.aborted) throw e;
      const known =
        e instanceof TemplateBuildError ||
        e instanceof ApiError ||
        (e instanceof SandboxRuntimeError && e.code === 'TemplateBuildFailed');
      const code = e instanceof TemplateBuildError ? e.code : 'BuildFailed';
      const message = known
        ? (e as Error).message
        : `the build failed: ${(e as Error).message.slice(0, 500)}`;
      if (!known) this.deps.log.error({ err: e, template: id }, 'template build failed');
      if (code !== 'Canceled') {
        await this.repo.log(id, `build failed: ${message}`).catch(() => {});
        await this.repo.updateBuilding(id, {
          status: 'failed',
          phase: 'failed',
          error: message,
          error_code: code,
        });
      }
    } finally {
      this.running.delete(id);
    }
  }

  private async pull(row: TemplatesTable, signal: AbortSignal, quotaBytes: number | undefined): Promise<void> {
    const source = JSON.parse(row.source) as Source;
    if (source.dockerfile !== undefined) return this.buildDockerfile(row, source, signal, quotaBytes);
    const ref = parseImageRef(source.fromImage!);
    if (typeof ref === 'string') throw new TemplateBuildError('ImageNotFound', ref);
    const { info, size, image, progress: p } = await this.importImage(row, ref, signal, quotaBytes);
    await this.shareLayers(row.id, image.layers);
    p.percent = 100;
    const done = await this.repo.updateBuilding(row.id, {
      status: 'ready',
      phase: 'done',
      build: info.build,
      size_bytes: size || row.size_bytes,
      progress: JSON.stringify(p),
      built_at: Date.now(),
    });
    if (!done) throw new TemplateBuildError('Canceled', 'the build was canceled');
  }

  /** Pulls the image and imports it as the template's root filesystem (its driver build). */
  private async importImage(
    row: TemplatesTable,
    ref: Exclude<ReturnType<typeof parseImageRef>, string>,
    signal: AbortSignal,
    quotaBytes: number | undefined,
  ) {
    const id = row.id;
    const auth = row.registry_auth
      ? (JSON.parse(this.deps.secretBox.open(row.registry_auth)) as RegistryAuth)
      : undefined;
    await this.progress(id, { phase: 'resolving' }, `resolving ${ref.canonical}`);
    const image = await this.registry.resolve(ref, auth, signal);
    const total = image.layers.reduce((n, l) => n + l.size, 0);
    const p: Progress = {
      percent: 0,
      layersDone: 0,
      layersTotal: image.layers.length,
      bytesDone: 0,
      bytesTotal: total,
    };
    await this.progress(
      id,
      {
        phase: 'pulling',
        digest: image.digest,
        layers: JSON.stringify(image.layers),
        image_config: JSON.stringify(image.config),
        progress: JSON.stringify(p),
      },
      `image ${image.digest}: ${image.layers.length} layers, ${total} bytes`,
    );
    const max = this.deps.config.templates.maxBytes;
    // The unpacked image counts in the owner's plan storage: past what is left of it, the build stops.
    const cap = Math.min(max, quotaBytes ?? max);
    let lastWrite = 0;
    for (const [i, layer] of image.layers.entries()) {
      const had = existsSync(this.registry.blobPath(layer.digest));
      await this.registry.blob(
        image.session,
        layer,
        max,
        (n) => {
          p.bytesDone += n;
          if (Date.now() - lastWrite > 500) {
            lastWrite = Date.now();
            p.percent = Math.min(79, Math.floor((p.bytesDone / Math.max(1, total)) * 80));
            this.repo.updateBuilding(id, { progress: JSON.stringify(p) }).catch(() => {});
          }
        },
        signal,
      );
      if (had) p.bytesDone += layer.size;
      p.layersDone = i + 1;
      p.percent = Math.min(79, Math.floor((p.bytesDone / Math.max(1, total)) * 80));
      await this.progress(
        id,
        { progress: JSON.stringify(p) },
        `layer ${i + 1}/${image.layers.length} ${layer.digest} ${had ? 'cached' : `pulled (${layer.size} bytes)`}`,
      );
    }
    await this.progress(id, { phase: 'unpacking' }, 'unpacking layers');
    const build = createHash('sha256')
      .update(JSON.stringify({ digest: image.digest, v: IMPORT_VERSION }))
      .digest('hex')
      .slice(0, 16);
    let size = 0;
    const info = await this.runtime.importTemplate(
      id,
      build,
      async (rootfs, ids) => {
        const u = new Unpacker(rootfs, ids, { maxBytes: cap, maxEntries: MAX_ENTRIES });
        for (const [i, layer] of image.layers.entries()) {
          await u
            .layer(this.registry.blobPath(layer.digest), layer.digest, signal)
            .catch(async (e: unknown) => {
              // A layer refused for what it holds (an escape, a tar bomb) is not kept either.
              const code = e instanceof TemplateBuildError ? e.code : '';
              if (code === 'TooLarge' && cap < max && u.stats.bytes > cap)
                throw new TemplateBuildError(
                  'StorageQuotaExceeded',
                  `the image unpacks to more than the ${cap} bytes left of your plan's storage: delete files, databases or templates, or change plan`,
                );
              if (code === 'LayerRefused' || code === 'TooLarge')
                await rm(this.registry.blobPath(layer.digest), { force: true });
              throw e;
            });
          p.percent = 80 + Math.floor(((i + 1) / image.layers.length) * 19);
          await this.progress(
            id,
            { progress: JSON.stringify(p) },
            `unpacked layer ${i + 1}/${image.layers.length} (${u.stats.entries} entries so far)`,
          );
        }
        if (u.stats.skipped)
          await this.repo.log(
            id,
            `${u.stats.skipped} device nodes, fifos or extended attributes were not kept`,
          );
        size = u.stats.bytes;
        return undefined;
      },
      (line) => {
        this.repo.log(id, line).catch(() => {});
      },
    );
    return { info, size, image, progress: p };
  }

  /** FROM (an image pulled and imported, or another template's layers), then the steps (cached). */
  private async buildDockerfile(
    row: TemplatesTable,
    source: Source,
    signal: AbortSignal,
    quotaBytes: number | undefined,
  ): Promise<void> {
    const id = row.id;
    const dockerfile = source.dockerfile!;
    const bad = (e: unknown) => {
      if (e instanceof DockerfileError) return new TemplateBuildError('BadDockerfile', `dockerfile ${e.message}`);
      return e;
    };
    let from: string;
    try {
      from = fromOf(dockerfile, source.buildArgs).from;
    } catch (e) {
      throw bad(e);
    }
    let base: BuildBase;
    let config: ImageConfig | null;
    let size = 0;
    const parent = await this.repo.byName(row.owner_id, from);
    if (parent && parent.id !== id) {
      if (parent.status !== 'ready' || !parent.build)
        throw new TemplateBuildError('BaseNotReady', `FROM ${from}: your template ${from} is ${parent.status}, not ready`);
      await this.repo.log(id, `FROM your template ${from} (${parent.id})`);
      base = { template: parent.base_template ?? parent.id, build: parent.build, snapshot: parent.top_layer };
      config = parent.image_config ? (JSON.parse(parent.image_config) as ImageConfig) : null;
      size = parent.size_bytes;
    } else {
      const ref = parseImageRef(from);
      if (typeof ref === 'string') throw new TemplateBuildError('ImageNotFound', `FROM ${from}: ${ref}`);
      const got = await this.importImage(row, ref, signal, quotaBytes);
      base = { template: id, build: got.info.build, snapshot: null };
      config = got.image.config;
      size = got.size;
    }
    let plan: ReturnType<typeof planOf>;
    try {
      plan = planOf(dockerfile, config, source.buildArgs);
    } catch (e) {
      throw bad(e);
    }
    const context = await this.loadContext(id, source, signal);
    const p = { percent: 0, layersDone: 0, layersTotal: 0, bytesDone: 0, bytesTotal: 0, stepsDone: 0, stepsTotal: plan.total };
    await this.progress(id, { phase: 'building', progress: JSON.stringify(p) }, `building ${plan.total} steps`);
    const started = Date.now();
    const r = await buildSteps({
      runtime: this.runtime,
      repo: this.repo,
      templateId: id,
      plan,
      base,
      context,
      maxContextBytes: this.deps.config.templates.maxBytes,
      network: source.buildNetwork && driverPolicy(source.buildNetwork),
      signal,
      log: (line) => this.repo.log(id, line),
      step: async (k, n) => {
        p.stepsDone = k - 1;
        p.percent = Math.floor(((k - 1) / Math.max(1, n)) * 100);
        await this.progress(id, { progress: JSON.stringify(p) });
      },
    });
    p.stepsDone = plan.total;
    p.percent = 100;
    await this.repo.log(
      id,
      `${r.built} steps built, ${r.cached} cached, in ${((Date.now() - started) / 1000).toFixed(2)} s`,
    );
    const done = await this.repo.updateBuilding(id, {
      status: 'ready',
      phase: 'done',
      build: base.build,
      base_template: base.template === id ? null : base.template,
      top_layer: r.snapshot,
      image_config: JSON.stringify(plan.config),
      size_bytes: size || row.size_bytes,
      progress: JSON.stringify(p),
      built_at: Date.now(),
    });
    if (!done) throw new TemplateBuildError('Canceled', 'the build was canceled');
  }

  private async loadContext(id: string, source: Source, signal: AbortSignal) {
    if (!source.context) return null;
    let bytes: Buffer;
    if ('sha256' in source.context) {
      bytes = await readFile(this.contextPath(source.context.sha256)).catch(() => {
        throw new TemplateBuildError('ContextMissing', 'the build context is no longer on this node: give it again with rebuild');
      });
    } else {
      await this.repo.log(id, `fetching the context ${source.context.url}`);
      bytes = await this.fetchContext(source.context.url, signal);
    }
    try {
      return await readArchive(bytes, MAX_CONTEXT);
    } catch (e) {
      if (e instanceof ContextError) throw new TemplateBuildError('BadContext', `context: ${e.message}`);
      throw e;
    }
  }

  private async fetchContext(url: string, signal: AbortSignal): Promise<Buffer> {
    let res: Awaited<ReturnType<typeof this.deps.outbound.request>>;
    try {
      res = await this.deps.outbound.request(url, { signal, maxRedirects: 5, timeoutMs: 300_000 });
    } catch (e) {
      throw new TemplateBuildError('ContextUnreachable', `the context ${url} could not be fetched: ${(e as Error).message}`);
    }
    if (res.status !== 200) {
      res.discard();
      throw new TemplateBuildError('ContextUnreachable', `the context ${url} answered ${res.status}`);
    }
    const chunks: Buffer[] = [];
    let n = 0;
    for await (const c of res.body) {
      n += (c as Buffer).length;
      if (n > MAX_CONTEXT) {
        res.body.destroy();
        throw new TemplateBuildError('TooLarge', `the context ${url} is larger than ${MAX_CONTEXT} bytes`);
      }
      chunks.push(c as Buffer);
    }
    return Buffer.concat(chunks);
  }
}
