// The contract between the sandboxes service and whatever isolates a sandbox (Linux namespaces today;
// gVisor, Firecracker or Kubernetes later). It knows nothing of HTTP, owners or the metadata DB: ids are
// chosen by the caller, and a driver keeps whatever it needs to re-adopt sandboxes in its own state.

import type { Readable } from 'node:stream';

/** Writes an imported template's root filesystem into `rootfs` (an empty dir), owners shifted by `uidBase`. */
export type FillRootfs = (
  rootfs: string,
  ids: { uidBase: number; uidCount: number },
) => Promise<{ packages?: string[] } | undefined>;

export type BuiltinTemplate = 'base' | 'code-interpreter';

export interface SandboxLimits {
  memoryMb: number;
  /** CPU bandwidth in cores (0.5 = half a core). */
  cpus: number;
  pids: number;
  /** Writable disk in MiB (upper dir, logs of /bg processes); absent or 0: not limited. */
  diskMb?: number;
}

export interface NetworkPolicy {
  /** CIDRs or domain names that are reachable even if a deny rule or a default deny covers them. */
  allow?: string[];
  /** CIDRs or domain names that are unreachable (`0.0.0.0/0` + `allow` = allow-list mode). */
  deny?: string[];
}

export interface CreateSandboxInput {
  /** Caller-chosen id; also the hostname inside. Lowercase letters, digits and dashes, at most 63. */
  id: string;
  /** Built-in template to start from (ignored when `snapshot` is given). */
  template?: string;
  /** Start on top of a snapshot (fork, derived template) instead of a bare template. */
  snapshot?: string;
  env?: Record<string, string>;
  limits?: Partial<SandboxLimits>;
  networkPolicy?: NetworkPolicy;
  /** Volumes (VolumeStore dirs) bound into the sandbox; kept across suspend, resume and restarts. */
  mounts?: VolumeMount[];
}

/** A volume's directory on the store (`source`, from VolumeStore.path) at `target` inside. */
export interface VolumeMount {
  source: string;
  /** Absolute, normalized; never `/` nor under /proc, /sys, /dev or /.nube (the caller checks). */
  target: string;
  readOnly: boolean;
}

/**
 * Quota-limited directories on the sandbox store that outlive sandboxes (the volumes area's). Ids are
 * the caller's. Copies (from a volume or a snapshot) share blocks with their source.
 */
export interface VolumeStore {
  /** A new volume of at most `bytes`, empty or a copy-on-write copy of a volume or a snapshot. */
  create(id: string, bytes: number, from?: { volume: string } | { snapshot: string }): Promise<void>;
  /** A new limit (the caller refuses one below usedBytes). */
  resize(id: string, bytes: number): Promise<void>;
  usedBytes(id: string): Promise<number>;
  remove(id: string): Promise<void>;
  /** A read-only copy-on-write copy of the volume now. */
  snapshot(id: string, snapshotId: string): Promise<void>;
  snapshotUsedBytes(snapshotId: string): Promise<number>;
  removeSnapshot(snapshotId: string): Promise<void>;
  /** The host directory a mount's `source` names. */
  path(id: string): Promise<string>;
  /**
   * A snapshot's files as a zstd-compressed tar (numeric owners, as on the store): `stream` is read by
   * the caller, `done` settles when tar exits (rejects when it failed: the stream is then incomplete).
   */
  archive(snapshotId: string): Promise<{ stream: Readable; done: Promise<void> }>;
  /**
   * A new volume of at most `bytes` holding what `archive` (an archive()'s stream) holds; owners
   * written under a store whose uid base was `uidBase` are shifted onto this one's. On failure nothing
   * is left.
   */
  restore(id: string, bytes: number, archive: Readable, uidBase: number): Promise<void>;
  /** uid 0 inside a sandbox is this uid on the host: owners in an archive are relative to it. */
  readonly uidBase: number;
  /** The host uid (and gid) a sandbox's uid 0 is in its files, and how many ids follow it. */
  readonly ids: { base: number; count: number };
}

