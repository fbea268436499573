// expose-raw / unexpose-raw: a host port from the configured range forwarded to a port inside the
// sandbox. While the sandbox runs, the kernel forwards (nftables DNAT, driver.forwardPort); nube's relay
// listener holds the port meanwhile and serves it alone while the sandbox is suspended, so traffic
// wakes it (resume puts the DNAT rule back). docs/decisions.md says why. Rows are durable; listeners
// and rules are reopened from them at start and removed, with their rows, when the sandbox ends.
import type { Principal } from '../../../platform/auth.js';
import { errors } from '../../../platform/errors.js';
import type { PlanName } from '../../../platform/plans.js';
import { KeyedLock } from '../runtime/keyed-lock.js';
import type { SandboxesCore } from '../service.js';
import { openRawListener, type RawListener, type RawTarget } from './raw-listener.js';
import { type RawPortRow, RawPortsRepo } from './raw-ports-repo.js';

export type RawProtocol = 'tcp' | 'udp';

/** Raw exposures an owner may hold at once, across their sandboxes. */
export const RAW_PORTS_PER_PLAN: Record<PlanName, number> = { byte: 2, mega: 10, tera: 50 };

export interface RawExposure {
  host: string;
  publicPort: number;
  protocol: RawProtocol;
  port: number;
}

const keyOf = (publicPort: number, protocol: string) => `${protocol}/${publicPort}`;

export class RawPorts {
  readonly repo: RawPortsRepo;
  private readonly listeners = new Map<string, RawListener>();
  private readonly lock = new KeyedLock();

  constructor(private readonly core: SandboxesCore) {
    this.repo = new RawPortsRepo(core.repo.db);
    core.destroyHooks.push((row) => this.freeSandbox(row.id));
    core.suspendHooks.push((row) => this.unforwardSandbox(row.id));
    core.resumeHooks.push((row) => this.forwardSandbox(row));
    core.activityProbes.push(async (row) => (await this.repo.ofSandbox(row.id)).length > 0 && this.core.runtime.forwardedRecently(row.runtime_id));
  }

  private get cfg() {
    return this.core.deps.config.sandboxes.raw;
  }

  private view(r: RawPortRow): RawExposure {
    return { host: this.cfg.host, publicPort: r.public_port, protocol: r.protocol as RawProtocol, port: r.port };
  }

  async list(p: Principal, id: string): Promise<{ rawPorts: RawExposure[] }> {
    await this.core.own(p, id);
    return { rawPorts: (await this.repo.ofSandbox(id)).map((r) => this.view(r)) };
  }

  /** Idempotent: the same (port, protocol) answers the host port it already has. */
  async expose(p: Principal, id: string, port: number, protocol: RawProtocol): Promise<RawExposure> {
    // One allocation at a time in this process: the free-port scan and the insert must not interleave.
    return this.lock.run('alloc', async () => {
      const r = await this.core.usable(p, id);
      await this.core.clocks.touch(r);
      const had = await this.repo.get(id, port, protocol);
      if (had) {
        if (!this.listeners.has(keyOf(had.public_port, protocol))) await this.listen(had);
        if (r.status === 'running') await this.forward(had, r.runtime_id);
        return this.view(had);
      }
      const limit = RAW_PORTS_PER_PLAN[p.plan];
      const count = await this.repo.countFor(p.ownerId);
      if (count >= limit) {
        throw errors.paymentRequired(
          `your plan allows ${limit} raw port exposures at once; unexpose one first`,
          'RawPortLimit',
          { limit, current: count },
        );
      }
      const row: RawPortRow = { sandbox_id: id, owner_id: p.ownerId, port, protocol, public_port: 0, created_at: Date.now() };
      row.public_port = await this.allocate(row);
      try {
        await this.repo.insert(row);
        // Not yet running (starting, suspended): the relay serves until the sandbox runs.
        if (r.status === 'running') await this.forward(row, r.runtime_id);
      } catch (e) {
        await this.stop(row.public_port, protocol);
        await this.repo.delete(id, port, protocol).catch(() => {});
        throw e;
      }
      await this.core.event(id, 'expose-raw', { port, protocol, publicPort: row.public_port });
      return this.view(row);
    });
  }

  async unexpose(p: Principal, id: string, port: number, protocol: RawProtocol) {
    return this.lock.run('alloc', async () => {
      await this.core.own(p, id);
      const had = await this.repo.get(id, port, protocol);
      if (had) {
        await this.repo.delete(id, port, protocol);
        await this.stop(had.public_port, protocol);
        await this.core.event(id, 'unexpose-raw', { port, protocol, publicPort: had.public_port });
      }
      return { ok: true, port, protocol, freed: had ? had.public_port : null };
    });
  }

