// The certificates nube's HTTPS listener serves: per custom domain from the ACME CA (requested only
// once a domain is verified, renewed `renewBeforeMs` before expiry by a durable job), and one given as
// files (a wildcard for `*.<public host>`, say). SNI picks: the domain's own certificate, else the file
// certificate when it covers the name. Contexts are cached per replica for a short while, so a
// certificate another replica issued is picked up without a restart.
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext, type SecureContext } from 'node:tls';
import type { PlatformDeps } from '../deps.js';
import { AcmeIssuer } from './acme.js';
import { CertsRepo } from './certs-repo.js';
import type { DomainClaims } from './claims.js';

export const ISSUE_JOB = 'domains.certificate';
export const RENEW_SCAN_JOB = 'domains.certificate-renewals';
const CONTEXT_TTL_MS = 60_000;

export interface CertificateView {
  status: 'none' | 'pending' | 'issued' | 'unavailable';
  notAfter: string | null;
}

export class Certificates {
  readonly repo: CertsRepo;
  readonly acme: AcmeIssuer | null;
  private readonly file: { context: SecureContext; cert: X509Certificate; pem: { cert: string; key: string } } | null;
  private readonly contexts = new Map<string, { context: SecureContext | null; until: number }>();

  constructor(
    private readonly deps: PlatformDeps,
    private readonly claims: DomainClaims,
  ) {
    const c = deps.config.tls;
    this.repo = new CertsRepo(deps.store.db);
    this.acme = c.acmeDirectoryUrl ? new AcmeIssuer({ ...c, acmeDirectoryUrl: c.acmeDirectoryUrl }, this.repo, deps.secretBox, deps.outbound) : null;
    if ((c.certFile === undefined) !== (c.keyFile === undefined)) throw new Error('NUBE_TLS_CERT_FILE and NUBE_TLS_KEY_FILE go together');
    if (c.certFile && c.keyFile) {
      const pem = { cert: readFileSync(c.certFile, 'utf8'), key: readFileSync(c.keyFile, 'utf8') };
      this.file = { context: createSecureContext(pem), cert: new X509Certificate(pem.cert), pem };
    } else this.file = null;
    claims.onVerified.push((domain) => this.request(domain));
    claims.onReleased.push(async (domain) => {
      this.contexts.delete(domain);
      await this.repo.delete(domain);
    });
    deps.jobs.register<{ domain: string }>(ISSUE_JOB, (p) => this.issue(p.domain), {
      maxAttempts: 5,
      concurrency: 1,
      leaseMs: 120_000,
      backoff: (attempt) => Math.min(60_000 * 2 ** attempt, 6 * 3600_000),
    });
    deps.jobs.register(RENEW_SCAN_JOB, () => this.scan(), { maxAttempts: 3 });
  }

  /** The renewal scan is one durable job that re-arms itself; start arms it if none is pending. */
  async start(): Promise<void> {
    if (this.acme) await this.deps.jobs.enqueue(RENEW_SCAN_JOB, {}, { key: RENEW_SCAN_JOB, runAt: Date.now() + this.deps.config.tls.renewCheckMs });
  }

  /** Asks for a certificate (durable job), only for a domain some owner has verified. */
  async request(domain: string): Promise<void> {
    if (!this.acme || !(await this.claims.isVerified(domain))) return;
    await this.deps.jobs.enqueue(ISSUE_JOB, { domain }, { key: `${ISSUE_JOB}:${domain}` });
  }

  private async issue(domain: string): Promise<void> {
    // Checked again when the job runs: the domain may have been removed meanwhile.
    if (!this.acme || !(await this.claims.isVerified(domain))) return;
    const got = await this.acme.issue(domain);
    const notAfter = new Date(new X509Certificate(got.certPem).validTo).getTime();
    await this.repo.put({ domain, cert_pem: got.certPem, key_sealed: this.deps.secretBox.seal(got.keyPem), not_after: notAfter, issued_at: Date.now() });
    this.contexts.delete(domain);
    this.deps.log.info({ domain, notAfter: new Date(notAfter).toISOString() }, 'certificate issued');
  }

  /** Enqueues renewals of certificates inside the renewal window, then re-arms itself. */
  async scan(): Promise<void> {
    const c = this.deps.config.tls;
    for (const row of await this.repo.expiring(Date.now() + c.renewBeforeMs)) await this.request(row.domain);
    await this.deps.jobs.enqueue(RENEW_SCAN_JOB, {}, { key: RENEW_SCAN_JOB, onDuplicate: 'replace', runAt: Date.now() + c.renewCheckMs });
  }

  async view(domain: string, verified: boolean): Promise<CertificateView> {
    const row = await this.repo.get(domain);
    if (row) return { status: 'issued', notAfter: new Date(row.not_after).toISOString() };
    if (!this.acme) return { status: 'unavailable', notAfter: null };
    return { status: verified ? 'pending' : 'none', notAfter: null };
  }

  /** The key authorization for an HTTP-01 token, or undefined. */
  challenge(token: string): Promise<string | undefined> {
    return this.repo.challenge(token);
  }

  /** The TLS context for an SNI name: the domain's certificate, else the file certificate if it covers it. */
  async contextFor(servername: string): Promise<SecureContext | null> {
    const name = servername.toLowerCase();
    // Only names that route somewhere are looked up (and cached): any other SNI costs nothing.
    if (!this.claims.route(name)) return this.fileFor(name);
    const hit = this.contexts.get(name);
    if (hit && hit.until > Date.now()) return hit.context ?? this.fileFor(name);
    const row = await this.repo.get(name);
    const context = row ? createSecureContext({ cert: row.cert_pem, key: this.deps.secretBox.open(row.key_sealed) }) : null;
    this.contexts.set(name, { context, until: Date.now() + CONTEXT_TTL_MS });
    return context ?? this.fileFor(name);
  }

  /** Whether the file certificate covers `host` (handed-out URLs of nube's own hosts are https then). */
  covers(host: string): boolean {
    return this.fileFor(host.toLowerCase()) !== null;
  }

  private fileFor(name: string): SecureContext | null {
    return this.file && this.file.cert.checkHost(name) !== undefined ? this.file.context : null;
  }

  /** The context for a handshake without SNI (an IP address): the file certificate, if any. */
  get fallback(): { cert: string; key: string } | null {
    return this.file?.pem ?? null;
  }
}
