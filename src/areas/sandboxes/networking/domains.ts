// domain-add / domain-verify / domain-list / domain-remove: a custom domain for a sandbox port. The
// ownership rules (records, TXT proof, one verified owner, routing only once verified) are the domains
// area's (DomainClaims), shared with machines and sites; this file checks the sandbox is the caller's
// and shapes the answers of the sandbox actions.
import type { Principal } from '../../../platform/auth.js';
import { errors } from '../../../platform/errors.js';
import type { DomainClaims } from '../../domains/claims.js';
import type { ClaimRow } from '../../domains/claims-repo.js';
import type { Match } from '../proxy-match.js';
import type { SandboxesCore } from '../service.js';

export class SandboxDomains {
  constructor(
    private readonly core: SandboxesCore,
    readonly claims: DomainClaims,
  ) {
    core.destroyHooks.push((row) => claims.dropTarget('sandbox', row.id));
  }

  /**
   * What a verified domain in a Host header reaches through the port proxy: a sandbox port, or a box
   * another area resolves (a machine's app); null for anything else (a site's domain is the site
   * server's, an unverified one routes nowhere).
   */
  route(host: string | undefined): Match | null {
    const r = this.claims.route(host);
    if (!r) return null;
    if (r.kind === 'sandbox') return r.port === null ? null : { id: r.id, port: r.port, domain: true };
    const resolve = this.claims.boxTargets.get(r.kind);
    return resolve ? { via: resolve(r.id) } : null;
  }

  private view(d: ClaimRow) {
    const v = this.claims.view(d);
    return { domain: v.domain, port: d.port ?? 80, verified: v.verified, verifiedAt: v.verifiedAt, records: v.records };
  }

  private async mine(p: Principal, id: string, raw: string): Promise<ClaimRow> {
    const d = await this.claims.own(p, raw).catch(() => null);
    if (d?.target_kind !== 'sandbox' || d.target_id !== id) throw errors.notFound('domain');
    return d;
  }

  async add(p: Principal, id: string, raw: string, port = 80) {
    const r = await this.core.usable(p, id);
    return this.view(await this.claims.claim(p, raw, { kind: 'sandbox', id: r.id, port }, r.workspace_id));
  }

  async verify(p: Principal, id: string, raw: string) {
    await this.core.own(p, id);
    const domain = this.claims.normalize(raw);
    const d = await this.mine(p, id, domain);
    if (d.verified_at !== null) return this.view(d);
    const { row, reason } = await this.claims.verify(p, d);
    if (reason) return { ...this.view(row), reason };
    await this.core.event(id, 'domain-verified', { domain });
    return this.view(row);
  }

  async list(p: Principal, id: string) {
    await this.core.own(p, id);
    return { domains: (await this.claims.ofTarget('sandbox', id)).map((d) => this.view(d)) };
  }

  async remove(p: Principal, id: string, raw: string) {
    await this.core.own(p, id);
    const d = await this.mine(p, id, raw);
    await this.claims.release(p, d);
    return { ok: true, domain: d.domain };
  }
}
