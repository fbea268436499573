// Certificates from an ACME CA (RFC 8555) with `acme-client`: an order for one verified domain, its
// HTTP-01 challenge answered by nube itself (the key authorization is written to the store, and
// GET /.well-known/acme-challenge/<token> on nube's HTTP port answers it on any replica), then the
// CSR with a fresh key. acme-client speaks HTTP through axios; its adapter here sends every request
// through the platform's OutboundClient, the directory's origin being the operator's (trusted, with
// the operator's CA bundle when one is configured: pebble's own CA in the tests).
import { readFileSync } from 'node:fs';
import type acmeTypes from 'acme-client';

// acme-client (with axios, node-forge and its x509 stack, about 500 modules) is loaded on the first
// certificate order, not at every start.
type Acme = typeof acmeTypes;
let loaded: Promise<Acme> | undefined;
const acmeClient = (): Promise<Acme> => (loaded ??= import('acme-client').then((m) => m.default));
import type { TlsConfig } from '../../platform/config-shape.js';
import type { SecretBox } from '../../platform/crypto.js';
import type { OutboundClient } from '../../platform/outbound.js';
import type { CertsRepo } from './certs-repo.js';

/** How long a challenge answer stays in the store (the CA validates within seconds). */
const CHALLENGE_TTL_MS = 10 * 60_000;

export interface Issued {
  certPem: string;
  keyPem: string;
}

// The parts of an axios request config and response the adapter reads and writes.
interface AxiosLikeConfig {
  url?: string;
  method?: string;
  data?: unknown;
  headers?: { toJSON?: () => Record<string, unknown> } & Record<string, unknown>;
  validateStatus?: ((status: number) => boolean) | null;
}

export class AcmeIssuer {
  private readonly origin: string;
  private readonly ca: string | undefined;

  constructor(
    private readonly config: TlsConfig & { acmeDirectoryUrl: string },
    private readonly repo: CertsRepo,
    private readonly box: SecretBox,
    private readonly outbound: OutboundClient,
  ) {
    this.origin = new URL(config.acmeDirectoryUrl).origin;
    this.ca = config.acmeCaBundle ? readFileSync(config.acmeCaBundle, 'utf8') : undefined;
  }

  /** acme-client's one axios instance sends through this server's OutboundClient (set before each use). */
  private installAdapter(acme: Acme): void {
    const { outbound, origin, ca } = this;
    const adapter = async (config: AxiosLikeConfig) => {
      const raw = typeof config.headers?.toJSON === 'function' ? config.headers.toJSON() : (config.headers ?? {});
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(raw)) if (typeof v === 'string' || typeof v === 'number') headers[k] = String(v);
      let res: Awaited<ReturnType<OutboundClient['request']>>;
      try {
        res = await outbound.request(config.url!, {
          method: (config.method ?? 'get').toUpperCase() as 'GET',
          headers,
          body: typeof config.data === 'string' ? config.data : undefined,
          timeoutMs: 30_000,
          trustedOrigin: origin,
          trustedCa: ca,
        });
      } catch (e) {
        throw Object.assign(e as Error, { config });
      }
      const data = await res.body.text();
      const response = { data, status: res.status, statusText: '', headers: res.headers, config, request: {} };
      // axios' settle(): acme-client's interceptors decide on retries from the rejected response.
      if (config.validateStatus && !config.validateStatus(res.status)) {
        throw Object.assign(new Error(`ACME request answered ${res.status}`), { config, response });
      }
      return response;
    };
    acme.axios.defaults.adapter = adapter as never;
  }

  private async client(acme: Acme): Promise<acmeTypes.Client> {
    const url = this.config.acmeDirectoryUrl;
    const sealed = await this.repo.accountKey(url);
    let accountKey: string;
    if (sealed) accountKey = this.box.open(sealed);
    else {
      accountKey = (await acme.crypto.createPrivateEcdsaKey()).toString();
      // Two replicas racing: the first key stored wins, the other reads it.
      await this.repo.putAccountKey(url, this.box.seal(accountKey)).catch(() => {});
      accountKey = this.box.open((await this.repo.accountKey(url))!);
    }
    const client = new acme.Client({ directoryUrl: url, accountKey });
    await client.createAccount({
      termsOfServiceAgreed: true,
      ...(this.config.acmeEmail ? { contact: [`mailto:${this.config.acmeEmail}`] } : {}),
    });
    return client;
  }

  /** Orders, proves and downloads a certificate for `domain`. */
  async issue(domain: string): Promise<Issued> {
    const acme = await acmeClient();
    this.installAdapter(acme);
    const client = await this.client(acme);
    const order = await client.createOrder({ identifiers: [{ type: 'dns', value: domain }] });
    for (const authz of await client.getAuthorizations(order)) {
      if (authz.status === 'valid') continue;
      const ch = authz.challenges.find((c) => c.type === 'http-01');
      if (!ch) throw new Error(`the CA offers no http-01 challenge for ${domain}`);
      await this.repo.putChallenge(ch.token, await client.getChallengeKeyAuthorization(ch), CHALLENGE_TTL_MS);
      try {
        await client.completeChallenge(ch);
        await client.waitForValidStatus(ch);
      } finally {
        await this.repo.deleteChallenge(ch.token);
      }
    }
    const [key, csr] = await acme.crypto.createCsr({ altNames: [domain] }, await acme.crypto.createPrivateEcdsaKey());
    const finalized = await client.finalizeOrder(order, csr);
    const certPem = await client.getCertificate(finalized);
    return { certPem, keyPem: key.toString() };
  }
}
