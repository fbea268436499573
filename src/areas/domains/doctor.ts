// `nube doctor` checks for HTTPS: the certificate files load and what they cover; the ACME directory
// answers (through the outbound client, trusting NUBE_ACME_CA_BUNDLE for it when set).
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Config } from '../../platform/config-shape.js';
import { type DoctorCheck, errorText, fail, ok, skip, warn } from '../../platform/doctor.js';
import { OutboundClient } from '../../platform/outbound.js';

export function tlsChecks(config: Config): DoctorCheck[] {
  const c = config.tls;
  return [
    {
      name: 'https certificate files',
      run() {
        if (!c.certFile && !c.keyFile) return skip('NUBE_TLS_CERT_FILE unset: only custom domains with ACME certificates get HTTPS');
        if (!c.certFile || !c.keyFile) return fail('only one of NUBE_TLS_CERT_FILE and NUBE_TLS_KEY_FILE is set', 'set both, or neither');
        try {
          const cert = new X509Certificate(readFileSync(c.certFile, 'utf8'));
          if (!cert.checkPrivateKey(createPrivateKey(readFileSync(c.keyFile, 'utf8')))) return fail('the key does not match the certificate', 'point NUBE_TLS_KEY_FILE at its key');
          const left = Math.round((new Date(cert.validTo).getTime() - Date.now()) / 86_400_000);
          const found = `${cert.subjectAltName ?? cert.subject}, ${left} days left`;
          return left < 14 ? warn(found, 'renew the certificate files') : ok(found);
        } catch (e) {
          return fail(`cannot load the certificate files: ${errorText(e)}`, 'give PEM files nube can read');
        }
      },
    },
    {
      name: 'acme directory',
      async run() {
        if (!c.acmeDirectoryUrl) return skip('NUBE_ACME_DIRECTORY_URL unset: custom domains get no certificates');
        if (c.httpsPort === undefined) return warn('certificates would be issued but NUBE_HTTPS_PORT is unset', 'set NUBE_HTTPS_PORT (443 in production)');
        const client = new OutboundClient({ allow: config.outboundAllow });
        try {
          const ca = c.acmeCaBundle ? readFileSync(c.acmeCaBundle, 'utf8') : undefined;
          const r = await client.request(c.acmeDirectoryUrl, { timeoutMs: 10_000, trustedOrigin: c.acmeDirectoryUrl, trustedCa: ca });
          const body = (await r.body.json()) as { newOrder?: string };
          if (r.status !== 200 || !body.newOrder) return fail(`${c.acmeDirectoryUrl} answered ${r.status} without newOrder`, 'point NUBE_ACME_DIRECTORY_URL at an ACME directory');
          return ok(`${c.acmeDirectoryUrl} answers`);
        } catch (e) {
          return warn(`${c.acmeDirectoryUrl}: ${errorText(e)}`, 'check the URL, the network, and NUBE_ACME_CA_BUNDLE for a private CA');
        } finally {
          await client.close();
        }
      },
    },
  ];
}
