// Sandbox records and their lifecycle: create (or provision in a job while a template builds), wake,
// suspend, destroy, and the clocks. Knows nothing of HTTP; the driver knows nothing of owners.
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { cutShort, type JobContext } from '../../platform/jobs.js';
import { PLANS } from '../../platform/plans.js';
import type { PlatformDeps } from '../deps.js';
import { buildLogger } from './build-log.js';
import { asUserCommand, SandboxUsers, userEnv } from './run-as.js';
import { Clocks } from './clocks.js';
import { SandboxPlacement } from './placement.js';
import type { VolumeBinder } from './volume-binder.js';
import { KeyedLock } from './runtime/keyed-lock.js';
import { CpuMeter } from './cpu-meter.js';
import { type BoxLimits, type CreateInput, newRow } from './rows.js';
import { IDLE_SANDBOX_MB, poolStatusFile } from './runtime-dir.js';
import { collectSnapshots } from './snapshot-gc.js';
import { type PooledSandbox, type PoolSource, WarmPool } from './warm-pool.js';
import type { SandboxRow, SandboxesRepo, TemplateRow } from './repo.js';
import type { ExecResult, SandboxInfo, SandboxRuntime, TemplateInfo } from './runtime/driver.js';
import { SandboxRuntimeError } from './runtime/driver.js';
import { isImported } from './runtime/namespaces/imported-template.js';
import {
  failedError,
  portUrl,
  reasonOf,
  rt,
  type SandboxView,
  type StartPhase,
  startingError,
  toSandbox,
} from './views.js';

export type { CreateInput } from './rows.js';

export interface Bootstrap {
  script: string;
  mode: 'async' | 'blocking';
  timeoutSeconds: number;
  /** What the sandbox's template adds (kept when the bootstrap is set or cleared). */
  template?: TemplateStart;
}

/** An owner's template's start command, its readiness check and its working dir. */
export interface TemplateStart {
  /** Started in the background at every start of the sandbox (create, resume). */
  start?: string;
  /** Run until it exits 0 after the start command; the start waits for it. */
  ready?: string;
  /** Where commands run when the caller names no `cwd`. */
  cwd?: string;
  /** How long the start waits for `ready`. */
  readySeconds?: number;
  /** Who commands and files are for when the caller names no `user` (the template's USER). */
  user?: string;
}

/** A row's bootstrap column: absent, a bootstrap, or only a template's start. */
export function bootstrapOf(row: { bootstrap: string | null }): Partial<Bootstrap> | null {
  return row.bootstrap ? (JSON.parse(row.bootstrap) as Partial<Bootstrap>) : null;
}

export type BootstrapRun = { mode: 'blocking'; result: ExecResult } | { mode: 'async'; execId: string };

export const PROVISION_JOB = 'sandboxes.provision';
const MAX_EVENTS = 50;

export class SandboxesCore {
  readonly clocks: Clocks;
  /** Run after a sandbox's record is gone (networking frees its host ports). */
  readonly destroyHooks: ((row: SandboxRow) => Promise<void>)[] = [];
  /** Run after a sandbox is suspended and after it runs again (raw ports swap DNAT and relay). */
  readonly suspendHooks: ((row: SandboxRow) => Promise<void>)[] = [];
  readonly resumeHooks: ((row: SandboxRow) => Promise<void>)[] = [];
  /** Asked when the idle deadline passes: traffic the API did not see (raw ports' DNAT) is activity. */
  readonly activityProbes: ((row: SandboxRow) => Promise<boolean>)[] = [];
  readonly placement: SandboxPlacement;
  /** The volumes area's binder (volume-binder.ts); null: sandboxes take no volumes. */
  volumes: VolumeBinder | null = null;
  /** Sandboxes started ahead, handed out by create (warm-pool.ts). */
  readonly pool: WarmPool;
  /** Users of a sandbox other than root (an exec's `user`, a template's default). */
  readonly users: SandboxUsers;
  /** The CPU time of sandboxes scoped keys created, toward their sandboxCpuSeconds caps. */
  readonly cpu: CpuMeter;
  private readonly lock = new KeyedLock();

