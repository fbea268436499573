// domain-add / domain-verify / domain-list / domain-remove: a custom domain for a sandbox port. Add
// answers the DNS records to create; verify reads the TXT record through the configured resolver;
// once verified, HTTP requests whose Host is the domain reach the port through the port proxy.
// Mega and Tera only. Verified routes are held in memory (loaded at start) so the proxy's check on
// every request costs a Map lookup, not a query.
import { Resolver } from 'node:dns/promises';
import type { Principal } from '../../../platform/auth.js';
import { errors } from '../../../platform/errors.js';
import { randomToken } from '../../../platform/ids.js';
import { PLANS } from '../../../platform/plans.js';
import type { SandboxesCore } from '../service.js';
import { type DomainRow, DomainsRepo } from './domains-repo.js';

const CHALLENGE = '_nube-challenge';
const NAME = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$/;

export class SandboxDomains {
  readonly repo: DomainsRepo;
  private readonly routes = new Map<string, { sandboxId: string; port: number }>();

  constructor(private readonly core: SandboxesCore) {
    this.repo = new DomainsRepo(core.repo.db);
    core.destroyHooks.push(async (row) => {
      for (const d of await this.repo.ofSandbox(row.id)) if (d.verified_at !== null) this.routes.delete(d.domain);
      await this.repo.deleteSandbox(row.id);
    });
  }

  async load(): Promise<void> {
    for (const d of await this.repo.allVerified()) this.routes.set(d.domain, { sandboxId: d.sandbox_id, port: d.port });
  }

  /** The verified route for a Host header (port stripped), or null. */
  route(host: string | undefined): { sandboxId: string; port: number } | null {
    if (!host) return null;
    return this.routes.get(host.replace(/:\d+$/, '').toLowerCase()) ?? null;
  }

  private normalize(raw: string): string {
    const d = raw.trim().toLowerCase().replace(/\.$/, '');
    if (!NAME.test(d)) throw errors.badRequest('not a domain name', [{ path: ['domain'], message: 'a fully qualified domain name' }]);
    if (d === this.core.deps.config.sandboxes.publicHost || d.endsWith(`.${this.core.deps.config.sandboxes.publicHost}`)) {
      throw errors.badRequest("nube's own host names cannot be claimed", [{ path: ['domain'], message: "under nube's public host" }]);
    }
    return d;
  }

  private planAllows(p: Principal): void {
    if (!PLANS[p.plan].includes.customDomains) {
      throw errors.paymentRequired(`custom domains come with Mega and Tera; your plan is ${PLANS[p.plan].title}`, 'PlanRequired');
    }
  }

  private view(d: DomainRow) {
    return {
      domain: d.domain,
      port: d.port,
      verified: d.verified_at !== null,
      verifiedAt: d.verified_at === null ? null : new Date(d.verified_at).toISOString(),
      records: [
        { type: 'TXT', name: `${CHALLENGE}.${d.domain}`, value: d.token },
        { type: 'CNAME', name: d.domain, value: this.core.deps.config.sandboxes.publicHost },
      ],
    };
  }

  async add(p: Principal, id: string, raw: string, port = 80) {
    const r = await this.core.usable(p, id);
    this.planAllows(p);
    const domain = this.normalize(raw);
    const holder = await this.repo.verifiedHolder(domain);
    if (holder && holder.owner_id !== p.ownerId) throw errors.conflict('this domain is verified by another account', 'DomainTaken');
    const had = await this.repo.get(domain, p.ownerId);
    const row: DomainRow = {
      domain,
      owner_id: p.ownerId,
      sandbox_id: r.id,
      port,
      token: had?.token ?? `nube-verify=${randomToken(32)}`,
      verified_at: had?.verified_at ?? null,
      created_at: had?.created_at ?? Date.now(),
    };
    await this.repo.upsert(row);
    if (row.verified_at !== null) this.routes.set(domain, { sandboxId: r.id, port });
    else if (had && had.verified_at !== null) this.routes.delete(domain);
    return this.view(row);
  }

  async verify(p: Principal, id: string, raw: string) {
    await this.core.own(p, id);
    const domain = this.normalize(raw);
    const d = await this.repo.get(domain, p.ownerId);
    if (!d || d.sandbox_id !== id) throw errors.notFound('domain');
    if (d.verified_at !== null) return this.view(d);
    const holder = await this.repo.verifiedHolder(domain);
    if (holder && holder.owner_id !== p.ownerId) throw errors.conflict('this domain is verified by another account', 'DomainTaken');
    const found = await this.txt(`${CHALLENGE}.${domain}`);
    if (!found.includes(d.token)) {
      return { ...this.view(d), reason: found.length ? 'the TXT record does not hold the token' : 'no TXT record found' };
    }
    const now = Date.now();
    await this.repo.markVerified(domain, p.ownerId, now);
    this.routes.set(domain, { sandboxId: id, port: d.port });
    await this.core.event(id, 'domain-verified', { domain });
    return this.view({ ...d, verified_at: now });
  }

  private async txt(name: string): Promise<string[]> {
    const resolver = new Resolver({ timeout: 3000, tries: 2 });
    const servers = this.core.deps.config.sandboxes.dnsServers;
    if (servers.length) resolver.setServers(servers);
    const records = await resolver.resolveTxt(name).catch(() => [] as string[][]);
    return records.map((chunks) => chunks.join(''));
  }

  async list(p: Principal, id: string) {
    await this.core.own(p, id);
    return { domains: (await this.repo.ofSandbox(id)).map((d) => this.view(d)) };
  }

  async remove(p: Principal, id: string, raw: string) {
    await this.core.own(p, id);
    const domain = raw.trim().toLowerCase().replace(/\.$/, '');
    const d = await this.repo.get(domain, p.ownerId);
    if (!d || d.sandbox_id !== id) throw errors.notFound('domain');
    await this.repo.delete(domain, p.ownerId);
    if (d.verified_at !== null) this.routes.delete(domain);
    return { ok: true, domain };
  }
}
