import { existsSync, mkdirSync } from 'node:fs';
import { chmod, mkdir, rm, statfs } from 'node:fs/promises';
import type {
  BackgroundDetail,
  ClaimInput,
  BackgroundLogsQuery,
  BackgroundProcess,
  BuildProgress,
  CreateSandboxInput,
  ExecOptions,
  FillRootfs,
  ExecResult,
  FileEntry,
  NetworkPolicy,
  RawForward,
  ProgressFn,
  SandboxInfo,
  SandboxCounters,
  SandboxLimits,
  SandboxRuntime,
  SandboxUsage,
  SnapshotInfo,
  TemplateInfo,
  OutputSinks,
  StreamExecOptions,
  StreamExecResult,
  VolumeMount,
  VolumeStore,
} from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import { KeyedLock } from '../keyed-lock.js';
import * as bg from './background.js';
import { type CgroupHost, detectCgroups, type SandboxCgroup } from './cgroups.js';
import { enterArgv, prepareFirstExec, toExecResult } from './exec.js';
import * as files from './files.js';
import { ensureHelper, ensureSubordinateIds } from './helper-binary.js';
import {
  initAlive,
  initFields,
  isMounted,
  type LaunchContext,
  parseInit,
  prepareRootfs,
  stopInit,
  unmountRootfs,
} from './launch.js';
import { type BridgeConfig, BridgeNetwork, hostResolver } from './network.js';
import { dnatBindable } from './port-forwards.js';
import { newSnapshotId, takeSnapshot, treeBytes } from './snapshots.js';
import { closeStore, openStore, type StoreMode, type StoreStatus, StoreTrimmer } from './store.js';
import { diskField, projectIdOf } from './store-quota.js';
import { StoreVolumes } from './volumes.js';
import { Spawner } from './spawner.js';
import { favorDynamicMigrations } from './cgroup-tuning.js';
import { Layout, loadAllRecords, loadAllSnapshots, loadRecord, loadSnapshot, saveRecord } from './state.js';
import type { SandboxRecord } from './state.js';
import { STATIC_SH_DIR } from '../static-sh.js';
import {
  buildTemplate,
  readBuildProgress,
  readTemplate,
  recipeHash,
  templateUnavailable,
} from './templates.js';
import { addRunasIfMissing, importTemplate, isImported, readImported, removeImported } from './imported-template.js';

export interface NamespacesRuntimeOptions {
  /** Sandboxes, snapshots, compiled helper and (by default) templates live here. */
  dataDir: string;
  /** Defaults to `<dataDir>/templates`; tests share one across data dirs so `base` is built once. */
  templatesDir?: string;
  /** Mount points and what else the sandbox's user namespace reaches by path; default `/run/nube`. */
  runRoot?: string;
  /** Host bridge; default nube0 with 10.77.0.1/16. */
  bridge?: BridgeConfig;
  /** Private, loopback or link-local ranges a network policy may open (NUBE_SANDBOX_PRIVATE_ALLOW); default none. */
  privateAllow?: readonly string[];
  /** Parent cgroup (under each v1 controller, or under the v2 root) of the sandboxes' cgroups; default `nube`. */
  cgroupParent?: string;
  /** The cgroup hierarchy to use; detected on the host when absent (tests pass their own). */
  cgroups?: CgroupHost;
  /** Detection: `auto` (v2 when it has the controllers, else v1), or only `v1` or `v2`. */
  cgroupVersion?: 'auto' | 'v1' | 'v2';
  defaultLimits?: Partial<SandboxLimits>;
  /** uid/gid 0 inside = uidBase outside; the whole range of uidCount ids is mapped. */
  uidBase?: number;
  uidCount?: number;
  /** Cap on captured exec stdout and stderr each (default 1 MiB). */
  maxOutputBytes?: number;
  /** Resolver written to the sandboxes' resolv.conf; default: the host's first non-loopback one. */
  resolver?: string | null;
  mirror?: string;
  /** Where upper dirs and snapshots live: `auto` (default) a reflink-capable store, `copy` the data dir as is. */
  store?: StoreMode;
  /** Upper bound of the store image's size when one is made (default: what the host can spare). */
  storeSizeBytes?: number;
  /** Free space the host keeps: a new store image is at most the free space less this (NUBE_STORE_RESERVE_GB). */
  storeReserveBytes?: number;
  /** Turn the host's cgroup `favordynmods` on (cgroup-tuning.ts); default true. */
  favorDynmods?: boolean;
  /** The static sh for `/bin/sh` (see ../static-sh.ts); default STATIC_SH_DIR (used when built), null: never. */
  staticShDir?: string | null;
}

