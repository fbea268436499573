// The sandboxes service handlers call: one object over the lifecycle core and the action groups, and
// the dispatch of POST /sandboxes/{id}/{action}.
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import type { PlatformDeps } from '../deps.js';
import { type SandboxAction, sandboxActionBodies } from './action-bodies.js';
import { Forks } from './forks.js';
import { Kernel } from './kernel.js';
import { Manage } from './manage.js';
import { RawPorts } from './networking/raw-ports.js';
import type { DomainClaims } from '../domains/claims.js';
import { SandboxDomains } from './networking/domains.js';
import { SshAccess } from './networking/ssh-access.js';
import { type PortExplainer, probeHttp } from './proxy.js';
import type { SandboxesRepo } from './repo.js';
import type { SandboxCounters, SandboxRuntime } from './runtime/driver.js';
import { bootstrapOf, type CreateInput, SandboxesCore } from './service.js';
import { rt } from './views.js';
import { parseBody, Workload } from './workload.js';
import type { SandboxVolume } from './volume-binder.js';

const LATER: Partial<Record<SandboxAction, string>> = {};

export class SandboxesService {
  readonly core: SandboxesCore;
  readonly work: Workload;
  readonly manage: Manage;
  readonly forks: Forks;
  readonly kernel: Kernel;
  readonly rawPorts: RawPorts;
  readonly ssh: SshAccess;
  readonly domains: SandboxDomains;

  constructor(repo: SandboxesRepo, runtime: SandboxRuntime, deps: PlatformDeps, claims: DomainClaims) {
    this.core = new SandboxesCore(repo, runtime, deps);
    this.work = new Workload(this.core);
    this.manage = new Manage(this.core);
    this.forks = new Forks(this.core);
    this.kernel = new Kernel(this.core, this.work);
    this.rawPorts = new RawPorts(this.core);
    this.ssh = new SshAccess(this.core);
    this.domains = new SandboxDomains(this.core, claims);
  }

  /** The sandbox network's host side, for host services sandboxes reach (the LLM gateway, the box API). */
  readonly hostNetwork = {
    hostAddress: () => this.core.runtime.hostAddress(),
    openHostPort: (port: number) => this.core.runtime.openHostPort(port),
    closeHostPort: (port: number) => this.core.runtime.closeHostPort(port),
  };

  /** The sandbox's address on the host bridge (host-side services reach its ports there). */
  async addressOf(p: Principal, id: string): Promise<string> {
    return this.core.runtime.addressOf((await this.core.own(p, id)).runtime_id);
  }

  /**
   * The bridge address of an account's running sandbox by id alone, or null: the box API's check that
   * a minted key comes from its holder's box (areas/account/key-scope.ts holderAddress).
   */
  async boxAddress(ownerId: string, id: string): Promise<string | null> {
    const r = await this.core.repo.get(id);
    if (!r || r.owner_id !== ownerId || r.status !== 'running' || r.node_id !== this.core.placement.here) return null;
    return this.core.runtime.addressOf(r.runtime_id).catch(() => null);
  }

  /** Areas that run apps in sandboxes say here why a port does not answer (the port proxy's 502 page). */
  readonly portExplainers: PortExplainer[] = [];

  /** One HTTP request to a port of the caller's running sandbox, from the host (a health check). */
  async probePort(p: Principal, id: string, port: number, path: string, timeoutMs: number): Promise<{ status: number } | { error: string }> {
    return probeHttp(await this.addressOf(p, id), port, path, timeoutMs);
  }

  /** The kernel's counters for the caller's running sandbox (OOM kills, memory, pids). */
  async counters(p: Principal, id: string): Promise<SandboxCounters> {
    return this.core.runtime.cgroupStats((await this.core.own(p, id)).runtime_id);
  }

  /** Why a sandbox template cannot be used on this host (not built, and a host program it takes is missing), or null. */
  async templateUnavailable(name: string): Promise<string | null> {
    if (await this.core.runtime.findTemplate(name).catch(() => null)) return null;
    return this.core.runtime.templateUnavailable(name);
  }

