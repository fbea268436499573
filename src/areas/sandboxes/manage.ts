// Actions that change how a sandbox lives: extend, suspend, resume, idle, bootstrap, expose, network
// policy; and the ones that describe it: runtime, logs.
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { driverPolicy, policyRefusals } from './runtime/protected-ranges.js';
import { type Bootstrap, bootstrapOf, neverExpires, type SandboxesCore } from './service.js';
import { rt } from './views.js';

const DEFAULT_BOOTSTRAP_TIMEOUT_S = 300;

/** 400 ProtectedRange naming every allowOut entry that would open a private range, the host or other sandboxes. */
export async function refuseProtected(
  c: { bridge: { cidr: string }; privateAllow: Parameters<typeof policyRefusals>[1]['admitted'] },
  allowOut: readonly string[],
  path: (string | number)[],
): Promise<void> {
  const refused = await policyRefusals(allowOut, { bridgeSubnet: c.bridge.cidr, admitted: c.privateAllow });
  if (!refused.length) return;
  throw errors.badRequest(
    `allowOut may not open ${refused.map((x) => x.entry).join(', ')}: sandboxes never reach private, loopback or link-local addresses, nor the host and other sandboxes, unless the operator admits a range (NUBE_SANDBOX_PRIVATE_ALLOW)`,
    refused.map((x) => ({ path: [...path, x.index], message: x.reason, code: 'ProtectedRange' })),
    'ProtectedRange',
  );
}

export class Manage {
  constructor(private readonly core: SandboxesCore) {}

  async extend(p: Principal, id: string, extendSeconds?: number) {
    return this.core.locked(id, async () => {
      const r = await this.core.usable(p, id);
      if (neverExpires(r)) return { ok: true, status: r.status, expiresAt: null, remainingSeconds: null };
      const add = (extendSeconds ?? r.timeout_seconds) * 1000;
      const now = Date.now();
      if (r.status === 'suspended') {
        const remaining = (r.remaining_ms ?? 0) + add;
        this.core.assertSession(p, Math.ceil(remaining / 1000));
        await this.core.repo.update(id, { remaining_ms: remaining });
        return { ok: true, status: r.status, expiresAt: null, remainingSeconds: Math.ceil(remaining / 1000) };
      }
      const expires = Math.max(r.expires_at ?? now, now) + add;
      this.core.assertSession(p, Math.ceil((expires - now) / 1000));
      await this.core.repo.update(id, { expires_at: expires });
      // Later than before: the pending job re-arms itself when it fires.
      return { ok: true, status: r.status, expiresAt: new Date(expires).toISOString() };
    });
  }

  /**
   * Sets the timeout to end `seconds` from now, earlier or later than it was (E2B's setTimeout; the
   * spec's extend only adds). A suspended sandbox keeps that much time for when it wakes.
   */
  async setTimeout(p: Principal, id: string, seconds: number) {
    return this.core.locked(id, async () => {
      const r = await this.core.usable(p, id);
      if (neverExpires(r)) return { expiresAt: null };
      this.core.assertSession(p, seconds);
      if (r.status === 'suspended') {
        await this.core.repo.update(id, { remaining_ms: seconds * 1000 });
        return { expiresAt: null };
      }
      const expires = Date.now() + seconds * 1000;
      await this.core.repo.update(id, { expires_at: expires });
      // Earlier than before: the pending job must be moved to the new deadline.
      await this.core.clocks.arm({ ...r, expires_at: expires });
      return { expiresAt: new Date(expires).toISOString() };
    });
  }

  async idle(p: Principal, id: string, b: { suspendOnIdle: boolean; idleTtlSeconds?: number; hardTtlSeconds?: number }) {
    return this.core.locked(id, async () => {
      const r = await this.core.usable(p, id);
      if (neverExpires(r)) throw errors.conflict("a machine's box never expires: it has no idle or hard TTL", 'InvalidState');
      const now = Date.now();
      const idleTtl = b.idleTtlSeconds ?? null;
      if (idleTtl !== null) this.core.assertSession(p, idleTtl);
      if (b.hardTtlSeconds !== undefined) this.core.assertSession(p, b.hardTtlSeconds);
      const patch = {
        suspend_on_idle: b.suspendOnIdle ? 1 : 0,
        idle_ttl_seconds: idleTtl ?? r.idle_ttl_seconds,
        ...(idleTtl !== null && r.status === 'running' ? { expires_at: now + idleTtl * 1000 } : {}),
        ...(idleTtl !== null && r.status === 'suspended' ? { remaining_ms: idleTtl * 1000 } : {}),
        ...(b.hardTtlSeconds !== undefined
          ? { hard_ttl_seconds: b.hardTtlSeconds, hard_expires_at: now + b.hardTtlSeconds * 1000 }
          : {}),
      };
      await this.core.repo.update(id, patch);
      const fresh = { ...r, ...patch };
      // The deadline may have moved earlier: re-arm the job.
      await this.core.clocks.arm(fresh);
      return { ok: true, sandbox: this.core.view(fresh) };
    });
  }