  /** The first host port of the range that is neither recorded nor held by another program. */
  private async allocate(row: RawPortRow): Promise<number> {
    const used = await this.repo.usedPorts(row.protocol);
    for (let port = this.cfg.first; port <= this.cfg.last; port++) {
      if (used.has(port)) continue;
      try {
        await this.listen({ ...row, public_port: port });
        return port;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'EADDRINUSE' || (e as NodeJS.ErrnoException).code === 'EACCES') continue;
        throw e;
      }
    }
    throw errors.unavailable(`no free host port in ${this.cfg.first}-${this.cfg.last} (NUBE_RAW_PORTS)`);
  }

  private async listen(row: RawPortRow): Promise<void> {
    const l = await openRawListener({
      protocol: row.protocol as RawProtocol,
      bind: this.cfg.bind,
      publicPort: row.public_port,
      resolve: () => this.target(row.sandbox_id, row.port),
      onError: (e) => this.core.deps.log.warn({ err: e, sandbox: row.sandbox_id }, 'raw port forwarding failed'),
    });
    this.listeners.set(keyOf(row.public_port, row.protocol), l);
  }

  /** The kernel takes the port over from the relay (when the bind address allows). */
  private async forward(row: RawPortRow, runtimeId: string): Promise<void> {
    await this.core.runtime.forwardPort(runtimeId, {
      protocol: row.protocol as RawProtocol,
      bind: this.cfg.bind,
      publicPort: row.public_port,
      port: row.port,
    });
  }

  private async unforward(row: RawPortRow): Promise<void> {
    await this.core.runtime.unforwardPort({ protocol: row.protocol as RawProtocol, bind: this.cfg.bind, publicPort: row.public_port });
  }

  private async forwardSandbox(sbx: { id: string; runtime_id: string }): Promise<void> {
    for (const r of await this.repo.ofSandbox(sbx.id)) await this.forward(r, sbx.runtime_id);
  }

  /** Suspended: the relay listener answers (and wakes the sandbox). */
  private async unforwardSandbox(sandboxId: string): Promise<void> {
    for (const r of await this.repo.ofSandbox(sandboxId)) await this.unforward(r);
  }

  private async stop(publicPort: number, protocol: string): Promise<void> {
    const k = keyOf(publicPort, protocol);
    await this.core.runtime.unforwardPort({ protocol: protocol as RawProtocol, bind: this.cfg.bind, publicPort });
    const l = this.listeners.get(k);
    this.listeners.delete(k);
    await l?.close();
  }

  /** Where traffic for this exposure goes now; null when the sandbox is gone or cannot run. */
  private async target(sandboxId: string, port: number): Promise<RawTarget | null> {
    let row = await this.core.repo.get(sandboxId);
    if (!row) return null;
    const woke = row.status !== 'running';
    try {
      // Traffic is activity: a suspended sandbox wakes, the idle clock re-arms.
      row = await this.core.ensureRunning(row);
      await this.core.clocks.touch(row);
      // The relay got traffic of a running sandbox (it was still starting when exposed, or a rule was lost):
      // hand the port to the kernel from the next connection on.
      if (!woke) await this.forwardSandbox(row);
      return { address: await this.core.runtime.addressOf(row.runtime_id), port, woke };
    } catch (e) {
      this.core.deps.log.warn({ err: e, sandbox: sandboxId }, 'raw port: sandbox not available');
      return null;
    }
  }

  /** The sandbox ended: its host ports are free again. */
  async freeSandbox(sandboxId: string): Promise<void> {
    for (const r of await this.repo.ofSandbox(sandboxId)) await this.stop(r.public_port, r.protocol);
    await this.repo.deleteSandbox(sandboxId);
  }

  /** At start: reopen every recorded exposure (DNAT for running sandboxes); rows of sandboxes that no longer exist go. */
  async restore(): Promise<void> {
    for (const r of await this.repo.all()) {
      const sbx = await this.core.repo.get(r.sandbox_id);
      // A nube that crashed left its rules in the kernel: they go unless the sandbox runs.
      if (!sbx) {
        await this.unforward(r).catch(() => {});
        await this.repo.deleteSandbox(r.sandbox_id);
        continue;
      }
      // Another node's sandbox: that node listens for it.
      if (sbx.node_id && sbx.node_id !== this.core.placement.here) continue;
      try {
        await this.listen(r);
        if (sbx.status === 'running') await this.forward(r, sbx.runtime_id);
        else await this.unforward(r);
      } catch (e) {
        this.core.deps.log.error({ err: e, sandbox: r.sandbox_id, publicPort: r.public_port }, 'raw port could not be reopened');
      }
    }
  }

  /** nube stops: its ports close, in the kernel too (restore() opens them again). */
  async close(): Promise<void> {
    for (const r of await this.repo.all().catch(() => [])) {
      if (this.listeners.has(keyOf(r.public_port, r.protocol))) await this.unforward(r).catch(() => {});
    }
    await Promise.all([...this.listeners.values()].map((l) => l.close()));
    this.listeners.clear();
  }
}