/** What makes a running sandbox started ahead (a warm pool's) the caller's, applied at hand-out. */
export interface ClaimInput {
  /** Replaces the environment every later exec gets. */
  env?: Record<string, string>;
  /** Merged over the driver's defaults, as at create. */
  limits?: Partial<SandboxLimits>;
  networkPolicy?: NetworkPolicy;
  /** Volumes bound into the running sandbox at the claim (drivers with `claimsMounts` only). */
  mounts?: VolumeMount[];
}

export type SandboxState = 'running' | 'suspended';

/** What the kernel counted for a running sandbox's cgroup (memory in use, OOM kills, pids). */
export interface SandboxCounters {
  memoryBytes: number;
  /** Page cache charged to the cgroup (part of memoryBytes). */
  cacheBytes: number;
  /**
   * CPU time used, microseconds: all of it since the cgroup began (v2, and v1 where cpuacct is
   * mounted: sandboxes join it), else that of its processes alive now and the children they reaped.
   */
  cpuUsec: number;
  /** Processes the kernel killed for the sandbox's memory limit (v1 memory.oom_control, v2 memory.events). */
  oomKills: number;
  pids: number;
  pidsMaxHits: number;
}

export interface SandboxInfo {
  id: string;
  state: SandboxState;
  template: string;
  /** Template build (recipe hash) the sandbox's lowest layer comes from. */
  templateBuild: string;
  /** Snapshots stacked over the template, top first. */
  layers: string[];
  /** The sandbox's address on the host bridge; the host's proxy reaches exposed ports through it. */
  address: string;
  limits: SandboxLimits;
  /** The disk limit the store enforces, MiB; null when none is (no limit asked, or a store without quotas). */
  diskMb: number | null;
  /** Suspended with its processes and memory kept (frozen): a resume thaws it. */
  memoryKept: boolean;
  createdAt: string;
}

export interface ExecOptions {
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  stdin?: string | Uint8Array;
  /** Cap on captured stdout and stderr each; the rest is dropped and `truncated` set. */
  maxOutputBytes?: number;
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  durationMs: number;
  timedOut: boolean;
  truncated: boolean;
}

export interface StreamExecOptions {
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  stdin?: Uint8Array;
  /** Aborting kills the command's process group. */
  signal?: AbortSignal;
}

export interface OutputSinks {
  stdout(chunk: Buffer): void;
  stderr(chunk: Buffer): void;
}

/** How a streamed command ended (its output went to the sinks). */
export interface StreamExecResult {
  exitCode: number;
  durationMs: number;
  timedOut: boolean;
}

/** What a running sandbox uses now (E2B's metrics). */
export interface SandboxUsage {
  /** CPU time, microseconds (see CgroupStats.cpuUsec for what a driver counts). */
  cpuUsec: number;
  memoryBytes: number;
  /** Page cache, part of memoryBytes. */
  memoryCacheBytes: number;
  /** What the sandbox wrote to its own layer. */
  diskBytes: number;
  /** What its filesystem can hold in all. */
  diskTotalBytes: number;
}

export interface BackgroundProcess {
  execId: string;
  command: string;
  state: 'running' | 'exited';
  exitCode: number | null;
  startedAt: string;
  endedAt: string | null;
}

export interface BackgroundLogsQuery {
  stdoutOffset?: number;
  stderrOffset?: number;
  maxBytes?: number;
}

export interface BackgroundDetail extends BackgroundProcess {
  stdout: string;
  stderr: string;
  /** Offsets to pass next time to continue where this read stopped. */
  stdoutNextOffset: number;
  stderrNextOffset: number;
}

export interface FileEntry {
  name: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mtime: string;
}

export interface SnapshotInfo {
  id: string;
  sourceSandbox: string;
  template: string;
  templateBuild: string;
  /** Snapshots this one sits on, top first. */
  layers: string[];
  sizeBytes: number;
  createdAt: string;
}

