// The Domains area's operations: an owner's custom domains for sites and machines (sandbox ports use
// the sandbox actions, over the same claims). Add answers the DNS records; verify reads the TXT and,
// once verified, the domain routes to what it is attached to and a certificate is requested; attach
// points it at a site or a machine (checked to be the caller's through their areas' services).
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import type { Services } from '../../platform/operation.js';
import type { WorkspaceRegistry } from '../../platform/workspaces.js';
import type { Certificates } from './certificates.js';
import type { DomainClaims, Target } from './claims.js';
import type { ClaimRow } from './claims-repo.js';

export type AttachKind = 'site' | 'machine';

export class DomainsService {
  constructor(
    readonly claims: DomainClaims,
    readonly certificates: Certificates,
    /** Services of areas created later (sites, machines), looked up when a target is checked. */
    private readonly other: Partial<Services>,
  ) {}

  /** Workspaces (set by the area): where a domain lands, which a list shows, which a key reaches. */
  workspaces!: WorkspaceRegistry;

  /** The caller's claim of a domain in a workspace its key reaches, or 404. */
  private async own(p: Principal, domain: string): Promise<ClaimRow> {
    const d = await this.claims.own(p, domain);
    if (!this.workspaces.sees(p, d.workspace_id)) throw errors.notFound('domain');
    return d;
  }

  private async view(d: ClaimRow) {
    return { ...this.claims.view(d), certificate: await this.certificates.view(d.domain, d.verified_at !== null) };
  }

  /** The target if it is the caller's (another owner's site or machine is a 404). */
  async target(p: Principal, kind: AttachKind, id: string): Promise<Target> {
    if (kind === 'site') {
      if (!this.other.websites) throw errors.notImplemented('sites');
      await this.other.websites.get(p, id);
    } else {
      if (!this.other.machines) throw errors.notImplemented('machines');
      await this.other.machines.core.own(p, id);
    }
    return { kind, id, port: null };
  }

  async add(p: Principal, input: { domain: string; target?: { kind: AttachKind; id: string }; workspaceId?: string }) {
    this.claims.planAllows(p);
    const workspaceId = await this.workspaces.forCreate(p, input.workspaceId);
    // A claim already made stays where it is (its own workspace, which the key must reach).
    const had = await this.claims.repo.get(this.claims.normalize(input.domain), p.ownerId);
    if (had && !this.workspaces.sees(p, had.workspace_id)) throw errors.notFound('domain');
    const target = input.target ? await this.target(p, input.target.kind, input.target.id) : { kind: 'none' as const, id: null, port: null };
    return this.view(await this.claims.claim(p, input.domain, target, workspaceId));
  }

  async list(p: Principal, workspaceId?: string) {
    const rows = await this.claims.repo.ofOwner(p.ownerId, await this.workspaces.filter(p, workspaceId));
    return { domains: await Promise.all(rows.map((d) => this.view(d))) };
  }

  async get(p: Principal, domain: string) {
    return this.view(await this.own(p, domain));
  }

  async verify(p: Principal, domain: string) {
    const { row, reason } = await this.claims.verify(p, await this.own(p, domain));
    return { ...(await this.view(row)), ...(reason ? { reason } : {}) };
  }

  async attach(p: Principal, domain: string, to: { kind: AttachKind; id: string }) {
    const d = await this.own(p, domain);
    const target = await this.target(p, to.kind, to.id);
    return this.view(await this.claims.claim(p, d.domain, target));
  }

  async detach(p: Principal, domain: string) {
    const d = await this.own(p, domain);
    return this.view(await this.claims.claim(p, d.domain, { kind: 'none', id: null, port: null }));
  }

  async remove(p: Principal, domain: string) {
    await this.claims.release(p, await this.own(p, domain));
    return { ok: true as const };
  }

  /** Domains attached to one target (a machine's view lists them). */
  async namesOf(kind: AttachKind, id: string): Promise<string[]> {
    return (await this.claims.ofTarget(kind, id)).map((d) => d.domain);
  }

  /** Answer for GET /.well-known/acme-challenge/<token> (any Host), or undefined. */
  challenge(token: string): Promise<string | undefined> {
    return this.certificates.challenge(token);
  }
}