  async bootstrap(p: Principal, id: string, b: { script: string; mode?: 'async' | 'blocking'; timeoutSeconds?: number }) {
    const r = await this.core.usable(p, id);
    await this.core.clocks.touch(r);
    const value: Bootstrap | null =
      b.script === ''
        ? null
        : { script: b.script, mode: b.mode ?? 'blocking', timeoutSeconds: b.timeoutSeconds ?? DEFAULT_BOOTSTRAP_TIMEOUT_S };
    // The template's start command (and working dir) stays whatever the caller sets.
    const template = bootstrapOf(r)?.template;
    const stored = value || template ? { ...value, ...(template ? { template } : {}) } : null;
    await this.core.repo.update(id, { bootstrap: stored ? JSON.stringify(stored) : null });
    await this.core.event(id, value ? 'bootstrap-set' : 'bootstrap-cleared');
    return { ok: true, bootstrap: value };
  }

  async suspend(p: Principal, id: string, keepMemory?: boolean) {
    await this.core.usable(p, id);
    const r = await this.core.suspend(id, 'action', keepMemory);
    return { ok: true, sandbox: this.core.view(r) };
  }

  async resume(p: Principal, id: string, env?: Record<string, string>) {
    await this.core.usable(p, id);
    await this.core.cpu.assertCap(p);
    const { row, bootstrap } = await this.core.resume(id, env);
    return { ok: true, sandbox: this.core.view(row), bootstrap };
  }

  async expose(p: Principal, id: string, port: number) {
    return this.core.locked(id, async () => {
      const r = await this.core.usable(p, id);
      await this.core.clocks.touch(r);
      const ports = JSON.parse(r.exposed_ports) as number[];
      if (!ports.includes(port)) {
        ports.push(port);
        ports.sort((a, b) => a - b);
        await this.core.repo.update(id, { exposed_ports: JSON.stringify(ports) });
      }
      const url = this.core.view({ ...r, exposed_ports: JSON.stringify([port]) }).urls[0]!.url;
      return { port, url };
    });
  }

  /** API body to driver policy: `internet: false` is a deny of everything that `allowOut` punches through. */
  async networkPolicy(p: Principal, id: string, b: { internet?: boolean; allowOut?: string[]; denyOut?: string[] }) {
    const r = await this.core.started(p, id);
    await refuseProtected(this.core.deps.config.sandboxes, b.allowOut ?? [], ['body', 'allowOut']);
    await this.core.clocks.touch(r);
    const policy = driverPolicy(b);
    await rt(this.core.runtime.setNetworkPolicy(r.runtime_id, policy));
    await this.core.repo.update(id, { network_policy: JSON.stringify(policy) });
    return { ok: true, internet: b.internet ?? true, allowOut: policy.allow, denyOut: b.denyOut ?? [] };
  }

  async runtimeInfo(p: Principal, id: string) {
    const r = await this.core.started(p, id);
    await this.core.clocks.touch(r);
    const info = await this.core.runtime.get(r.runtime_id);
    if (!info) throw errors.conflict(`sandbox is ${r.status}`, 'InvalidState');
    return {
      id: r.id,
      status: r.status,
      driver: this.core.runtime.kind,
      template: info.template,
      templateBuild: info.templateBuild,
      layers: info.layers.length,
      limits: { cpus: info.limits.cpus, memoryMB: info.limits.memoryMb, pids: info.limits.pids, diskMB: info.diskMb },
      address: info.address,
      hostname: r.runtime_id,
      uptimeSeconds: r.status === 'running' ? Math.round((Date.now() - r.started_at) / 1000) : 0,
      createdAt: new Date(r.created_at).toISOString(),
      startedAt: new Date(r.started_at).toISOString(),
    };
  }

  /** Lifecycle events (created, suspended, resumed, bootstrap runs, timers) and the last bootstrap output. */
  async logs(p: Principal, id: string) {
    const r = await this.core.own(p, id);
    await this.core.clocks.touch(r);
    const events = JSON.parse(r.events) as { event: string; execId?: string }[];
    const lastAsync = [...events].reverse().find((e) => e.event === 'bootstrap' && e.execId);
    let bootstrap = null;
    if (lastAsync?.execId) {
      const d = await this.core.runtime.getBackground(r.runtime_id, lastAsync.execId).catch(() => null);
      if (d) bootstrap = { execId: d.execId, state: d.state, exitCode: d.exitCode, stdout: d.stdout, stderr: d.stderr };
    }
    return { events, bootstrap };
  }
}
