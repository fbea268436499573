// A scoped key's `sandboxCpuSeconds` cap: the CPU time of the sandboxes it created (their cgroup's
// counter, the one usage and E2B's metrics read) is added to the key's monthly counter (`key:<id>`,
// in milliseconds) when a sandbox is suspended or deleted, every minute while it runs, and just before
// the key starts more work (create, exec, resume), which is refused with 402 KeyCapReached once the
// cap is reached. A row keeps what its current cgroup has already counted (`cpu_counted_usec`); a new
// cgroup (a resume from the files, a restart) starts that at 0.
import type { Principal } from '../../platform/auth.js';
import type { Usage } from '../../platform/usage.js';
import type { SandboxesRepo, SandboxRow } from './repo.js';
import type { SandboxRuntime } from './runtime/driver.js';

/** What the meter reads of the sandboxes' core (service.ts): its rows, its node, its runtime. */
export interface MeterHost {
  repo: Pick<SandboxesRepo, 'keyedRunning' | 'moveCpuCounted'>;
  placement: { here: string };
  runtime: Pick<SandboxRuntime, 'cgroupStats'>;
  deps: { usage: Pick<Usage, 'addToKey' | 'assertKeyCaps'>; log: { warn(obj: object, msg: string): void } };
}

/** How often running sandboxes of capped keys are read (NUBE_KEY_CPU_METER_MS; tests shorten it). */
const PERIOD_MS = Number(process.env.NUBE_KEY_CPU_METER_MS) || 60_000;

export class CpuMeter {
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;

  constructor(private readonly core: MeterHost) {}

  /** The periodic read of this node's running sandboxes that a key created. */
  start(): void {
    this.timer ??= setInterval(() => {
      this.sweeping ??= this.sweep()
        .catch((e: unknown) => this.core.deps.log.warn({ err: e }, 'metering sandbox CPU for keys failed'))
        .finally(() => {
          this.sweeping = undefined;
        });
    }, PERIOD_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.sweeping;
  }

  private async sweep(): Promise<void> {
    for (const row of await this.core.repo.keyedRunning(this.core.placement.here)) await this.meter(row);
  }

  /**
   * Adds what the sandbox's cgroup used since it was last counted to its key's counter. The row's
   * counted value moves only if nobody else moved it meanwhile (another read, another node's sweep):
   * each microsecond is counted once.
   */
  async meter(row: SandboxRow): Promise<void> {
    if (!row.key_id || row.status !== 'running' || row.node_id !== this.core.placement.here) return;
    const st = await this.core.runtime.cgroupStats(row.runtime_id).catch(() => null);
    if (!st) return;
    const counted = row.cpu_counted_usec ?? 0;
    // A counter below what was counted is a new cgroup (or, on cgroup v1, processes that ended).
    const base = st.cpuUsec < counted ? 0 : counted;
    const ms = Math.floor((st.cpuUsec - base) / 1000);
    if (ms <= 0 && base === counted) return;
    const next = base + ms * 1000;
    if (!(await this.core.repo.moveCpuCounted(row.id, counted, next))) return;
    row.cpu_counted_usec = next;
    await this.core.deps.usage.addToKey(row.key_id, 'sandboxCpuMs', ms);
  }

  /**
   * 402 KeyCapReached when the caller's key has used its sandboxCpuSeconds cap: its running sandboxes on
   * this node are read first, so CPU burnt a moment ago counts (other nodes' count at their next sweep).
   */
  async assertCap(p: Principal): Promise<void> {
    if (p.scope?.caps?.sandboxCpuSeconds === undefined || !p.credentialId) return;
    for (const row of await this.core.repo.keyedRunning(this.core.placement.here, p.credentialId)) await this.meter(row);
    await this.core.deps.usage.assertKeyCaps(p, ['sandboxCpuSeconds']);
  }
}