export interface TemplateInfo {
  name: string;
  build: string;
  path: string;
  packages: string[];
  builtAt: string;
  buildMs: number;
}

/** A template build in progress, as far as can be told (the step is real, the percentage an estimate). */
export interface BuildProgress {
  template: string;
  step: string;
  /** 0-99 while building: estimated from the step and the time spent in it. */
  percent: number;
  elapsedSeconds: number;
  /** The process building it (this nube, another one, or `nube templates build`). */
  pid: number;
}

/** A line of a template build's output, with where the build is (also while waiting for another process's build). */
export type ProgressFn = (line: string, progress?: BuildProgress) => void;

export interface SandboxRuntime {
  readonly kind: string;
  /** Volumes on this driver's store; null where the driver keeps none. */
  readonly volumes: VolumeStore | null;
  /**
   * What a suspend with `keepMemory` keeps: running processes and memory too (frozen in place, in the
   * host's memory), or only the files where the driver cannot keep them.
   */
  readonly pauseKeeps?: 'files' | 'processes';
  /**
   * Whether a claim can bind volumes into a running (pooled) sandbox; without it a create with volumes
   * starts a sandbox of its own.
   */
  readonly claimsMounts?: boolean;
  /** Whether this host can run sandboxes (sets up what they share); `HostUnsupported` saying why not. */
  checkHost(): Promise<void>;
  /** Template build for the current recipe, building it when missing. */
  ensureTemplate(name: string, onProgress?: ProgressFn): Promise<TemplateInfo>;
  /** The build of the current recipe if it exists; never builds (null: the first use would build it). */
  findTemplate(name: string): Promise<TemplateInfo | null>;
  /** Why a template that is not built cannot be built on this host (a missing host program), or null. */
  templateUnavailable(name: string): Promise<string | null>;
  /** The build of the current recipe under way on this host (in any process), or null. */
  templateProgress(name: string): Promise<BuildProgress | null>;
  /** Build (or return the cached build of) the current recipe of a template. */
  buildTemplate(name: string, onProgress?: ProgressFn, opts?: { force?: boolean }): Promise<TemplateInfo>;
  /**
   * An imported template (an OCI image, a Dockerfile build), named like `tpl_<id>`: `fill` writes build
   * `build`'s root filesystem (owners shifted by `uidBase`), the driver adds its own parts (init, static
   * shell) and makes it the build the name starts from. Idempotent per build.
   */
  importTemplate(
    name: string,
    build: string,
    fill: FillRootfs,
    onProgress?: ProgressFn,
  ): Promise<TemplateInfo>;
  /** Removes an imported template's builds; `InvalidState` (details: sandboxes, snapshots) while they stand on it. */
  removeTemplate(name: string): Promise<void>;
  /** Call once at start: re-adopts live sandboxes and restarts dead ones on their files. */
  recover(): Promise<SandboxInfo[]>;

  create(input: CreateSandboxInput): Promise<SandboxInfo>;
  /** Make a running sandbox started ahead with the defaults (a warm pool's) the caller's: env, limits, policy. */
  claim(id: string, input: ClaimInput): Promise<SandboxInfo>;
  get(id: string): Promise<SandboxInfo | null>;
  list(): Promise<SandboxInfo[]>;
  destroy(id: string): Promise<void>;
  /**
   * Stop a running sandbox, keeping its files. `keepMemory` (where `pauseKeeps` is `processes`): freeze
   * its processes instead, so a resume carries on where they were. A sandbox suspended with memory
   * that is suspended again without it drops its processes and memory (files kept).
   */
  suspend(id: string, opts?: { keepMemory?: boolean }): Promise<SandboxInfo>;
  /** Start a suspended sandbox again on its files, or thaw it where its suspend kept its memory. */
  resume(id: string, opts?: { env?: Record<string, string> }): Promise<SandboxInfo>;
  snapshot(id: string): Promise<SnapshotInfo>;
  getSnapshot(snapshotId: string): Promise<SnapshotInfo | null>;
  /** Fails with `SnapshotInUse` while sandboxes or other snapshots stand on it. */
  deleteSnapshot(snapshotId: string): Promise<void>;
  /** Snapshot the parent (which keeps running) and start one sandbox per id on that snapshot. */
  fork(id: string, childIds: string[], opts?: { env?: Record<string, string> }): Promise<SandboxInfo[]>;