const ID_RE = /^[a-z0-9][a-z0-9-]{0,62}$/;
const MAX_FILE_BYTES = 256 * 1024 * 1024;

export class NamespacesRuntime implements SandboxRuntime {
  readonly kind: string = 'namespaces';
  /** A suspend with `keepMemory` freezes the sandbox in place (the freezer; gVisor: `runsc pause`). */
  readonly pauseKeeps = 'processes' as const;
  readonly volumes: VolumeStore;
  protected readonly layout: Layout;
  private readonly templatesDir: string;
  private readonly limits: SandboxLimits;
  private readonly uidBase: number;
  private readonly uidCount: number;
  private readonly cgroupParent: string;
  /** Imported builds checked for /.nube/runas (addRunasIfMissing). */
  private readonly runasChecked = new Set<string>();
  protected network!: BridgeNetwork;
  protected ctx!: LaunchContext;
  protected spawner!: Spawner;
  private cgroups!: CgroupHost;
  private readyPromise: Promise<void> | null = null;
  private readonly locks = new KeyedLock();
  private store: StoreStatus | null = null;
  private trimmer: StoreTrimmer | null = null;
  /** Forks being started: the copy of the parent their top layer waits for. */
  private readonly lowerReady = new Map<string, Promise<unknown>>();

  constructor(protected readonly opts: NamespacesRuntimeOptions) {
    this.layout = new Layout(opts.dataDir, opts.runRoot);
    this.templatesDir = opts.templatesDir ?? `${opts.dataDir}/templates`;
    this.limits = { memoryMb: 1024, cpus: 1, pids: 1024, ...opts.defaultLimits };
    this.uidBase = opts.uidBase ?? 100_000;
    this.uidCount = opts.uidCount ?? 65_536;
    this.cgroupParent = opts.cgroupParent ?? 'nube';
    this.volumes = new StoreVolumes(async () => {
      await this.ready();
      if (!this.store) throw new SandboxRuntimeError('Internal', 'the sandbox store is not open');
      return { store: this.store, spawner: this.spawner };
    }, this.uidBase, this.uidCount);
  }

  /** Memoized; a failure (a host that cannot run sandboxes) is tried again by the next call. */
  protected ready(): Promise<void> {
    this.readyPromise ??= (async () => {
      this.cgroups = this.opts.cgroups ?? detectCgroups(this.cgroupParent, this.opts.cgroupVersion);
      await this.cgroups.prepare();
      await Promise.all([
        mkdir(this.opts.dataDir, { recursive: true }),
        mkdir(this.layout.runDir, { recursive: true }),
      ]);
      this.store = await openStore(this.opts.dataDir, {
        mode: this.opts.store,
        sizeBytes: this.opts.storeSizeBytes,
        reserveBytes: this.opts.storeReserveBytes,
      });
      this.layout.useStore(this.store.root);
      this.trimmer = this.store.kind === 'image' ? new StoreTrimmer(this.store.root) : null;
      // Traversable, not listable: the sandbox's uid walks through to its own 0700 directory.
      await Promise.all([chmod(this.layout.runRoot, 0o711), chmod(this.layout.runDir, 0o711)]);
      const [paths, resolver, tuning] = await Promise.all([
        ensureHelper(this.opts.dataDir),
        this.opts.resolver !== undefined ? Promise.resolve(this.opts.resolver) : hostResolver(),
        this.opts.favorDynmods === false
          ? Promise.resolve('favordynmods left as it is (NUBE_SANDBOX_FAVOR_DYNMODS=false)')
          : favorDynamicMigrations(),
        ensureSubordinateIds(this.uidBase, this.uidCount),
      ]);
      this.cgroupTuning = tuning;
      this.network = new BridgeNetwork(
        this.opts.bridge ?? { name: 'nube0', cidr: '10.77.0.1/16' },
        resolver,
        this.opts.privateAllow,
      );
      await this.network.ensure();
      this.ctx = { layout: this.layout, ...paths, uidBase: this.uidBase, uidCount: this.uidCount, resolver };
      this.spawner = new Spawner(
        paths.helper,
        this.opts.dataDir,
        this.opts.staticShDir === undefined ? STATIC_SH_DIR : this.opts.staticShDir,
      );
    })();
    this.readyPromise.catch(() => {
      this.readyPromise = null;
    });
    return this.readyPromise;
  }

