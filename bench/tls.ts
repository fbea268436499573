// TLS benchmark: `npm run bench -- tls`. A real nube (in process, SQLite) with HTTPS on and a wildcard
// certificate for `*.sites.localhost` given as files (openssl, made here), serving a published site.
// From a client in its own process, in the same run:
//   - the same GET of a site page over plain HTTP through nube (the baseline) and over HTTPS through
//     nube's HTTPS listener (keep-alive): p50/p99 of sequential requests, throughput with 16 connections;
//   - handshakes per second (a new TLS connection per request) against new TCP connections per second
//     on the HTTP port (the physical limit of connection setup here).
// Writes bench/results/tls.json.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config.js';
import { BASE62, randomToken } from '../src/platform/ids.js';
import { buildServer } from '../src/server.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { summarize } from './lib/stats.js';

const SEQUENTIAL = 3000;
const SECONDS = 4;

const CLIENT = `
const http = require('http'), https = require('https'), tls = require('tls'), net = require('net');
const [mode, proto, port, host, caFile, n] = process.argv.slice(1);
const ca = caFile ? require('fs').readFileSync(caFile) : undefined;
const mod = proto === 'https' ? https : http;
const out = (v) => { process.stdout.write(JSON.stringify(v)); process.exit(0); };
const get = (agent) => new Promise((res, rej) => {
  const r = mod.request({ host: '127.0.0.1', port: Number(port), path: '/', headers: { host }, servername: host, ca, agent }, (s) => {
    s.resume(); s.on('end', () => res(s.statusCode));
  });
  r.on('error', rej); r.end();
});
(async () => {
  if (mode === 'latency') {
    const agent = new mod.Agent({ keepAlive: true, maxSockets: 1 });
    for (let i = 0; i < 200; i++) await get(agent);
    const ms = [];
    for (let i = 0; i < Number(n); i++) { const t = performance.now(); const st = await get(agent); if (st !== 200) out({ error: 'status ' + st }); ms.push(performance.now() - t); }
    out({ ms });
  } else if (mode === 'throughput') {
    const agent = new mod.Agent({ keepAlive: true, maxSockets: 16 });
    let done = 0; const end = Date.now() + Number(n) * 1000;
    await Promise.all(Array.from({ length: 16 }, async () => { while (Date.now() < end) { await get(agent); done++; } }));
    out({ perSec: done / Number(n) });
  } else {
    // New connections: a TLS handshake (proto https) or a TCP connect (proto http), 8 at a time.
    let done = 0; const end = Date.now() + Number(n) * 1000;
    const one = () => new Promise((res, rej) => {
      const s = proto === 'https' ? tls.connect({ host: '127.0.0.1', port: Number(port), servername: host, ca }, () => { s.destroy(); res(); })
                                  : net.connect({ host: '127.0.0.1', port: Number(port) }, () => { s.destroy(); res(); });
      s.on('error', rej);
    });
    await Promise.all(Array.from({ length: 8 }, async () => { while (Date.now() < end) { await one(); done++; } }));
    out({ perSec: done / Number(n) });
  }
})().catch((e) => out({ error: e.message }));
`;