  constructor(
    readonly repo: SandboxesRepo,
    readonly runtime: SandboxRuntime,
    readonly deps: PlatformDeps,
  ) {
    this.clocks = new Clocks(this);
    this.cpu = new CpuMeter(this);
    this.users = new SandboxUsers(runtime);
    this.placement = new SandboxPlacement(deps.store.db, deps);
    const c = deps.config;
    this.pool = new WarmPool(
      runtime,
      c.sandboxes.pool,
      deps.log,
      poolStatusFile(c),
      IDLE_SANDBOX_MB[runtime.kind] ?? 48,
    );
  }

  /** Serialize lifecycle changes of one sandbox (API, timers, proxy wake-ups). */
  locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
    return this.lock.run(id, fn);
  }

  view(r: SandboxRow, start?: StartPhase): SandboxView {
    const host = this.deps.config.sandboxes.publicHost;
    return toSandbox(
      r,
      (port) =>
        portUrl(
          this.deps.httpsUrl(`${port}-${r.id.replace('_', '-')}.${host}`) ?? this.deps.publicUrl(),
          host,
          r.id,
          port,
        ),
      start,
    );
  }

  /** The view with, for a starting sandbox, what it waits for (a template build, read from the host). */
  async describe(r: SandboxRow): Promise<SandboxView> {
    const lost = await this.placement.lostReason(r.node_id);
    if (lost) return { ...this.view(r), status: 'lost', phase: null, progress: null, error: lost };
    return this.view(r, r.status === 'starting' ? await this.startPhase(r) : undefined);
  }

  private async startPhase(r: SandboxRow): Promise<StartPhase> {
    const p = await this.runtime.templateProgress(r.template).catch(() => null);
    if (p) {
      return {
        phase: `building template ${r.template}`,
        progress: { percent: p.percent, step: p.step, elapsedSeconds: p.elapsedSeconds },
      };
    }
    const built = await this.runtime.findTemplate(r.template).catch(() => null);
    return { phase: built ? 'starting' : `waiting to build template ${r.template}`, progress: null };
  }

  seal(env: Record<string, string>): string {
    return this.deps.secretBox.seal(JSON.stringify(env));
  }
  env(r: SandboxRow): Record<string, string> {
    return JSON.parse(this.deps.secretBox.open(r.env_sealed)) as Record<string, string>;
  }

  /** The caller's sandbox in any state (get, delete, logs); another owner's is absent. */
  async own(p: Principal, id: string): Promise<SandboxRow> {
    const r = await this.repo.get(id);
    if (!r || r.owner_id !== p.ownerId || !this.deps.workspaces.sees(p, r.workspace_id)) throw errors.notFound('sandbox');
    if (p.scope && this.reachGuard) await this.reachGuard(p, await this.lineage(r));
    return r;
  }

  /**
   * Set once every area is built (server.ts): refuses a scoped key that does not cover a key nube
   * minted into one of these boxes (the sandbox and the boxes it was forked from, whose environment and
   * disk it copied). Every path to a box (REST, MCP, the terminal, SSH tickets, forks) comes through own().
   */
  reachGuard: ((p: Principal, sandboxIds: string[]) => Promise<void>) | null = null;

  /** The sandbox and the ancestors it was forked from, while their records exist. */
  private async lineage(r: SandboxRow): Promise<string[]> {
    const ids = [r.id];
    for (let parent = r.parent_id; parent && ids.length < 32 && !ids.includes(parent); ) {
      ids.push(parent);
      parent = (await this.repo.get(parent))?.parent_id ?? null;
    }
    return ids;
  }

  /** The caller's sandbox unless it failed to start: 409 SandboxFailed with the reason. */
  async usable(p: Principal, id: string): Promise<SandboxRow> {
    const r = await this.own(p, id);
    if (r.status === 'failed') throw failedError(r);
    await this.placement.assertHere(r.node_id);
    return r;
  }

  /** The caller's sandbox once it has started (its driver sandbox exists): 409 while starting or failed. */
  async started(p: Principal, id: string): Promise<SandboxRow> {
    const r = await this.usable(p, id);
    if (r.status === 'starting') throw startingError();
    return r;
  }

  /** A sandbox's disk limit (MiB): what was asked, at most the plan's; the plan's by default. */
  diskFor(p: Principal, asked: number | undefined): number {
    const plan = PLANS[p.plan];
    if (asked !== undefined && asked > plan.sandboxDiskMb) {
      throw errors.paymentRequired(
        `your ${plan.title} plan allows sandboxes of ${plan.sandboxDiskMb} MiB of disk; asked for ${asked} MiB`,
        'DiskTooLarge',
        { limitMB: plan.sandboxDiskMb, requestedMB: asked },
      );
    }
    return asked ?? plan.sandboxDiskMb;
  }

  assertSession(p: Principal, seconds: number): void {
    const plan = PLANS[p.plan];
    if (seconds > plan.sessionSeconds) {
      throw errors.paymentRequired(
        `your ${plan.title} plan allows sessions of ${plan.sessionSeconds} s; asked for ${seconds} s`,
        'SessionTooLong',
        { limitSeconds: plan.sessionSeconds, requestedSeconds: seconds },
      );
    }
  }

  async event(id: string, event: string, detail: Record<string, unknown> = {}): Promise<void> {
    const r = await this.repo.get(id);
    if (!r) return;
    const events = JSON.parse(r.events) as unknown[];
    events.push({ at: new Date().toISOString(), event, ...detail });
    await this.repo.update(id, { events: JSON.stringify(events.slice(-MAX_EVENTS)) });
  }

  /** An owner's template (driver name) built on another node, imported here (the templates area sets it). */
  fetchTemplate: ((name: string, snapshot?: string) => Promise<TemplateInfo | null>) | null = null;

  /** Snapshots the templates area keeps (Dockerfile layers): destroying a sandbox on them leaves them. */
  keptSnapshots: (() => Promise<Set<string>>) | null = null;

  /**
   * The owner's own templates by name (the templates area sets it): what a sandbox of it starts with,
   * or null when the owner has none by that name (a built-in name, or unknown).
   */
  templateNames:
    | ((
        ownerId: string,
        name: string,
      ) => Promise<{
        template: string;
        /** A snapshot over the template (a Dockerfile's last layer). */
        snapshot?: string | null;
        env: Record<string, string>;
        limits?: { cpus: number; memoryMb: number };
        /** Its sandboxes' disk (MiB) when the create asks for none. */
        diskMb?: number;
        start?: TemplateStart | null;
      } | null>)
    | null = null;

  /** `input` with an owner's template name replaced by the driver's name for it, its env and limits beneath the caller's. */
  private async ownTemplate(
    p: Principal,
    input: CreateInput,
  ): Promise<CreateInput & { snapshot?: string; start?: TemplateStart; templateDiskMb?: number }> {
    const own =
      input.templateKey === undefined ? await this.templateNames?.(p.ownerId, input.template) : null;
    if (own)
      return {
        ...input,
        template: own.template,
        env: { ...own.env, ...input.env },
        limits: input.limits ?? own.limits,
        snapshot: own.snapshot ?? undefined,
        start: own.start ?? undefined,
        templateDiskMb: own.diskMb,
      };
    // A driver name of an owner's template is never taken as given: only the owner's name leads to it.
    if (isImported(input.template))
      throw errors.badRequest(`unknown template ${input.template}`, [
        { path: ['template'], message: 'unknown template' },
      ]);
    return input;
  }

  async create(p: Principal, asked: CreateInput): Promise<SandboxView> {
    this.assertSession(p, asked.timeoutSeconds);
    const given = { ...asked, workspaceId: await this.deps.workspaces.forCreate(p, asked.workspaceId) };
    const own = await this.ownTemplate(p, given);
    const input = {
      ...own,
      limits: { ...own.limits, diskMb: own.limits?.diskMb ?? this.diskFor(p, given.diskMB ?? own.templateDiskMb) },
    };
    let derived: TemplateRow | undefined;
    if (input.templateKey !== undefined && input.templateHash !== undefined) {
      derived = await this.repo.templateByKey(p.ownerId, input.templateKey, input.templateHash);
      if (!derived) throw errors.notFound('derived template', 'DerivedTemplateNotProvisioned');
    }
    // The scheduler picks the node (a derived template's: where its snapshot is); another node's create
    // is relayed there (ElsewhereError).
    const volumes = input.volumes ?? [];
    if (volumes.length && !this.volumes) throw errors.notImplemented('volumes');
    const volumeNode = volumes.length ? await this.volumes!.nodeOf(p.ownerId, volumes) : undefined;
    if (derived && volumeNode !== undefined && volumeNode !== derived.node_id)
      throw errors.badRequest('the derived template and the volumes are on different nodes', [
        { path: ['volumes'], message: 'on another node than the derived template' },
      ]);
    const nodeId = derived
      ? await this.placement.placeAt(derived.node_id, 'derived template')
      : volumeNode !== undefined
        ? await this.placement.placeAt(volumeNode, 'volume')
        : await this.placement.place(p.ownerId, input.template);
    // A host that cannot run sandboxes says so now (503), not after minutes of building a template.
    await rt(this.runtime.checkHost());
    let built = derived !== undefined;
    if (!derived) {
      let t = await this.runtime.findTemplate(input.template).catch((e: unknown) => {
        if (e instanceof SandboxRuntimeError && e.code === 'NotFound') {
          throw errors.badRequest(`unknown template ${input.template}`, [
            { path: ['template'], message: 'unknown template' },
          ]);
        }
        throw e;
      });
      // An owner's template built on another node: its layers come from the shared blob store.
      if (!t && isImported(input.template) && this.fetchTemplate) t = await this.fetchTemplate(input.template, input.snapshot);
      built = t !== null;
      const why = built ? null : await this.runtime.templateUnavailable(input.template);
      if (why)
        throw errors.badRequest(
          why,
          [{ path: ['template'], message: 'template unavailable on this host' }],
          'TemplateUnavailable',
        );
    }
    const source: PoolSource = derived
      ? { template: derived.base_template, snapshot: derived.snapshot_id }
      : { template: input.template, snapshot: input.snapshot };
    // Only a built template has a pool (a first build is a job; the pool fills once it is done).
    // A pooled sandbox takes the volumes at its claim where the driver can bind them into a running
    // sandbox; elsewhere a sandbox with volumes starts on its own.
    const poolable = !volumes.length || this.runtime.claimsMounts === true;
    const pooled = built && poolable ? this.pool.take(source) : null;
    const row = newRow((env) => this.seal(env), p, input, {
      derived,
      nodeId,
      id: pooled?.id,
      warm: pooled !== null,
    });
    if (input.start) row.bootstrap = JSON.stringify({ template: input.start });
    const opts = { snapshot: derived?.snapshot_id ?? input.snapshot, env: input.env, limits: input.limits };
    // Recorded before the claim: a second writer is refused (409) before a pooled sandbox is spent.
    if (volumes.length)
      await this.volumes!.attach(p.ownerId, row.id, volumes, input.volumeHolder).catch((e: unknown) => {
        if (pooled) this.pool.giveBack(source, pooled);
        throw e;
      });
    if (pooled) {
      const view = await this.createWarm(row, pooled, opts)
        .catch(async (e: unknown) => {
          await this.volumes?.detach(row.id);
          throw e;
        })
        .finally(() => this.pool.refill(source));
      if (view) return view;
    }
    try {
      await this.repo.insert(row);
    } catch (e) {
      await this.volumes?.detach(row.id);
      throw e;
    }
    if (!built) {
      // The template's first build takes minutes: answer `starting` now and finish in a durable job.
      await this.deps.jobs.enqueue(
        this.deps.nodes.jobType(PROVISION_JOB, row.node_id),
        { id: row.id },
        { key: `sandbox-provision:${row.id}` },
      );
      await this.clocks.arm(row);
      return this.describe(row);
    }
    try {
      await this.launch(row, opts);
    } catch (e) {
      // Started but not ready (a template's start command): nothing of it stays.
      if (input.start) await this.runtime.destroy(row.runtime_id).catch(() => {});
      await this.repo.delete(row.id);
      await this.volumes?.detach(row.id);
      throw e;
    } finally {
      // A pool hit whose claim failed has asked for its refill already.
      if (!pooled) this.pool.refill(source);
    }
    return this.view((await this.repo.get(row.id)) ?? row);
  }

  /**
   * Job: build the template if needed (or wait for the build under way), then start the sandbox. A
   * start that fails leaves the record `failed` with the reason, until it is deleted or its timeout
   * passes, so the caller sees why instead of a 404.
   */
  /** A start cut by nube's own stop (`job`) is handed back to run again, never kept as failed. */
  async provision(id: string, job?: Pick<JobContext, 'signal' | 'stopping'>): Promise<void> {
    const row = await this.repo.get(id);
    if (row?.status !== 'starting') return;
    const log = this.deps.log;
    try {
      if (!(await this.runtime.findTemplate(row.template))) {
        log.info(
          { sandbox: id, template: row.template },
          `sandbox ${id} waits for template ${row.template} (a first build takes minutes)`,
        );
      }
      await this.runtime.ensureTemplate(
        row.template,
        buildLogger(log, { sandbox: id, template: row.template }),
      );
      if ((await this.runtime.get(row.runtime_id)) === null)
        await this.launch(row, { env: this.env(row), limits: limitsOf(row) });
      log.info({ sandbox: id }, `sandbox ${id} started`);
    } catch (e) {
      await this.runtime.destroy(row.runtime_id).catch(() => {});
      if (job && cutShort(job)) throw e;
      log.error(
        { err: e, sandbox: id },
        `sandbox ${id} could not start; kept as failed until deleted or expired`,
      );
      await this.markFailed(row, reasonOf(e));
    }
  }

  private async markFailed(row: SandboxRow, reason: string): Promise<void> {
    const patch: Partial<SandboxRow> = { status: 'failed', error: reason };
    await this.repo.update(row.id, patch);
    await this.event(row.id, 'failed', { reason });
    // Its timeout still runs: the record goes when it passes (or at DELETE).
    await this.clocks.arm({ ...row, ...patch });
  }

  /**
   * A pool hit: the driver claims the pooled sandbox (env, limits, network policy: what makes it the
   * caller's; metadata, timers and the record are the service's, as for any create) first, so the
   * record is written once, already running (no `starting` insert, update and re-read). Null when the
   * claim failed: the pooled sandbox is destroyed and the caller starts one the usual way under the
   * same id. A failed insert destroys the claimed sandbox (it has no record, so nothing else would).
   */
  private async createWarm(
    row: SandboxRow,
    pooled: PooledSandbox,
    o: { env?: Record<string, string>; limits?: Partial<BoxLimits> },
  ): Promise<SandboxView | null> {
    let info: SandboxInfo;
    try {
      const mounts = this.volumes ? await this.volumes.mountsOf(row.id) : [];
      info = await this.runtime.claim(pooled.runtimeId, {
        env: o.env,
        limits: o.limits,
        networkPolicy: JSON.parse(row.network_policy),
        ...(mounts.length ? { mounts } : {}),
      });
    } catch (e) {
      this.deps.log.warn({ err: e, sandbox: row.id }, 'pooled sandbox could not be handed out; starting one');
      await this.runtime.destroy(pooled.runtimeId).catch(() => {});
      return null;
    }
    Object.assign(row, this.startedPatch(row, info));
    try {
      await this.repo.insert(row);
    } catch (e) {
      await this.runtime.destroy(pooled.runtimeId).catch(() => {});
      throw e;
    }
    await this.clocks.arm(row);
    if (!row.bootstrap) return this.view(row);
    await this.runBootstrap(row);
    return this.view((await this.repo.get(row.id)) ?? row);
  }

  /** Start the driver's sandbox for a `starting` record, then run the bootstrap (a wake). */
  async launch(
    row: SandboxRow,
    o: { snapshot?: string; env?: Record<string, string>; limits?: Partial<BoxLimits> },
  ): Promise<BootstrapRun | null> {
    const mounts = this.volumes ? await this.volumes.mountsOf(row.id) : [];
    const info = await rt(
      this.runtime.create({
        id: row.runtime_id,
        template: row.template,
        snapshot: o.snapshot,
        env: o.env,
        limits: o.limits,
        networkPolicy: JSON.parse(row.network_policy),
        mounts,
      }),
    );
    return this.markStarted(row, info);
  }

  private startedPatch(row: SandboxRow, info: SandboxInfo): Partial<SandboxRow> {
    const now = Date.now();
    return {
      status: 'running',
      template_build: info.templateBuild,
      cpus: info.limits.cpus,
      memory_mb: info.limits.memoryMb,
      disk_mb: info.diskMb,
      started_at: now,
      expires_at: neverExpires(row) ? null : now + row.timeout_seconds * 1000,
    };
  }

  async markStarted(row: SandboxRow, info: SandboxInfo): Promise<BootstrapRun | null> {
    const patch = this.startedPatch(row, info);
    await this.repo.update(row.id, patch);
    const fresh = { ...row, ...patch };
    await this.clocks.arm(fresh);
    return this.runBootstrap(fresh);
  }

  async runBootstrap(row: SandboxRow): Promise<BootstrapRun | null> {
    const b = bootstrapOf(row) as Bootstrap | null;
    if (!b) return null;
    if (b.template?.start) await this.startTemplate(row, b.template);
    if (!b.script) return null;
    if (b.mode === 'async') {
      const execId = await rt(this.runtime.startBackground(row.runtime_id, b.script));
      await this.event(row.id, 'bootstrap', { mode: 'async', execId });
      return { mode: 'async', execId };
    }
    const result = await rt(
      this.runtime.exec(row.runtime_id, b.script, { timeoutMs: b.timeoutSeconds * 1000 }),
    );
    await this.event(row.id, 'bootstrap', {
      mode: 'blocking',
      exitCode: result.exitCode,
      timedOut: result.timedOut,
    });
    return { mode: 'blocking', result };
  }

  /**
   * The template's start command, in the background, then its ready command until it succeeds. A
   * server that never gets ready fails the start in words (its output's last lines).
   */
  private async startTemplate(row: SandboxRow, t: TemplateStart): Promise<void> {
    const u = await this.users.resolve(row.runtime_id, undefined, t.user);
    const how = this.users.switcher(row.template);
    const as = (cmd: string) => (u ? asUserCommand(u, cmd, how) : cmd);
    const o = { cwd: t.cwd ?? u?.home, env: u ? userEnv(u) : undefined };
    const execId = await rt(this.runtime.startBackground(row.runtime_id, as(t.start!), o));
    await this.event(row.id, 'template-start', { execId });
    if (!t.ready) return;
    const end = Date.now() + (t.readySeconds ?? 60) * 1000;
    for (let wait = 5; ; wait = Math.min(100, wait * 2)) {
      const r = await rt(this.runtime.exec(row.runtime_id, as(t.ready), { ...o, timeoutMs: 10_000 }));
      if (r.exitCode === 0) return;
      const bg = await this.runtime.getBackground(row.runtime_id, execId, { maxBytes: 2000 }).catch(() => null);
      if (bg?.state === 'exited' || Date.now() > end) {
        const out = `${bg?.stdout ?? ''}${bg?.stderr ?? ''}`.trim().split('\n').slice(-5).join('\n');
        throw new ApiError(
          502,
          'TemplateStartFailed',
          bg?.state === 'exited'
            ? `the template's start command exited ${bg.exitCode} before its ready command succeeded${out ? `: ${out}` : ''}`
            : `the template's ready command did not succeed within ${t.readySeconds ?? 60} s${out ? `; the start command's output: ${out}` : ''}`,
        );
      }
      await new Promise((res) => setTimeout(res, wait));
    }
  }

  /**
   * `keepMemory` (default: the sandbox's `suspend_keeps_memory`): its processes are frozen in place
   * where the driver can (`pauseKeeps`), so a resume carries on; the files alone otherwise. A sandbox
   * suspended with its memory and suspended again without it gives its memory back.
   */
  async suspend(id: string, reason: string, keepMemory?: boolean): Promise<SandboxRow> {
    return this.locked(id, async () => {
      const row = await this.repo.get(id);
      if (!row) throw errors.notFound('sandbox');
      await this.placement.assertHere(row.node_id);
      const keep = (keepMemory ?? row.suspend_keeps_memory === 1) && this.runtime.pauseKeeps === 'processes';
      if (row.status === 'suspended') return row.memory_kept === 1 && !keep ? this.releaseMemoryLocked(row, reason) : row;
      if (row.status !== 'running') throw errors.conflict(`sandbox is ${row.status}`, 'InvalidState');
      await this.cpu.meter(row);
      const info = await rt(this.runtime.suspend(row.runtime_id, { keepMemory: keep }));
      const now = Date.now();
      const patch: Partial<SandboxRow> = {
        status: 'suspended',
        memory_kept: info.memoryKept ? 1 : 0,
        remaining_ms: Math.max(0, (row.expires_at ?? now) - now),
        expires_at: null,
        suspended_at: now,
        kernel_exec_id: null,
      };
      await this.repo.update(id, patch);
      await this.event(id, 'suspended', { reason, ...(info.memoryKept ? { memoryKept: true } : {}) });
      const fresh = { ...row, ...patch };
      await this.clocks.arm(fresh);
      await this.runHooks(this.suspendHooks, fresh);
      return fresh;
    });
  }

  async resume(
    id: string,
    env?: Record<string, string>,
  ): Promise<{ row: SandboxRow; bootstrap: BootstrapRun | null }> {
    const row = await this.locked(id, async () => {
      const r = await this.repo.get(id);
      if (!r) throw errors.notFound('sandbox');
      await this.placement.assertHere(r.node_id);
      if (r.status !== 'suspended')
        throw errors.conflict(`sandbox is ${r.status}, not suspended`, 'InvalidState');
      await rt(this.runtime.resume(r.runtime_id, env ? { env } : {}));
      const thawed = r.memory_kept === 1;
      // A wake on the files may start a new cgroup: its CPU is counted from what it reads now.
      const cpuBase = r.key_id && !thawed ? ((await this.runtime.cgroupStats(r.runtime_id).catch(() => null))?.cpuUsec ?? 0) : undefined;
      const now = Date.now();
      // The TTL was paused: what was left runs again from now (a fresh idle period at least).
      const idle = this.clocks.idleTtlMs(r);
      const left = Math.max(r.remaining_ms ?? 0, idle ?? 0, 1000);
      const patch: Partial<SandboxRow> = {
        status: 'running',
        expires_at: neverExpires(r) ? null : now + left,
        remaining_ms: null,
        suspended_at: null,
        memory_kept: 0,
        // A thawed sandbox carries on its run: started_at stays.
        ...(thawed ? {} : { started_at: now }),
        ...(env ? { env_sealed: this.seal(env) } : {}),
        ...(cpuBase !== undefined ? { cpu_counted_usec: cpuBase } : {}),
      };
      await this.repo.update(id, patch);
      await this.event(id, 'resumed', { ...(env ? { envRewritten: true } : {}), ...(thawed ? { memoryKept: true } : {}) });
      const fresh = { ...r, ...patch };
      await this.clocks.arm(fresh);
      await this.runHooks(this.resumeHooks, fresh);
      return { fresh, thawed };
    });
    // The bootstrap is for a wake on the files: a thawed sandbox's processes never stopped.
    return { row: row.fresh, bootstrap: row.thawed ? null : await this.runBootstrap(row.fresh) };
  }

  /** A sandbox suspended with its memory past the operator's hold time gives it back: its files stay. */
  async releaseMemory(id: string, reason: string): Promise<void> {
    await this.locked(id, async () => {
      const row = await this.repo.get(id);
      if (row?.status === 'suspended' && row.memory_kept === 1) await this.releaseMemoryLocked(row, reason);
    });
  }

  private async releaseMemoryLocked(row: SandboxRow, reason: string): Promise<SandboxRow> {
    await rt(this.runtime.suspend(row.runtime_id, { keepMemory: false }));
    const fresh = { ...row, memory_kept: 0 };
    await this.repo.update(row.id, { memory_kept: 0 });
    await this.event(row.id, 'memory-released', { reason });
    await this.clocks.arm(fresh);
    return fresh;
  }

  /** A hook's failure is logged: the lifecycle change it follows has happened. */
  private async runHooks(hooks: ((row: SandboxRow) => Promise<void>)[], row: SandboxRow): Promise<void> {
    for (const hook of hooks) {
      await hook(row).catch((e: unknown) =>
        this.deps.log.warn({ err: e, sandbox: row.id }, 'sandbox hook failed'),
      );
    }
  }

  /** Whether any probe saw activity the idle clock was not told about. */
  async activeLately(row: SandboxRow): Promise<boolean> {
    for (const probe of this.activityProbes) if (await probe(row).catch(() => false)) return true;
    return false;
  }

  /** Activity on a suspended sandbox wakes it; a starting one is not ready yet, a failed one never. */
  async ensureRunning(row: SandboxRow): Promise<SandboxRow> {
    // Work on a sandbox runs on its node: relayed there, or 503 while that node is down.
    await this.placement.assertHere(row.node_id);
    if (row.status === 'running') return row;
    if (row.status === 'starting') throw startingError();
    if (row.status === 'failed') throw failedError(row);
    try {
      return (await this.resume(row.id)).row;
    } catch (e) {
      // A concurrent wake got there first.
      const fresh = await this.repo.get(row.id);
      if (fresh?.status === 'running') return fresh;
      throw e;
    }
  }

  async destroy(id: string, reason: string): Promise<void> {
    await this.locked(id, async () => {
      const row = await this.repo.get(id);
      if (!row) return;
      // A lost sandbox's record goes now; its node destroys what is left of it when it is back (reconcile).
      if (await this.placement.lostReason(row.node_id)) {
        await this.repo.delete(id);
        await this.deps.jobs.cancel({ key: `sandbox-ttl:${id}` });
        for (const hook of this.destroyHooks) await hook(row);
        this.deps.log.info({ sandbox: id, reason, node: row.node_id }, 'lost sandbox record removed');
        return;
      }
      await this.placement.assertHere(row.node_id);
      const info = await this.runtime.get(row.runtime_id);
      if (info) await this.cpu.meter(row);
      if (info) await rt(this.runtime.destroy(row.runtime_id));
      await this.repo.delete(id);
      await this.deps.jobs.cancel({ key: `sandbox-ttl:${id}` });
      for (const hook of this.destroyHooks) await hook(row);
      this.deps.log.info({ sandbox: id, reason }, 'sandbox destroyed');
      await collectSnapshots(this, row, info?.layers ?? []);
    });
  }

  /**
   * A sandbox that never times out (a machine's box): no deadline, no idle clock, no TTL job. Its
   * owner's DELETE (or the machine's) is the only end.
   */
  async keepAlive(id: string): Promise<void> {
    await this.locked(id, async () => {
      const row = await this.repo.get(id);
      if (!row) throw errors.notFound('sandbox');
      const patch: Partial<SandboxRow> = {
        timeout_seconds: 0,
        expires_at: null,
        hard_expires_at: null,
        idle_ttl_seconds: null,
        suspend_on_idle: 0,
        remaining_ms: null,
      };
      await this.repo.update(id, patch);
      await this.clocks.arm({ ...row, ...patch });
      await this.event(id, 'kept alive', { reason: 'machine' });
    });
  }

  async list(p: Principal, workspaceId?: string): Promise<SandboxView[]> {
    const ws = await this.deps.workspaces.filter(p, workspaceId);
    return Promise.all((await this.repo.list(p.ownerId, ws)).map((r) => this.describe(r)));
  }
}

/** `timeout_seconds` 0 marks a box kept alive (keepAlive): no clock ever runs for it. */
export function neverExpires(r: SandboxRow): boolean {
  return r.timeout_seconds === 0;
}

/** Limits a record asked for: CPU and memory when not newRow's defaults (a machine's tier), and its disk. */
function limitsOf(row: SandboxRow): Partial<BoxLimits> {
  const disk = row.disk_mb === null ? {} : { diskMb: row.disk_mb };
  return row.cpus === 1 && row.memory_mb === 1024
    ? disk
    : { cpus: row.cpus, memoryMb: row.memory_mb, ...disk };
}
