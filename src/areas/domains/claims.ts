// The one piece of code that decides who holds a custom domain, whatever it points at (a sandbox
// port, a machine, a site): the DNS records to create, the TXT ownership proof read through the
// configured resolver, the rule that a domain verified by one owner cannot be taken by another, and
// the in-memory route table the host routers consult on every request (a Map lookup, not a query).
// Mega and Tera only.
import { Resolver } from 'node:dns/promises';
import type { Principal } from '../../platform/auth.js';
import type { Config } from '../../platform/config-shape.js';
import type { Bus } from '../../platform/events.js';
import { errors } from '../../platform/errors.js';
import { randomToken } from '../../platform/ids.js';
import { PLANS } from '../../platform/plans.js';
import { DEFAULT_WORKSPACE } from '../../platform/workspaces.js';
import { type ClaimRow, ClaimsRepo, type TargetKind } from './claims-repo.js';
import type { Kysely } from 'kysely';
import type { Tables } from '../../store/schema.js';

export const CHALLENGE = '_nube-challenge';
/** Bus event (not a webhook event) telling replicas a domain's route changed. */
const ROUTES_CHANGED = 'domains.routes-changed';
const NAME = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$/;

export interface Target {
  kind: TargetKind;
  id: string | null;
  port: number | null;
}
export interface Route {
  ownerId: string;
  kind: TargetKind;
  id: string;
  port: number | null;
}

export interface ClaimView {
  domain: string;
  target: { kind: TargetKind; id: string | null; port: number | null };
  verified: boolean;
  verifiedAt: string | null;
  workspaceId: string;
  records: { type: 'TXT' | 'CNAME'; name: string; value: string }[];
}

export class DomainClaims {
  readonly repo: ClaimsRepo;
  private readonly routes = new Map<string, Route>();
  /** Kinds served by a sandbox port other than sandboxes themselves (machines): where one id's traffic goes. */
  readonly boxTargets = new Map<TargetKind, (id: string) => Promise<{ sandboxId: string; port: number } | null>>();
  /** Told when a domain becomes verified (certificates are requested then). */
  readonly onVerified: ((domain: string) => Promise<void>)[] = [];
  /** Told when a domain stops routing (its certificate is forgotten). */
  readonly onReleased: ((domain: string) => Promise<void>)[] = [];

  constructor(
    db: Kysely<Tables>,
    private readonly config: Config,
    private readonly bus?: Bus,
  ) {
    this.repo = new ClaimsRepo(db);
    // Every replica keeps its own route table: a change on one is announced on the bus (Redis when
    // scaled out) and the others read that domain's row again.
    bus?.subscribe((e) => {
      if (e.event === ROUTES_CHANGED && typeof e.data.domain === 'string') void this.refresh(e.data.domain).catch(() => {});
    });
  }

  private async refresh(domain: string): Promise<void> {
    const d = await this.repo.verifiedHolder(domain);
    if (d) this.setRoute(d);
    else this.routes.delete(domain);
  }

  private changed(domain: string): void {
    void this.bus?.publish({ event: ROUTES_CHANGED, ownerId: '', data: { domain } }).catch(() => {});
  }

  async load(): Promise<void> {
    this.routes.clear();
    for (const d of await this.repo.allVerified()) this.setRoute(d);
  }

  private setRoute(d: ClaimRow): void {
    if (d.verified_at === null || d.target_kind === 'none' || d.target_id === null) this.routes.delete(d.domain);
    else this.routes.set(d.domain, { ownerId: d.owner_id, kind: d.target_kind, id: d.target_id, port: d.port });
  }

  /** The verified route for a Host header (port stripped), or null: an unverified domain routes nowhere. */
  route(host: string | undefined): Route | null {
    if (!host) return null;
    return this.routes.get(host.replace(/:\d+$/, '').toLowerCase()) ?? null;
  }

  /** Whether some owner has the domain verified (certificates are issued for these only). */
  async isVerified(domain: string): Promise<boolean> {
    return (await this.repo.verifiedHolder(domain)) !== undefined;
  }

  /** The domain, lowercased and without a trailing dot; 400 for anything else or for nube's own hosts. */
  normalize(raw: string, path: (string | number)[] = ['domain']): string {
    const d = raw.trim().toLowerCase().replace(/\.$/, '');
    if (!NAME.test(d)) throw errors.badRequest('not a domain name', [{ path, message: 'a fully qualified domain name' }]);
    for (const own of [this.config.sandboxes.publicHost, this.config.sites.host]) {
      if (d === own || d.endsWith(`.${own}`)) {
        throw errors.badRequest("nube's own host names cannot be claimed", [{ path, message: "under nube's public host" }]);
      }
    }
    return d;
  }

  planAllows(p: Principal): void {
    if (!PLANS[p.plan].includes.customDomains) {
      throw errors.paymentRequired(`custom domains come with Mega and Tera; your plan is ${PLANS[p.plan].title}`, 'PlanRequired');
    }
  }

