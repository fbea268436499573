// The warm pool: per template in use (and per derived template in use), sandboxes already started
// (overlay mounted, netns and veth up, cgroups made, init running) with the driver's defaults, handed
// out by create. The caller's parts are applied at hand-out (runtime.claim: env, limits, network
// policy; the service: record, metadata, timers). A pooled sandbox's id (and so its hostname) is drawn
// when it is started, and nobody has seen it before it is handed out; a sandbox handed out never comes
// back to the pool, so nothing of one holder can reach the next. Pooled sandboxes have no record: a nube
// that stops destroys them (close), one that crashed has them destroyed at its next start (reconcile
// destroys every driver sandbox without a record).
import { writeFileSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import type { SandboxPoolConfig } from '../../platform/config-shape.js';
import { newId } from '../../platform/ids.js';
import type { SandboxRuntime } from './runtime/driver.js';

export interface PoolSource {
  template: string;
  /** A derived template's snapshot: its pool is separate from the bare template's. */
  snapshot?: string;
}

export interface PooledSandbox {
  /** The record id the sandbox is handed out under (its runtime id and hostname derive from it). */
  id: string;
  runtimeId: string;
}

interface KeyState {
  source: PoolSource;
  ready: PooledSandbox[];
  /** Creation times (ms) of the last minute: the pool's size follows them. */
  creations: number[];
  lastUse: number;
  filling: boolean;
  /** Bumped by drain: a sandbox started for an older generation is destroyed, not pooled. */
  generation: number;
  /**
   * Drained (its source is being deleted): a refill scheduled before the drain never starts, so no
   * sandbox comes to stand on a snapshot being deleted. A later take starts a fresh state.
   */
  retired: boolean;
  failedUntil: number;
  hits: number;
  misses: number;
}

export interface PoolKeyStatus {
  key: string;
  ready: number;
  target: number;
  /** A refill is under way (a sandbox being started for this source). */
  filling: boolean;
  hits: number;
  misses: number;
}

export interface PoolStatus {
  pid: number;
  driver: string;
  size: number;
  max: number;
  /** How many pooled sandboxes the memory cap allows now, all templates together. */
  memoryCap: number;
  keys: PoolKeyStatus[];
  at: string;
}

type Log = { warn(obj: Record<string, unknown>, msg: string): void; info(obj: Record<string, unknown>, msg: string): void };

/** A key with no creation for this long drops to an empty pool (its sandboxes are destroyed). */
const IDLE_KEY_MS = 10 * 60_000;
/** Creations within this window are what the pool tries to have ready at once (a burst). */
const BURST_WINDOW_MS = 10_000;
const RETRY_AFTER_FAILURE_MS = 30_000;
const REFILL_DELAY_MS = 250;

export function sandboxIds(): PooledSandbox {
  const id = newId('sbx');
  return { id, runtimeId: id.replace('_', '-') };
}

export class WarmPool {
  private readonly keys = new Map<string, KeyState>();
  private readonly inFlight = new Set<Promise<void>>();
  private closed = false;
  private statusTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly runtime: SandboxRuntime,
    private readonly cfg: SandboxPoolConfig,
    private readonly log: Log,
    /** Where the pool's state is written for `nube doctor` (a separate process). */
    private readonly statusFile: string,
    /** What one idle pooled sandbox costs the host (bench/sandboxes measures it), for the memory cap. */
    private readonly idleSandboxMb: number,
  ) {}

  get enabled(): boolean {
    return this.cfg.size > 0 && !this.closed;
  }

  static key(src: PoolSource): string {
    return src.snapshot ? `snapshot:${src.snapshot}` : `template:${src.template}`;
  }

  private state(src: PoolSource): KeyState {
    const key = WarmPool.key(src);
    let k = this.keys.get(key);
    if (!k) {
      k = { source: src, ready: [], creations: [], lastUse: 0, filling: false, generation: 0, retired: false, failedUntil: 0, hits: 0, misses: 0 };
      this.keys.set(key, k);
    }
    return k;
  }

  /**
   * A started sandbox for this source, or null (the caller starts one itself). Either way the creation
   * is counted, so the pool's size follows the creation rate; the caller then calls `refill`.
   */
  take(src: PoolSource): PooledSandbox | null {
    if (!this.enabled) return null;
    const k = this.state(src);
    const now = Date.now();
    k.lastUse = now;
    k.creations = k.creations.filter((t) => now - t < 60_000);
    k.creations.push(now);
    const hit = k.ready.shift() ?? null;
    if (hit) k.hits++;
    else k.misses++;
    return hit;
  }

  /** A taken sandbox no caller touched (its create was refused before the claim) goes back first in line. */
  giveBack(src: PoolSource, sandbox: PooledSandbox): void {
    const k = this.state(src);
    k.ready.unshift(sandbox);
    k.hits--;
  }

  /**
   * Refill a source's pool in the background. The service calls it once the create that took from
   * the pool has answered: a refill started at once would compete with that create for the CPU.
   */
  refill(src: PoolSource): void {
    if (!this.enabled) return;
    const k = this.state(src);
    // The caller's first calls (an exec right after create) go first; the refill a moment later.
    setTimeout(() => this.fill(k), REFILL_DELAY_MS).unref();
  }

  /** Start filling a source's pool now (a template built at start, before its first create). */
  warm(src: PoolSource): void {
    if (!this.enabled) return;
    const k = this.state(src);
    k.lastUse = Date.now();
    this.fill(k);
  }

  /** Sandboxes this source should have ready now. */
  target(k: KeyState, now = Date.now()): number {
    if (now - k.lastUse > IDLE_KEY_MS) return 0;
    const burst = k.creations.filter((t) => now - t < BURST_WINDOW_MS).length;
    return Math.min(this.cfg.max, Math.max(this.cfg.size, burst));
  }

  /** Pooled sandboxes (all sources) the host's available memory allows. */
  async memoryCap(): Promise<number> {
    const text = await readFile('/proc/meminfo', 'utf8').catch(() => '');
    const kb = Number(/^MemAvailable:\s+(\d+)/m.exec(text)?.[1] ?? 0);
    return Math.floor((kb / 1024) * (this.cfg.memoryPercent / 100) / Math.max(1, this.idleSandboxMb));
  }

  private pooled(): number {
    let n = 0;
    for (const k of this.keys.values()) n += k.ready.length;
    return n;
  }

  private fill(k: KeyState): void {
    if (k.filling || this.closed || k.retired) return;
    k.filling = true;
    const job = this.fillLoop(k)
      .catch((e: unknown) => this.log.warn({ err: e, pool: WarmPool.key(k.source) }, 'warm pool refill failed'))
      .finally(() => {
        k.filling = false;
        this.inFlight.delete(job);
        this.writeStatus();
      });
    this.inFlight.add(job);
  }

  /** One sandbox at a time per source: refilling must not starve the requests it serves. */
  private async fillLoop(k: KeyState): Promise<void> {
    while (!this.closed && !k.retired && Date.now() >= k.failedUntil && k.ready.length < this.target(k)) {
      if (this.pooled() >= (await this.memoryCap())) return;
      const ids = sandboxIds();
      const generation = k.generation;
      try {
        await this.runtime.create({ id: ids.runtimeId, template: k.source.template, snapshot: k.source.snapshot });
        // One exec proves it answers, and leaves the spawner a session prepared for its first real one.
        const probe = await this.runtime.exec(ids.runtimeId, 'true', { timeoutMs: 30_000 });
        if (probe.exitCode !== 0) throw new Error(`a pooled sandbox answered exit ${probe.exitCode} to \`true\`: ${probe.stderr}`);
      } catch (e) {
        k.failedUntil = Date.now() + RETRY_AFTER_FAILURE_MS;
        await this.runtime.destroy(ids.runtimeId).catch(() => {});
        throw e;
      }
      if (this.closed || k.retired || generation !== k.generation) {
        await this.runtime.destroy(ids.runtimeId).catch(() => {});
        return;
      }
      k.ready.push(ids);
      this.writeStatus();
    }
    // Pools of sources no longer in use give their sandboxes back.
    for (const [key, other] of this.keys) {
      if (other !== k && this.target(other) === 0 && other.ready.length && !other.filling) {
        this.log.info({ pool: key }, 'warm pool of a source no longer in use emptied');
        await this.drain(other.source);
      }
    }
  }

  /** Destroy a source's pooled sandboxes (its derived template is being deleted); later fills are dropped. */
  async drain(src: PoolSource): Promise<void> {
    const k = this.keys.get(WarmPool.key(src));
    if (!k) return;
    k.generation++;
    k.retired = true;
    this.keys.delete(WarmPool.key(src));
    const gone = k.ready.splice(0);
    for (const s of gone) await this.runtime.destroy(s.runtimeId).catch(() => {});
    // A sandbox being started for it now is destroyed when its start ends; wait for that too.
    while (k.filling) await new Promise((r) => setTimeout(r, 20));
    this.writeStatus();
  }

  async status(): Promise<PoolStatus> {
    const now = Date.now();
    return {
      pid: process.pid,
      driver: this.runtime.kind,
      size: this.cfg.size,
      max: this.cfg.max,
      memoryCap: await this.memoryCap(),
      keys: [...this.keys].map(([key, k]) => ({ key, ready: k.ready.length, target: this.target(k, now), filling: k.filling, hits: k.hits, misses: k.misses })),
      at: new Date(now).toISOString(),
    };
  }

  /** Coalesced: at most one write in flight, the last state wins. */
  private writeStatus(): void {
    if (this.statusTimer || this.closed) return;
    this.statusTimer = setTimeout(() => {
      this.statusTimer = null;
      void this.status()
        .then(async (s) => {
          await writeFile(`${this.statusFile}.tmp`, JSON.stringify(s, null, 2));
          await rename(`${this.statusFile}.tmp`, this.statusFile);
        })
        .catch(() => {});
    }, 50);
    this.statusTimer.unref();
  }

  /** Stop refilling and destroy every pooled sandbox (nube stops). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.statusTimer) clearTimeout(this.statusTimer);
    this.statusTimer = null;
    await Promise.allSettled([...this.inFlight]);
    for (const k of this.keys.values()) {
      for (const s of k.ready.splice(0)) await this.runtime.destroy(s.runtimeId).catch(() => {});
    }
    try {
      writeFileSync(this.statusFile, JSON.stringify({ pid: process.pid, stopped: new Date().toISOString(), keys: [] }));
    } catch {
      /* the data dir is gone (tests) */
    }
  }
}