  /** What was done about the host's cgroup migrations (cgroup-tuning.ts), once ready. */
  cgroupTuning: string | null = null;

  async checkHost(): Promise<void> {
    await this.ready();
  }

  /** Which cgroup hierarchy the sandboxes use (after the first call that needed the host). */
  get cgroupVersion(): 1 | 2 | null {
    return this.cgroups?.version ?? null;
  }

  /** Where upper dirs and snapshots live and whether copies of them are reflinks (after the first call that needed the host). */
  get storeStatus(): StoreStatus | null {
    return this.store;
  }

  /** A sandbox's directory in the store (state, upper dir, logs); diagnostics and tests. */
  sandboxDir(id: string): string {
    return this.layout.sandbox(id).dir;
  }

  /**
   * Unmount the store's image, for removing the data dir (tests, benches): nube itself leaves it
   * mounted, since sandboxes outlive it. Call with no sandbox left.
   */
  async detachStore(): Promise<void> {
    await this.trimmer?.settled();
    await closeStore(this.opts.dataDir);
    this.readyPromise = null;
  }

  /** Resolves once the blocks of deleted sandboxes and snapshots are given back to the host. */
  async trimmed(): Promise<void> {
    await this.trimmer?.settled();
  }

  /** This runtime's directory under the run root (tests remove it with the data dir). */
  get runDir(): string {
    return this.layout.runDir;
  }

