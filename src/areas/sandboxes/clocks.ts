// The spec's timeout semantics on durable jobs (they survive a restart of nube):
// - `expires_at`: when the timeout fires. Without an idle clock it is absolute (creation or wake +
//   timeoutSeconds, pushed by `extend`); with one (idleTtlSeconds from `idle`, or timeoutSeconds when
//   created with suspendOnIdle) every activity pushes it to now + the idle TTL.
// - At expiry: suspendOnIdle -> suspended (TTL paused), else destroyed.
// - `hard_expires_at` (hardTtlSeconds from `idle`): destroyed regardless, even while suspended.
// - `memory_kept` (suspended with its processes frozen in the host's memory): at suspended_at + the
//   operator's hold time its memory is given back (its files stay).
// One job per sandbox (key `sandbox-ttl:<id>`), due at the earliest deadline. Activity only moves the
// deadline later, so it writes the new deadline and leaves the job alone: the job, firing early,
// finds the deadline moved and re-arms itself. That keeps exec round trips free of job-table writes.
import type { PlatformDeps } from '../deps.js';
import type { SandboxesRepo, SandboxRow } from './repo.js';

/** What the clocks need of the sandboxes service: its rows, the job queue, and the two ends of a clock. */
export interface ClockHost {
  readonly repo: SandboxesRepo;
  readonly deps: Pick<PlatformDeps, 'jobs' | 'nodes' | 'config'>;
  destroy(id: string, reason: string): Promise<void>;
  suspend(id: string, reason: string): Promise<SandboxRow>;
  releaseMemory(id: string, reason: string): Promise<void>;
  /** Activity nube's API did not see (traffic through kernel-forwarded raw ports). */
  activeLately(r: SandboxRow): Promise<boolean>;
}

export const TTL_JOB = 'sandboxes.ttl';
/** Activity writes the idle deadline when it moved by at least this much. */
const TOUCH_GRANULARITY_MS = 1000;

export class Clocks {
  constructor(private readonly core: ClockHost) {}

  /** The inactivity TTL in ms, or null when the timeout is absolute. */
  idleTtlMs(r: SandboxRow): number | null {
    if (r.idle_ttl_seconds !== null) return r.idle_ttl_seconds * 1000;
    return r.suspend_on_idle === 1 ? r.timeout_seconds * 1000 : null;
  }

  /** A failed sandbox keeps its timeout: the record goes when it passes. */
  deadline(r: SandboxRow): number | null {
    const timed = r.status === 'running' || r.status === 'failed';
    const d = [timed ? r.expires_at : null, r.hard_expires_at, this.memoryReleaseAt(r)].filter(
      (x): x is number => x !== null,
    );
    return d.length ? Math.min(...d) : null;
  }

  /** When a sandbox suspended with its memory gives it back; null for any other. */
  private memoryReleaseAt(r: SandboxRow): number | null {
    if (r.status !== 'suspended' || r.memory_kept !== 1) return null;
    return (r.suspended_at ?? Date.now()) + this.core.deps.config.sandboxes.memoryHoldMs;
  }

  async arm(r: SandboxRow): Promise<void> {
    const key = `sandbox-ttl:${r.id}`;
    const at = this.deadline(r);
    if (at === null) {
      await this.core.deps.jobs.cancel({ key });
      return;
    }
    await this.core.deps.jobs.enqueue(this.core.deps.nodes.jobType(TTL_JOB, r.node_id), { id: r.id }, { runAt: at, key, onDuplicate: 'replace' });
  }

  /** Activity (API calls on the sandbox, exec, proxied traffic) re-arms the idle clock. */
  async touch(r: SandboxRow): Promise<void> {
    const idle = this.idleTtlMs(r);
    if (idle === null || r.status !== 'running') return;
    const next = Date.now() + idle;
    if (r.expires_at !== null && next - r.expires_at < TOUCH_GRANULARITY_MS) return;
    r.expires_at = next;
    await this.core.repo.update(r.id, { expires_at: next });
  }

  /** The job: act on whichever deadline has passed, or re-arm for the one that moved. */
  async fire(id: string): Promise<void> {
    const r = await this.core.repo.get(id);
    if (!r) return;
    const now = Date.now();
    if (r.hard_expires_at !== null && r.hard_expires_at <= now) {
      await this.core.destroy(id, 'hardTtl');
      return;
    }
    const release = this.memoryReleaseAt(r);
    if (release !== null && release <= now) {
      await this.core.releaseMemory(id, 'hold time');
      return;
    }
    if (r.status === 'failed' && r.expires_at !== null && r.expires_at <= now) {
      await this.core.destroy(id, 'timeout');
      return;
    }
    if (r.status === 'running' && r.expires_at !== null && r.expires_at <= now) {
      // An idle deadline passes only when no forwarded traffic came either.
      if (this.idleTtlMs(r) !== null && (await this.core.activeLately(r))) {
        await this.touch(r);
        await this.arm(r);
        return;
      }
      if (r.suspend_on_idle === 1) await this.core.suspend(id, 'timeout');
      else await this.core.destroy(id, 'timeout');
      return;
    }
    await this.arm(r);
  }
}