/** Runs the client in its own process (asynchronously: nube serves it from this process's event loop). */
function client(args: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ['-e', CLIENT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    c.stdout.on('data', (d) => (out += d));
    c.stderr.on('data', (d) => (err += d));
    c.on('close', () => {
      const v = JSON.parse(out || '{}') as Record<string, unknown>;
      if (!out || v.error) reject(new Error(`client ${args.join(' ')}: ${String(v.error ?? err)}`));
      else resolve(v);
    });
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'nube-bench-tls-'));
  const ssl = (...a: string[]) => spawnSync('openssl', a, { stdio: 'pipe' });
  const f = (n: string) => join(dir, n);
  ssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2', '-subj', '/CN=bench CA', '-keyout', f('ca.key'), '-out', f('ca.pem'));
  ssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=sites', '-keyout', f('key.pem'), '-out', f('csr.pem'));
  writeFileSync(f('ext.cnf'), 'subjectAltName=DNS:*.sites.localhost\n');
  ssl('x509', '-req', '-in', f('csr.pem'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial', '-days', '2', '-extfile', f('ext.cnf'), '-out', f('cert.pem'));
  const ownerKey = `nube_sk_live_${randomToken(40, BASE62)}`;
  const nube = await buildServer(
    loadConfig({
      NUBE_DATA_DIR: join(dir, 'data'),
      NUBE_PORT: '0',
      NUBE_HTTPS_PORT: '0',
      NUBE_TLS_CERT_FILE: f('cert.pem'),
      NUBE_TLS_KEY_FILE: f('key.pem'),
      NUBE_OWNER_KEY: ownerKey,
      NUBE_LOG_LEVEL: 'silent',
      NUBE_RATE_LIMIT_PER_MINUTE: '100000000',
    }),
  );
  const base = await nube.listen();
  try {
    const { zipOf } = await import('../test/helpers/site.js');
    const zip = await zipOf({ 'index.html': `<html><body>${'x'.repeat(1024)}</body></html>` });
    const res = await fetch(`${base}/api/v2/websites`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ownerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ archiveBase64: zip.toString('base64'), name: 'bench' }),
    });
    const site = (await res.json()) as { url: string };
    const host = new URL(site.url).hostname;
    const httpPort = new URL(base).port;
    const httpsPort = new URL(nube.deps.httpsUrl()!).port;

    const lat = async (proto: string, port: string) => summarize((await client(['latency', proto, port, host, f('ca.pem'), String(SEQUENTIAL)])).ms as number[]);
    const thr = async (proto: string, port: string) => (await client(['throughput', proto, port, host, f('ca.pem'), String(SECONDS)])).perSec as number;
    const conn = async (proto: string, port: string) => (await client(['connect', proto, port, host, f('ca.pem'), String(SECONDS)])).perSec as number;

    const httpLat = await lat('http', httpPort);
    const httpsLat = await lat('https', httpsPort);
    const httpThr = await thr('http', httpPort);
    const httpsThr = await thr('https', httpsPort);
    const tcpRate = await conn('http', httpPort);
    const tlsRate = await conn('https', httpsPort);
    const r = (n: number) => Math.round(n * 1000) / 1000;
    const rows: ResultRow[] = [
      { name: 'site GET over plain HTTP through nube (baseline)', p50Ms: r(httpLat.p50Ms), p99Ms: r(httpLat.p99Ms), throughputPerSec: Math.round(httpThr) },
      {
        name: "site GET over HTTPS through nube's listener (keep-alive)",
        p50Ms: r(httpsLat.p50Ms),
        p99Ms: r(httpsLat.p99Ms),
        throughputPerSec: Math.round(httpsThr),
        ratio: r(httpsThr / httpThr),
        ratioAgainst: 'site GET over plain HTTP through nube (baseline)',
        p50DeltaMs: r(httpsLat.p50Ms - httpLat.p50Ms),
        target: 'p50 within 2 ms of plain HTTP',
        pass: httpsLat.p50Ms - httpLat.p50Ms <= 2,
      },
      { name: 'new TCP connections to nube (limit of connection setup)', throughputPerSec: Math.round(tcpRate) },
      {
        name: 'new TLS connections (full handshake, SNI, ECDSA P-256)',
        throughputPerSec: Math.round(tlsRate),
        ratio: r(tlsRate / tcpRate),
        ratioAgainst: 'new TCP connections to nube (limit of connection setup)',
      },
    ];
    printTable(rows);
    const load = loadavg().map((l) => l.toFixed(1)).join(' / ');
    const notes = [
      `Load average during the run: ${load} (the machine is shared with other work: absolute numbers are noisy, ratios less so).`,
      `Latency: ${SEQUENTIAL} sequential GETs of a 1 KB site page on one keep-alive connection after 200 warm-up requests; throughput: 16 keep-alive connections for ${SECONDS} s; handshakes: 8 loops of connect + close for ${SECONDS} s. The client runs in its own process.`,
      'The certificate is a wildcard given as files (NUBE_TLS_CERT_FILE); an ACME certificate of a custom domain takes the same SNI path plus a cached context lookup.',
    ];
    console.log(`load: ${load}`);
    console.log(`wrote ${writeResult(newResult('tls', rows, notes))}`);
  } finally {
    await nube.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