  view(d: ClaimRow): ClaimView {
    return {
      domain: d.domain,
      target: { kind: d.target_kind, id: d.target_id, port: d.port },
      verified: d.verified_at !== null,
      verifiedAt: d.verified_at === null ? null : new Date(d.verified_at).toISOString(),
      workspaceId: d.workspace_id,
      records: [
        { type: 'TXT', name: `${CHALLENGE}.${d.domain}`, value: d.token },
        { type: 'CNAME', name: d.domain, value: this.config.sandboxes.publicHost },
      ],
    };
  }

  private async notTakenByOther(p: Principal, domain: string): Promise<void> {
    const holder = await this.repo.verifiedHolder(domain);
    if (holder && holder.owner_id !== p.ownerId) throw errors.conflict('this domain is verified by another account', 'DomainTaken');
  }

  /** What claim() would refuse, checked before other work (a launch): plan, name, another owner's domain. */
  async precheck(p: Principal, raw: string, path: (string | number)[] = ['domain']): Promise<string> {
    this.planAllows(p);
    const domain = this.normalize(raw, path);
    await this.notTakenByOther(p, domain);
    return domain;
  }

  /** Claims (or re-points) the caller's domain; keeps its token and verification. */
  async claim(p: Principal, raw: string, target: Target, workspaceId?: string): Promise<ClaimRow> {
    const domain = await this.precheck(p, raw);
    const had = await this.repo.get(domain, p.ownerId);
    const row: ClaimRow = {
      domain,
      owner_id: p.ownerId,
      target_kind: target.kind,
      target_id: target.id,
      port: target.port,
      token: had?.token ?? `nube-verify=${randomToken(32)}`,
      verified_at: had?.verified_at ?? null,
      created_at: had?.created_at ?? Date.now(),
      // A claim keeps its workspace; a new one lands in the one asked for (checked by the caller), else its target's.
      workspace_id: had?.workspace_id ?? workspaceId ?? DEFAULT_WORKSPACE,
    };
    await this.repo.upsert(row);
    this.setRoute(row);
    this.changed(domain);
    return row;
  }

  /** The caller's claim of a domain, or 404 (another owner's claim is never shown). */
  async own(p: Principal, raw: string): Promise<ClaimRow> {
    const d = await this.repo.get(raw.trim().toLowerCase().replace(/\.$/, ''), p.ownerId);
    if (!d) throw errors.notFound('domain');
    return d;
  }

  /** Reads the TXT record; answers the row (verified or not) and why not. */
  async verify(p: Principal, d: ClaimRow): Promise<{ row: ClaimRow; reason?: string }> {
    if (d.verified_at !== null) return { row: d };
    await this.notTakenByOther(p, d.domain);
    const name = `${CHALLENGE}.${d.domain}`;
    const found = await this.txt(name);
    if (!found.includes(d.token)) {
      // Named, so the fix is clear: DNS answers can lag behind a change by the record's TTL.
      const why = found.length ? `the TXT record at ${name} does not hold the token ${d.token}` : `no TXT record found at ${name}`;
      return { row: d, reason: `${why} (a record just made can take its TTL to show)` };
    }
    const now = Date.now();
    if (!(await this.repo.markVerified(d.domain, p.ownerId, now))) {
      throw errors.conflict('this domain is verified by another account', 'DomainTaken');
    }
    const row = { ...d, verified_at: now };
    this.setRoute(row);
    this.changed(d.domain);
    for (const f of this.onVerified) await f(d.domain);
    return { row };
  }

  private async txt(name: string): Promise<string[]> {
    const resolver = new Resolver({ timeout: 3000, tries: 2 });
    const servers = this.config.sandboxes.dnsServers;
    if (servers.length) resolver.setServers(servers);
    const records = await resolver.resolveTxt(name).catch(() => [] as string[][]);
    return records.map((chunks) => chunks.join(''));
  }

  async release(p: Principal, d: ClaimRow): Promise<void> {
    await this.repo.delete(d.domain, p.ownerId);
    if (d.verified_at !== null) await this.forget(d.domain);
  }

  private async forget(domain: string): Promise<void> {
    this.routes.delete(domain);
    this.changed(domain);
    for (const f of this.onReleased) await f(domain);
  }

  /** A sandbox ended: its domains go with it. */
  async dropTarget(kind: TargetKind, id: string): Promise<void> {
    const rows = await this.repo.ofTarget(kind, id);
    await this.repo.deleteTarget(kind, id);
    for (const d of rows) if (d.verified_at !== null) await this.forget(d.domain);
  }

  /** A machine or site ended: its domains stay the owner's, attached to nothing. */
  async detachTarget(kind: TargetKind, id: string): Promise<void> {
    const rows = await this.repo.ofTarget(kind, id);
    await this.repo.detachTarget(kind, id);
    for (const d of rows) {
      this.routes.delete(d.domain);
      this.changed(d.domain);
    }
  }

  ofTarget(kind: TargetKind, id: string): Promise<ClaimRow[]> {
    return this.repo.ofTarget(kind, id);
  }
}