  /** Serialize lifecycle operations per sandbox id. */
  protected locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.run(id, fn);
  }

  protected cg(id: string): SandboxCgroup {
    return this.cgroups.sandbox(id);
  }
  protected netns(id: string) {
    return `nb-${id}`;
  }

  private info(rec: SandboxRecord): SandboxInfo {
    return {
      id: rec.id,
      state: rec.state,
      template: rec.template,
      templateBuild: rec.templateBuild,
      layers: rec.layers,
      address: this.network.address(rec.leaseIdx),
      limits: rec.limits,
      diskMb: this.diskLimited(rec) ? rec.limits.diskMb! : null,
      memoryKept: rec.frozen === true,
      createdAt: rec.createdAt,
    };
  }

  private diskLimited(rec: SandboxRecord): boolean {
    return !!rec.limits.diskMb && !!this.store?.quota && existsSync(this.layout.sandbox(rec.id).disk);
  }

  /**
   * The sandbox's disk dir with its limit (store-quota.ts), before its upper dir is made in it; again
   * when a claim changes the limit. Nothing on a store without quotas (its upper dir stays beside).
   */
  private async limitDisk(rec: SandboxRecord): Promise<void> {
    const kind = this.store?.quota;
    if (!kind) return;
    await this.spawner.request([
      'L:1',
      diskField(kind, this.layout.sandbox(rec.id).disk, projectIdOf(rec.leaseIdx), rec.limits.diskMb ?? 0),
    ]);
  }

  protected async record(id: string): Promise<SandboxRecord> {
    await this.ready();
    const rec = ID_RE.test(id) ? await loadRecord(this.layout, id) : null;
    if (!rec) throw new SandboxRuntimeError('NotFound', `sandbox ${id} not found`);
    return rec;
  }

  protected async running(id: string): Promise<SandboxRecord> {
    const rec = await this.record(id);
    if (rec.state !== 'running' || !rec.init) {
      throw new SandboxRuntimeError('InvalidState', `sandbox ${id} is ${rec.state}`);
    }
    return rec;
  }

  async findTemplate(name: string): Promise<TemplateInfo | null> {
    if (isImported(name)) {
      const info = readImported(this.templatesDir, name);
      // A template imported before runas was part of every import gets it now (once per build and process).
      if (info && !this.runasChecked.has(info.path)) {
        await addRunasIfMissing({ binDir: `${this.opts.dataDir}/bin`, ids: { uidBase: this.uidBase, uidCount: this.uidCount } }, info);
        this.runasChecked.add(info.path);
      }
      return info;
    }
    return readTemplate(this.templatesDir, name, recipeHash(name, this.uidBase));
  }

  async templateUnavailable(name: string): Promise<string | null> {
    if (isImported(name))
      return readImported(this.templatesDir, name) ? null : `template ${name} is not built on this host`;
    return templateUnavailable(name);
  }

  async templateProgress(name: string): Promise<BuildProgress | null> {
    if (isImported(name)) return null;
    return readBuildProgress(this.templatesDir, name, recipeHash(name, this.uidBase));
  }

  async ensureTemplate(name: string, onProgress?: ProgressFn): Promise<TemplateInfo> {
    return (await this.findTemplate(name)) ?? this.buildTemplate(name, onProgress);
  }

  async buildTemplate(
    name: string,
    onProgress?: ProgressFn,
    o: { force?: boolean } = {},
  ): Promise<TemplateInfo> {
    if (isImported(name))
      throw new SandboxRuntimeError('NotFound', `template ${name} is not built on this host`);
    return buildTemplate(this.templatesDir, name, this.uidBase, onProgress, {
      ...o,
      mirror: this.opts.mirror,
    });
  }

  async importTemplate(
    name: string,
    build: string,
    fill: FillRootfs,
    onProgress?: ProgressFn,
  ): Promise<TemplateInfo> {
    const o = {
      templatesDir: this.templatesDir,
      binDir: `${this.opts.dataDir}/bin`,
      staticShDir: this.opts.staticShDir === undefined ? STATIC_SH_DIR : this.opts.staticShDir,
      ids: { uidBase: this.uidBase, uidCount: this.uidCount },
    };
    return importTemplate(o, name, build, fill, onProgress);
  }

  async removeTemplate(name: string): Promise<void> {
    await this.ready();
    const sandboxes = (await loadAllRecords(this.layout)).filter((r) => r.template === name).map((r) => r.id);
    const snapshots = (await loadAllSnapshots(this.layout))
      .filter((s) => s.template === name)
      .map((s) => s.id);
    if (sandboxes.length || snapshots.length) {
      throw new SandboxRuntimeError('InvalidState', `template ${name} is in use`, { sandboxes, snapshots });
    }
    await removeImported(this.templatesDir, name);
  }

  protected async launch(rec: SandboxRecord): Promise<void> {
    rec.init = parseInit(
      await this.startOnHost(rec, initFields(this.ctx, rec, this.cg(rec.id).dirs())),
      rec.id,
    );
    rec.state = 'running';
    prepareFirstExec(this.spawner, rec, this.cg(rec.id));
    await saveRecord(this.layout, rec);
  }

  /**
   * What a start needs on the host, in one request to the spawner (helper/launch.c): the overlay
   * mount, the netns with its veth, addresses and sysctls, the policy chain (nft, run alongside), and
   * `init` when given. Only file writes and the cgroups' limits are done here first, in parallel.
   * Resolves with the helper's answer.
   */
  protected async startOnHost(rec: SandboxRecord, init: string[]): Promise<string> {
    const [rootfs, net] = await Promise.all([
      prepareRootfs(this.ctx, rec),
      this.network.attachFields(this.netns(rec.id), rec.leaseIdx, rec.policy),
      this.applyLimits(rec),
      // A fork: its top layer, the parent's copy, is still being made; all the rest goes ahead meanwhile.
      this.lowerReady.get(rec.id),
    ]);
    return this.spawner.request(['L:1', ...rootfs, ...net, ...init]);
  }

  /** Write the sandbox's limits to its cgroups (creating them when missing). */
  protected applyLimits(rec: SandboxRecord): Promise<void> {
    return this.cg(rec.id).create(rec.limits);
  }

  /** Free everything a running sandbox holds on the host except its files and address lease. */
  /**
   * Stops everything in a sandbox at once and lets it carry on later: its cgroup's freezer (gVisor
   * overrides it with `runsc pause`). Snapshots copy under it; a suspend with memory stays in it.
   */
  protected pauser(rec: SandboxRecord): { freeze(): Promise<void>; thaw(): Promise<void> } {
    return this.cg(rec.id);
  }

  protected async halt(rec: SandboxRecord): Promise<void> {
    // A frozen init would not die of its SIGKILL on a v1 freezer: thawed first, then ended.
    if (rec.frozen) await this.pauser(rec).thaw();
    rec.frozen = false;
    this.spawner.forget(`${rec.id}:`);
    await stopInit(rec);
    await this.cg(rec.id).destroy();
    // Nothing runs in it any more: its network and its mount go independently.
    await Promise.all([
      this.network.detach(this.netns(rec.id), rec.leaseIdx),
      unmountRootfs(this.ctx, rec.id),
    ]);
    rec.init = null;
  }

  async create(input: CreateSandboxInput): Promise<SandboxInfo> {
    await this.ready();
    if (!input.snapshot) return this.start(input, await this.ensureTemplate(input.template ?? 'base'), []);
    const snap = await loadSnapshot(this.layout, input.snapshot);
    if (!snap) throw new SandboxRuntimeError('NotFound', `snapshot ${input.snapshot} not found`);
    const t = await readTemplate(this.templatesDir, snap.template, snap.templateBuild);
    if (!t) throw new SandboxRuntimeError('NotFound', `template build ${snap.templateBuild} is gone`);
    return this.start(input, t, [snap.id, ...snap.layers]);
  }

  /**
   * Start a sandbox on `template` with snapshot `layers` (top first). `lowerReady`: the top layer is
   * still being copied (a fork); everything but the overlay mount goes ahead meanwhile.
   */
  private async start(
    input: CreateSandboxInput,
    template: TemplateInfo,
    layers: string[],
    lowerReady?: Promise<unknown>,
  ): Promise<SandboxInfo> {
    const { id } = input;
    if (!ID_RE.test(id)) throw new SandboxRuntimeError('InvalidInput', `invalid sandbox id ${id}`);
    return this.locked(id, async () => {
      if (existsSync(this.layout.sandbox(id).dir)) {
        throw new SandboxRuntimeError('AlreadyExists', `sandbox ${id} already exists`);
      }
      const rec: SandboxRecord = {
        id,
        state: 'running',
        template: template.name,
        templateBuild: template.build,
        layers,
        lowerDirs: [...layers.map((l) => this.layout.snapshot(l).layer), template.path],
        leaseIdx: 0,
        env: input.env ?? {},
        limits: { ...this.limits, ...input.limits },
        policy: input.networkPolicy ?? {},
        mounts: input.mounts ?? [],
        createdAt: new Date().toISOString(),
        init: null,
      };
      mkdirSync(this.layout.sandbox(id).dir, { recursive: true });
      if (lowerReady) this.lowerReady.set(id, lowerReady);
      try {
        rec.leaseIdx = await this.network.lease(`${this.opts.dataDir}:${id}`);
        await Promise.all([saveRecord(this.layout, rec), this.limitDisk(rec)]);
        await this.launch(rec);
      } catch (e) {
        await this.teardown(rec).catch(() => {});
        throw e;
      } finally {
        this.lowerReady.delete(id);
      }
      return this.info(rec);
    });
  }

  /**
   * A pooled sandbox becomes the caller's: only what differs from how it was started is written (the
   * env lives in the record and is given to each exec; limits go to the cgroups; the policy to nft).
   */
  /** A claim binds volumes into the running sandbox's mount namespace (helper/launch.c, claim_binds). */
  readonly claimsMounts: boolean = true;

  async claim(id: string, input: ClaimInput): Promise<SandboxInfo> {
    return this.locked(id, async () => {
      const rec = await this.running(id);
      if (input.mounts?.length) await this.bindInto(rec, input.mounts);
      rec.env = input.env ?? {};
      const limits = { ...this.limits, ...input.limits };
      if (JSON.stringify(limits) !== JSON.stringify(rec.limits)) {
        const disk = (limits.diskMb ?? 0) !== (rec.limits.diskMb ?? 0);
        rec.limits = limits;
        await Promise.all([
          this.applyLimits(rec),
          disk && existsSync(this.layout.sandbox(id).disk) ? this.limitDisk(rec) : null,
        ]);
      }
      const policy = input.networkPolicy ?? {};
      if (JSON.stringify(policy) !== JSON.stringify(rec.policy)) {
        await this.network.applyPolicy(rec.leaseIdx, policy);
        rec.policy = policy;
      }
      rec.createdAt = new Date().toISOString();
      await saveRecord(this.layout, rec);
      return this.info(rec);
    });
  }

  /**
   * Volumes into a running sandbox no code of a caller has run in yet (a pooled one): the helper moves
   * a detached clone of each onto its path inside. Recorded, so each later start binds them as usual.
   */
  private async bindInto(rec: SandboxRecord, mounts: VolumeMount[]): Promise<void> {
    if (!rec.init) throw new SandboxRuntimeError('InvalidState', `sandbox ${rec.id} has no init to bind volumes into`);
    await this.spawner.request([
      'V:1',
      `p:${rec.init.innerPid}`,
      `u:${this.uidBase}`,
      ...mounts.map((m) => `B:${m.readOnly ? 'r' : 'w'}\t${m.source}\t${m.target}`),
    ]);
    rec.mounts = mounts;
  }

  private async teardown(rec: SandboxRecord): Promise<void> {
    await this.halt(rec);
    if (rec.leaseIdx) await this.network.release(rec.leaseIdx);
    const p = this.layout.sandbox(rec.id);
    await Promise.all([
      rm(p.dir, { recursive: true, force: true }),
      rm(p.run, { recursive: true, force: true }),
    ]);
    this.trimmer?.schedule();
  }

  async get(id: string): Promise<SandboxInfo | null> {
    await this.ready();
    const rec = ID_RE.test(id) ? await loadRecord(this.layout, id) : null;
    return rec ? this.info(rec) : null;
  }

  async list(): Promise<SandboxInfo[]> {
    await this.ready();
    return (await loadAllRecords(this.layout)).map((r) => this.info(r));
  }

  async destroy(id: string): Promise<void> {
    const rec = await this.record(id);
    await this.locked(id, () => this.teardown(rec));
  }

  async suspend(id: string, o: { keepMemory?: boolean } = {}): Promise<SandboxInfo> {
    const first = await this.record(id);
    // Suspended with memory, now without: its processes go, its files stay.
    if (first.frozen && !o.keepMemory) {
      return this.locked(id, async () => {
        const rec = await this.record(id);
        if (rec.frozen) {
          await this.halt(rec);
          await saveRecord(this.layout, rec);
        }
        return this.info(rec);
      });
    }
    await this.running(id);
    return this.locked(id, async () => {
      const rec = await this.running(id);
      if (o.keepMemory) {
        await this.pauser(rec).freeze();
        rec.frozen = true;
      } else {
        await this.halt(rec);
      }
      rec.state = 'suspended';
      await saveRecord(this.layout, rec);
      return this.info(rec);
    });
  }

  async resume(id: string, o: { env?: Record<string, string> } = {}): Promise<SandboxInfo> {
    return this.locked(id, async () => {
      const rec = await this.record(id);
      if (rec.state !== 'suspended')
        throw new SandboxRuntimeError('InvalidState', `sandbox ${id} is ${rec.state}`);
      if (o.env) rec.env = o.env;
      if (rec.frozen && rec.init) {
        // Its processes carry on where they stopped; the new env is for what runs from now on.
        await this.pauser(rec).thaw();
        rec.frozen = false;
        rec.state = 'running';
        await saveRecord(this.layout, rec);
      } else {
        await this.launch(rec);
      }
      return this.info(rec);
    });
  }

  async snapshot(id: string, snapshotId?: string): Promise<SnapshotInfo> {
    const rec = await this.record(id);
    // A sandbox suspended with its memory is frozen already: copied as it is, and left frozen.
    return this.locked(id, () =>
      takeSnapshot(this.layout, rec, rec.init && !rec.frozen ? this.pauser(rec) : null, snapshotId),
    );
  }

  async getSnapshot(snapshotId: string): Promise<SnapshotInfo | null> {
    await this.ready();
    return /^snap_[0-9a-f]+$/.test(snapshotId) ? loadSnapshot(this.layout, snapshotId) : null;
  }

  async deleteSnapshot(snapshotId: string): Promise<void> {
    const snap = await this.getSnapshot(snapshotId);
    if (!snap) throw new SandboxRuntimeError('NotFound', `snapshot ${snapshotId} not found`);
    const sandboxes = (await loadAllRecords(this.layout)).filter((r) => r.layers.includes(snapshotId));
    const snapshots = (await loadAllSnapshots(this.layout)).filter((s) => s.layers.includes(snapshotId));
    if (sandboxes.length || snapshots.length) {
      throw new SandboxRuntimeError('SnapshotInUse', `snapshot ${snapshotId} is in use`, {
        children: sandboxes.map((r) => r.id),
        snapshots: snapshots.map((s) => s.id),
      });
    }
    await rm(this.layout.snapshot(snapshotId).dir, { recursive: true, force: true });
    this.trimmer?.schedule();
  }

  /**
   * Snapshot + one sandbox per child on `[snapshot, ...parent layers, template]`. The children's
   * network, cgroups and address are set up while the parent's upper dir is copied; only their overlay
   * mount waits for the copy. If anything fails, nothing of the fork is left.
   */
  async fork(
    id: string,
    childIds: string[],
    o: { env?: Record<string, string> } = {},
  ): Promise<SandboxInfo[]> {
    const parent = await this.running(id);
    for (const c of childIds)
      if (!ID_RE.test(c)) throw new SandboxRuntimeError('InvalidInput', `invalid id ${c}`);
    const template = await readTemplate(this.templatesDir, parent.template, parent.templateBuild);
    if (!template)
      throw new SandboxRuntimeError('NotFound', `template build ${parent.templateBuild} is gone`);
    const snapId = newSnapshotId();
    const snap = this.snapshot(id, snapId);
    const kids = await Promise.allSettled(
      childIds.map((c) =>
        this.start(
          { id: c, env: { ...parent.env, ...o.env }, limits: parent.limits, networkPolicy: parent.policy },
          template,
          [snapId, ...parent.layers],
          snap,
        ),
      ),
    );
    const snapDone = await snap.then(
      () => true,
      () => false,
    );
    const failed = kids.find((k): k is PromiseRejectedResult => k.status === 'rejected');
    if (failed) {
      for (const [i, k] of kids.entries())
        if (k.status === 'fulfilled') await this.destroy(childIds[i]!).catch(() => {});
      if (snapDone) await this.deleteSnapshot(snapId).catch(() => {});
      throw failed.reason;
    }
    return kids.map((k) => (k as PromiseFulfilledResult<SandboxInfo>).value);
  }

  async recover(): Promise<SandboxInfo[]> {
    await this.ready();
    const out: SandboxInfo[] = [];
    for (const rec of await loadAllRecords(this.layout)) {
      // A fork whose copy of the parent never finished (nube stopped in between: never started, its
      // top layer has no meta, which is written last): its call never answered, so it is removed.
      const top = rec.layers[0];
      if (rec.state === 'running' && !rec.init && top && !existsSync(this.layout.snapshot(top).meta)) {
        await this.locked(rec.id, () => this.teardown(rec)).catch(() => {});
        await rm(this.layout.snapshot(top).dir, { recursive: true, force: true }); // the half copy
        continue;
      }
      await this.locked(rec.id, async () => {
        // Its lease is gone when /run was emptied (a reboot) or `nube cleanup` removed it: it takes its
        // address again, or another one when that was taken meanwhile (and keeps that).
        const idx = await this.network.lease(`${this.opts.dataDir}:${rec.id}`, rec.leaseIdx);
        if (idx !== rec.leaseIdx) {
          rec.leaseIdx = idx;
          await saveRecord(this.layout, rec);
        }
        // Its processes died (nube's host rebooted, or someone killed them), or it was started by a nube
        // that mounted it inside the data dir (before the run dir): start again on its files.
        const legacy = await isMounted(this.layout.sandbox(rec.id).legacyMerged);
        if (rec.state === 'running' && (legacy || !(await initAlive(rec)))) {
          await this.halt(rec);
          await this.launch(rec);
        }
        // Suspended with its memory, but its processes are gone (a reboot): what is left is its files.
        if (rec.frozen && (legacy || !(await initAlive(rec)))) {
          await this.halt(rec);
          await saveRecord(this.layout, rec);
        }
      });
      out.push(this.info(rec));
    }
    return out;
  }

  protected enter(rec: SandboxRecord, cwd = '/') {
    return (argv: string[], stdin?: Uint8Array | string) =>
      enterArgv(this.spawner, rec, this.cg(rec.id), argv, {
        cwd,
        stdin,
        timeoutMs: 120_000,
        maxOutputBytes: MAX_FILE_BYTES,
      });
  }

  async exec(id: string, command: string, o: ExecOptions = {}): Promise<ExecResult> {
    const rec = await this.running(id);
    const r = await enterArgv(this.spawner, rec, this.cg(id), ['/bin/sh', '-c', command], {
      cwd: o.cwd,
      env: o.env,
      stdin: o.stdin,
      timeoutMs: o.timeoutMs ?? 60_000,
      maxOutputBytes: o.maxOutputBytes ?? this.opts.maxOutputBytes ?? 1024 * 1024,
    });
    return toExecResult(r);
  }

  async execStream(
    id: string,
    argv: string[],
    o: StreamExecOptions,
    sinks: OutputSinks,
  ): Promise<StreamExecResult> {
    const rec = await this.running(id);
    const r = await enterArgv(this.spawner, rec, this.cg(id), argv, {
      cwd: o.cwd,
      env: o.env,
      timeoutMs: o.timeoutMs,
      stdin: o.stdin,
      maxOutputBytes: 0,
      sinks,
      signal: o.signal,
    });
    return { exitCode: r.exitCode, durationMs: r.durationMs, timedOut: r.timedOut };
  }

  async startBackground(id: string, command: string, o: { cwd?: string; env?: Record<string, string> } = {}) {
    const rec = await this.running(id);
    return bg.startBackground(this.ctx.helper, this.layout.sandbox(id).bg, rec, this.cg(id), command, o);
  }
  async listBackground(id: string): Promise<BackgroundProcess[]> {
    await this.record(id);
    return bg.listBackground(this.layout.sandbox(id).bg);
  }
  async getBackground(id: string, execId: string, q?: BackgroundLogsQuery): Promise<BackgroundDetail> {
    await this.record(id);
    return bg.getBackground(this.layout.sandbox(id).bg, execId, q);
  }
  async killBackground(id: string, execId: string, graceSeconds = 5): Promise<void> {
    await this.record(id);
    await bg.killBackground(this.layout.sandbox(id).bg, execId, Math.min(30, Math.max(0, graceSeconds)));
  }

  async writeFile(id: string, path: string, data: Uint8Array): Promise<void> {
    await files.writeFile(this.enter(await this.running(id)), path, data);
  }
  async readFile(id: string, path: string): Promise<Buffer> {
    return files.readFile(this.enter(await this.running(id)), path);
  }
  async listDir(id: string, path: string): Promise<FileEntry[]> {
    return files.listDir(this.enter(await this.running(id)), path);
  }
  async remove(id: string, path: string, o: { recursive?: boolean } = {}): Promise<void> {
    await files.remove(this.enter(await this.running(id)), path, o.recursive ?? false);
  }
  async move(id: string, from: string, to: string): Promise<void> {
    await files.move(this.enter(await this.running(id)), from, to);
  }
  async mkdir(id: string, path: string): Promise<void> {
    await files.mkdir(this.enter(await this.running(id)), path);
  }
  async applyPatch(id: string, diff: string, o: { cwd?: string } = {}): Promise<{ files: string[] }> {
    const rec = await this.running(id);
    return files.applyPatch(this.enter(rec, files.sandboxPath(o.cwd ?? '/root')), diff);
  }

  async setNetworkPolicy(id: string, policy: NetworkPolicy): Promise<void> {
    await this.locked(id, async () => {
      const rec = await this.record(id);
      // A sandbox frozen in place keeps its network: the policy holds when it thaws.
      if (rec.state === 'running' || rec.frozen) await this.network.applyPolicy(rec.leaseIdx, policy);
      rec.policy = policy;
      await saveRecord(this.layout, rec);
    });
  }

  /** The nft chain of a sandbox as text (diagnostics, tests). */
  async describeNetworkPolicy(id: string): Promise<string> {
    return this.network.listPolicy((await this.running(id)).leaseIdx);
  }

  async hostAddress(): Promise<string> {
    await this.ready();
    return this.network.hostIp;
  }

  async openHostPort(port: number): Promise<void> {
    await this.ready();
    await this.network.openHostPort(port);
  }

  async closeHostPort(port: number): Promise<void> {
    await this.ready();
    await this.network.closeHostPort(port);
  }

  async forwardPort(id: string, f: RawForward): Promise<boolean> {
    if (!dnatBindable(f.bind)) return false;
    await this.ready();
    await this.network.forwards.add({ ...f, address: await this.addressOf(id) });
    return true;
  }

  async unforwardPort(f: Omit<RawForward, 'port'>): Promise<void> {
    if (!dnatBindable(f.bind)) return;
    await this.ready();
    await this.network.forwards.remove(f);
  }

  async forwardedRecently(id: string): Promise<boolean> {
    await this.ready();
    return this.network.forwards.active(await this.addressOf(id));
  }

  async addressOf(id: string): Promise<string> {
    return this.network.address((await this.record(id)).leaseIdx);
  }

  /** The pid (host view) of the sandbox's pid 1, for checks from outside. */
  async initPid(id: string): Promise<number> {
    return (await this.running(id)).init!.innerPid;
  }

  async cgroupStats(id: string): Promise<SandboxCounters> {
    await this.running(id);
    return this.cg(id).stats();
  }

  async usage(id: string): Promise<SandboxUsage> {
    const rec = await this.running(id);
    const upper = this.layout.sandbox(id).upper;
    const [st, diskBytes, fs] = await Promise.all([this.cg(id).stats(), treeBytes(upper), statfs(upper)]);
    const diskTotalBytes = this.diskLimited(rec) ? rec.limits.diskMb! * 1024 * 1024 : fs.blocks * fs.bsize;
    return {
      cpuUsec: st.cpuUsec,
      memoryBytes: st.memoryBytes,
      memoryCacheBytes: st.cacheBytes,
      diskBytes,
      diskTotalBytes,
    };
  }

  async close(): Promise<void> {
    await this.locks.settle();
    // A trim under way does not hold nube's exit: it only gives blocks back, and the next deletion trims again.
    this.trimmer?.stop();
    this.spawner?.close();
  }
}
