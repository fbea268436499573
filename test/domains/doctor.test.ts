// `nube doctor`'s HTTPS checks: certificate files load and match, a half configuration fails, and the
// ACME directory (pebble here) answers through the outbound client with the configured CA bundle.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tlsChecks } from '../../src/areas/domains/doctor.js';
import { loadConfig } from '../../src/config.js';
import { startDns, type TestDns } from './dns.js';
import { freePort, makeCert, type Pebble, startPebble } from './pebble.js';

const run = async (env: Record<string, string>) => {
  const config = loadConfig({ NUBE_DATA_DIR: dir, NUBE_SECRET: 'doctor-test-secret-0123456789abcdef', ...env });
  const out = [];
  for (const c of tlsChecks(config)) out.push(await c.run());
  return out.flat();
};
let dir: string;

describe('nube doctor: HTTPS', () => {
  let dns: TestDns;
  let pebble: Pebble;
  let a: ReturnType<typeof makeCert>;
  let b: ReturnType<typeof makeCert>;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'nube-tls-doctor-'));
    a = makeCert(dir, 'a', ['*.sandbox.localhost']);
    b = makeCert(dir, 'b', ['other.test']);
    dns = await startDns();
    pebble = await startPebble({ httpPort: await freePort(), dnsPort: dns.port });
  }, 30_000);
  afterAll(async () => {
    await pebble?.stop();
    dns?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('skips what is not configured', async () => {
    expect((await run({})).map((r) => r.status)).toEqual(['skip', 'skip']);
  });

  it('checks the certificate files: loaded and matching, or why not', async () => {
    const [good] = await run({ NUBE_TLS_CERT_FILE: a.cert, NUBE_TLS_KEY_FILE: a.key });
    expect(good).toMatchObject({ status: 'ok' });
    expect(good!.found).toContain('*.sandbox.localhost');
    const [mismatch] = await run({ NUBE_TLS_CERT_FILE: a.cert, NUBE_TLS_KEY_FILE: b.key });
    expect(mismatch).toMatchObject({ status: 'fail' });
    const [half] = await run({ NUBE_TLS_CERT_FILE: a.cert });
    expect(half).toMatchObject({ status: 'fail' });
  });

  it('reaches the ACME directory with its CA bundle, and warns without an HTTPS port', async () => {
    const env = { NUBE_ACME_DIRECTORY_URL: pebble.directoryUrl, NUBE_ACME_CA_BUNDLE: pebble.caBundle };
    expect((await run({ ...env, NUBE_HTTPS_PORT: '0' }))[1]).toMatchObject({ status: 'ok' });
    expect((await run(env))[1]).toMatchObject({ status: 'warn' });
    // Without the bundle pebble's certificate is not trusted.
    expect((await run({ NUBE_ACME_DIRECTORY_URL: pebble.directoryUrl, NUBE_HTTPS_PORT: '0' }))[1]).toMatchObject({ status: 'warn' });
  });
});