  /**
   * Exposes `port` of a sandbox whose metadata carries `marker: "true"` (created through a surface
   * where every port is public, as on E2B), for the port proxy, which has no credential to go by.
   * Answers whether the port is exposed now.
   */
  async exposeIfMarked(id: string, port: number, marker: string): Promise<boolean> {
    return this.core.locked(id, async () => {
      const row = await this.core.repo.get(id);
      if (!row || (JSON.parse(row.metadata) as Record<string, string>)[marker] !== 'true') return false;
      const ports = JSON.parse(row.exposed_ports) as number[];
      if (!ports.includes(port)) {
        await this.core.repo.update(id, { exposed_ports: JSON.stringify([...ports, port].sort((a, b) => a - b)) });
      }
      return true;
    });
  }

  /**
   * A sandbox's owner, status and metadata, by id alone: for a surface that must find the sandbox
   * before it knows who asks (E2B's port hosts). Null when there is none.
   */
  async peek(id: string): Promise<{ ownerId: string; status: string; metadata: Record<string, string> } | null> {
    const row = await this.core.repo.get(id);
    return row ? { ownerId: row.owner_id, status: row.status, metadata: JSON.parse(row.metadata) as Record<string, string> } : null;
  }

  /** CPU, memory and disk a running sandbox of the caller uses now. */
  async usage(p: Principal, id: string) {
    const row = await this.core.started(p, id);
    return rt(this.core.runtime.usage(row.runtime_id));
  }

  /** What a suspend keeps on this host's driver: the files only, or the processes and memory too. */
  pauseKeeps(): 'files' | 'processes' {
    return this.core.runtime.pauseKeeps ?? 'files';
  }

  /** This node's sandboxes whose metadata carries `marker: "true"`, with their owners. */
  async markedHere(marker: string): Promise<{ id: string; ownerId: string }[]> {
    const rows = await this.core.repo.allOnNode(this.core.placement.here);
    return rows
      .filter((r) => (JSON.parse(r.metadata) as Record<string, string>)[marker] === 'true')
      .map((r) => ({ id: r.id, ownerId: r.owner_id }));
  }

  // Areas that hold sandboxes (machines, agents, fleet) keep their resource on its sandbox's node.

  /** The node a new sandbox of this owner and template goes to (this one while pinned). */
  nodeFor(ownerId: string, template: string): Promise<string> {
    return this.core.placement.choose(ownerId, template);
  }

  /** This node when a new sandbox goes here; ElsewhereError (the REST layer relays) otherwise. */
  placeHere(ownerId: string, template: string): Promise<string> {
    return this.core.placement.place(ownerId, template);
  }

  /**
   * Volumes a machine or an agent (`holderId`) keeps across its boxes: checked as a sandbox's (404,
   * 409 VolumeBusy), held until releaseVolumes, and on this node (ElsewhereError to relay, 503 when
   * their node is down). Its boxes are created with them and `volumeHolder: holderId`.
   */
  async holdVolumes(p: Principal, holderId: string, volumes: SandboxVolume[]): Promise<void> {
    if (!volumes.length) return;
    if (!this.core.volumes) throw errors.notImplemented('volumes');
    await this.placeWithVolumes(p.ownerId, volumes);
    await this.core.volumes.hold(p.ownerId, holderId, volumes);
  }

  /** The node a new box with these volumes goes to: theirs (ElsewhereError when it is another). */
  async placeWithVolumes(ownerId: string, volumes: SandboxVolume[]): Promise<string> {
    if (!this.core.volumes) throw errors.notImplemented('volumes');
    return this.core.placement.placeAt(await this.core.volumes.nodeOf(ownerId, volumes), 'volume');
  }

  async releaseVolumes(holderId: string): Promise<void> {
    await this.core.volumes?.release(holderId);
  }

  /** What a holder holds (or a sandbox mounts). */
  async volumesOf(holderId: string): Promise<SandboxVolume[]> {
    return this.core.volumes ? this.core.volumes.listOf(holderId) : [];
  }

  /** The node holding a sandbox (null: a row from before nodes, this node's; undefined: no such sandbox). */
  nodeOf(id: string): Promise<string | null | undefined> {
    return this.core.placement.nodeOf(id);
  }

  async create(p: Principal, input: CreateInput) {
    await this.core.cpu.assertCap(p);
    return this.core.create(p, input);
  }

  /** Makes the caller's sandbox one that never expires (machines: an always-on box). */
  async keepAlive(p: Principal, id: string): Promise<void> {
    await this.core.own(p, id);
    await this.core.keepAlive(id);
  }

