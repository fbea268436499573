// Debian's pebble (the ACME test CA), started for one test: its own TLS certificate made here with
// openssl (trusted only through NUBE_ACME_CA_BUNDLE), HTTP-01 validated on `httpPort` (nube's HTTP
// port), names resolved through the test's DNS server.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';

export interface Pebble {
  directoryUrl: string;
  /** PEM of the CA that signed pebble's own TLS certificate. */
  caBundle: string;
  /** The root that signs the certificates pebble issues (fetched from its management port). */
  issuingRoot(): Promise<string>;
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** A CA and a certificate it signs for `names` (openssl), in `dir`. */
export function makeCert(dir: string, prefix: string, names: string[]): { ca: string; cert: string; key: string } {
  const f = (n: string) => join(dir, `${prefix}-${n}`);
  const ssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  ssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '90', '-subj', `/CN=${prefix} test CA`, '-keyout', f('ca.key'), '-out', f('ca.pem'));
  ssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', `/CN=${names[0]}`, '-keyout', f('key.pem'), '-out', f('csr.pem'));
  const san = names.map((n) => (/^\d+\.\d+\.\d+\.\d+$/.test(n) ? `IP:${n}` : `DNS:${n}`)).join(',');
  writeFileSync(f('ext.cnf'), `subjectAltName=${san}\n`);
  ssl('x509', '-req', '-in', f('csr.pem'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial', '-days', '90', '-extfile', f('ext.cnf'), '-out', f('cert.pem'));
  return { ca: f('ca.pem'), cert: f('cert.pem'), key: f('key.pem') };
}

export async function startPebble(opts: { httpPort: number; dnsPort: number }): Promise<Pebble> {
  const dir = mkdtempSync(join(tmpdir(), 'nube-pebble-'));
  const tls = makeCert(dir, 'pebble', ['localhost', '127.0.0.1']);
  const port = await freePort();
  const mport = await freePort();
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({
      pebble: {
        listenAddress: `127.0.0.1:${port}`,
        managementListenAddress: `127.0.0.1:${mport}`,
        certificate: tls.cert,
        privateKey: tls.key,
        httpPort: opts.httpPort,
        tlsPort: 5001,
        ocspResponderURL: '',
        externalAccountBindingRequired: false,
      },
    }),
  );
  const proc: ChildProcess = spawn('pebble', ['-config', join(dir, 'config.json'), '-dnsserver', `127.0.0.1:${opts.dnsPort}`], {
    env: { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0', PEBBLE_AUTHZREUSE: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  proc.stdout!.on('data', (c) => (log += c));
  proc.stderr!.on('data', (c) => (log += c));
  const ca = readFileSync(tls.ca, 'utf8');
  const dispatcher = new Agent({ connect: { ca } });
  const directoryUrl = `https://127.0.0.1:${port}/dir`;
  const end = Date.now() + 15_000;
  for (;;) {
    try {
      const r = await request(directoryUrl, { dispatcher });
      await r.body.text();
      if (r.statusCode === 200) break;
    } catch {}
    if (Date.now() > end || proc.exitCode !== null) throw new Error(`pebble did not start: ${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    directoryUrl,
    caBundle: tls.ca,
    async issuingRoot() {
      const r = await request(`https://127.0.0.1:${mport}/roots/0`, { dispatcher });
      return r.body.text();
    },
    async stop() {
      proc.kill('SIGTERM');
      await dispatcher.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