  exec(id: string, command: string, opts?: ExecOptions): Promise<ExecResult>;
  /** Run an argv, handing its output to `sinks` as it comes (compatibility surfaces stream it). */
  execStream(
    id: string,
    argv: string[],
    opts: StreamExecOptions,
    sinks: OutputSinks,
  ): Promise<StreamExecResult>;
  startBackground(
    id: string,
    command: string,
    opts?: { cwd?: string; env?: Record<string, string> },
  ): Promise<string>;
  listBackground(id: string): Promise<BackgroundProcess[]>;
  getBackground(id: string, execId: string, query?: BackgroundLogsQuery): Promise<BackgroundDetail>;
  killBackground(id: string, execId: string, graceSeconds?: number): Promise<void>;

  writeFile(id: string, path: string, data: Uint8Array): Promise<void>;
  readFile(id: string, path: string): Promise<Buffer>;
  listDir(id: string, path: string): Promise<FileEntry[]>;
  remove(id: string, path: string, opts?: { recursive?: boolean }): Promise<void>;
  move(id: string, from: string, to: string): Promise<void>;
  mkdir(id: string, path: string): Promise<void>;
  /** All or nothing: a patch that does not apply fails with `PatchFailed` and changes nothing. */
  applyPatch(id: string, diff: string, opts?: { cwd?: string }): Promise<{ files: string[] }>;

  /** CPU, memory and disk the running sandbox uses now. */
  usage(id: string): Promise<SandboxUsage>;

  setNetworkPolicy(id: string, policy: NetworkPolicy): Promise<void>;
  addressOf(id: string): Promise<string>;
  /** The running sandbox's cgroup counters (`InvalidState` when it is not running). */
  cgroupStats(id: string): Promise<SandboxCounters>;
  /** The host's address on the sandbox network (set up if needed): where host services listen. */
  hostAddress(): Promise<string>;
  /** Let every sandbox reach this TCP port of the host at hostAddress() (the LLM gateway, the box API); nothing else. */
  openHostPort(port: number): Promise<void>;
  closeHostPort(port: number): Promise<void>;
  /**
   * Forward a host port to a port of this sandbox in the kernel (nftables DNAT); idempotent. False
   * when the bind address cannot be served that way (the caller relays instead).
   */
  forwardPort(id: string, f: RawForward): Promise<boolean>;
  unforwardPort(f: Omit<RawForward, 'port'>): Promise<void>;
  /** Whether forwarded traffic reached or left this sandbox lately (activity for the idle clock). */
  forwardedRecently(id: string): Promise<boolean>;
  /** Stop using host resources owned by this instance object (timers); sandboxes keep running. */
  close(): Promise<void>;
}

export interface RawForward {
  protocol: 'tcp' | 'udp';
  /** The host address of the public port; 0.0.0.0 for all of them. */
  bind: string;
  publicPort: number;
  /** The port inside the sandbox. */
  port: number;
}

export type SandboxErrorCode =
  | 'NotFound'
  | 'AlreadyExists'
  | 'InvalidState'
  | 'InvalidInput'
  | 'FileNotFound'
  | 'NotADirectory'
  | 'IsADirectory'
  | 'DirectoryNotEmpty'
  | 'PatchFailed'
  | 'SnapshotInUse'
  | 'TemplateBuildFailed'
  | 'HostUnsupported'
  | 'Internal';

export class SandboxRuntimeError extends Error {
  constructor(
    readonly code: SandboxErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'SandboxRuntimeError';
  }
}