  async list(p: Principal, workspaceId?: string) {
    return { sandboxes: await this.core.list(p, workspaceId) };
  }

  async get(p: Principal, id: string) {
    return this.core.describe(await this.core.own(p, id));
  }

  /**
   * Who commands run as and where when a call names neither (its template's user and working dir), and
   * how a command switches user in it (setpriv in nube's Debian templates, nube's runas in imported ones).
   */
  async templateDefaults(p: Principal, id: string): Promise<{ user?: string; cwd?: string; switcher: 'setpriv' | 'runas' }> {
    const row = await this.core.own(p, id);
    const t = bootstrapOf(row)?.template;
    return { user: t?.user, cwd: t?.cwd, switcher: this.core.users.switcher(row.template) };
  }

  async delete(p: Principal, id: string) {
    await this.core.own(p, id);
    await this.core.destroy(id, 'deleted');
    return { ok: true as const };
  }

  async action(p: Principal, id: string, action: SandboxAction, raw: unknown): Promise<Record<string, unknown>> {
    const later = LATER[action];
    if (later) {
      await this.core.own(p, id);
      throw errors.notImplemented(later);
    }
    const B = sandboxActionBodies;
    switch (action) {
      case 'extend':
        return this.manage.extend(p, id, parseBody(B.extend, raw).extendSeconds);
      case 'suspend':
        return this.manage.suspend(p, id, parseBody(B.suspend, raw).keepMemory);
      case 'resume':
        return this.manage.resume(p, id, parseBody(B.resume, raw).env);
      case 'idle':
        return this.manage.idle(p, id, parseBody(B.idle, raw));
      case 'bootstrap':
        return this.manage.bootstrap(p, id, parseBody(B.bootstrap, raw));
      case 'snapshot':
        return this.forks.snapshot(p, id, parseBody(B.snapshot, raw).name);
      case 'fork':
        return this.forks.fork(p, id, parseBody(B.fork, raw));
      case 'template-snapshot':
        return this.forks.templateSnapshot(p, id, parseBody(B['template-snapshot'], raw));
      case 'exec':
        return { ...(await this.work.exec(p, id, parseBody(B.exec, raw))) };
      case 'run-code':
        return { ...(await this.work.runCode(p, id, parseBody(B['run-code'], raw))) };
      case 'run-cell':
        return this.kernel.runCell(p, id, parseBody(B['run-cell'], raw));
      case 'kernel-restart':
        parseBody(B['kernel-restart'], raw);
        return this.kernel.restart(p, id);
      case 'logs':
        return this.manage.logs(p, id);
      case 'runtime':
        return this.manage.runtimeInfo(p, id);
      case 'apply-patch':
        return this.work.applyPatch(p, id, parseBody(B['apply-patch'], raw).patch);
      case 'expose':
        return this.manage.expose(p, id, parseBody(B.expose, raw).port);
      case 'expose-raw': {
        const b = parseBody(B['expose-raw'], raw);
        return { ...(await this.rawPorts.expose(p, id, b.port, b.protocol)) };
      }
      case 'unexpose-raw': {
        const b = parseBody(B['unexpose-raw'], raw);
        return this.rawPorts.unexpose(p, id, b.port, b.protocol);
      }
      case 'ssh-enable':
        parseBody(B['ssh-enable'], raw);
        return this.ssh.enable(p, id);
      case 'ssh-disable':
        parseBody(B['ssh-disable'], raw);
        return this.ssh.disable(p, id);
      case 'ssh-ticket':
        parseBody(B['ssh-ticket'], raw);
        return this.ssh.ticket(p, id);
      case 'domain-add': {
        const b = parseBody(B['domain-add'], raw);
        return this.domains.add(p, id, b.domain, b.port);
      }
      case 'domain-verify':
        return this.domains.verify(p, id, parseBody(B['domain-verify'], raw).domain);
      case 'domain-list':
        parseBody(B['domain-list'], raw);
        return this.domains.list(p, id);
      case 'domain-remove':
        return this.domains.remove(p, id, parseBody(B['domain-remove'], raw).domain);
      case 'network-policy':
        return this.manage.networkPolicy(p, id, parseBody(B['network-policy'], raw));
      default:
        throw errors.notImplemented(action);
    }
  }
}
