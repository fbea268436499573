// Networking benchmark: `npm run bench -- networking`. A real nube (in process, SQLite) with one
// sandbox running a TCP echo server and a TCP source inside. Measured in the same run:
//   - host loopback (a source on 127.0.0.1): the physical limit of a TCP stream on this machine;
//   - direct to the sandbox's bridge address (what every forwarder adds to);
//   - the raw port (nube's in-process relay, what expose-raw uses);
//   - an nftables DNAT rule to the same port (the alternative that was measured, not chosen).
// Throughput (MB/s of a 128 MB download) and 1-byte round trips (p50/p99) for each. Writes
// bench/results/networking.json.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { loadavg } from 'node:os';
import { loadConfig } from '../src/config.js';
import { BASE62, randomToken } from '../src/platform/ids.js';
import type { NamespacesRuntime } from '../src/areas/sandboxes/runtime/namespaces/runtime.js';
import { buildServer } from '../src/server.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { percentile } from './lib/stats.js';

const ROOT = process.env.NUBE_BENCH_DATA ?? '/var/lib/nube-test';
const BRIDGE = 'nuben0:10.81.0.1/16';
const HOST_IP = '10.81.0.1';
const RAW_FIRST = 42000;
const DNAT_PORT = 42100;
const DNAT_TABLE = 'nube_bench_dnat';
const BYTES = 128 * 1024 * 1024;
const PINGS = 2000;
const dir = `${ROOT}/bench-networking-${process.pid}`;

// Inside the sandbox: 7000 echoes, 7002 sends the number of bytes asked for (10 ASCII digits) and closes.
const SERVERS = `
const net = require('net');
net.createServer((s) => { s.setNoDelay(true); s.pipe(s); }).listen(7000);
const chunk = Buffer.alloc(1 << 20);
net.createServer((s) => {
  s.once('data', (d) => {
    let left = Number(d.toString().slice(0, 10));
    const pump = () => {
      while (left > 0) { const n = Math.min(left, chunk.length); left -= n; if (!s.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return s.once('drain', pump); }
      s.end();
    };
    pump();
  });
}).listen(7002);
`;

// The client runs in its own process (as a real client would): the relay lives in nube's process and
// must not share an event loop with the load it carries.
const CLIENT = `
const net = require('net');
const [mode, host, port, n] = process.argv.slice(1);
const out = (v) => { process.stdout.write(JSON.stringify(v)); process.exit(0); };
if (mode === 'download') {
  const bytes = Number(n); let got = 0; const t0 = performance.now();
  const s = net.connect({ host, port: Number(port) }, () => s.write(String(bytes).padStart(10, '0')));
  s.on('data', (d) => (got += d.length));
  s.on('error', (e) => out({ error: e.message }));
  s.on('close', () => out(got === bytes ? { mbps: bytes / 2 ** 20 / ((performance.now() - t0) / 1000) } : { error: 'got ' + got }));
} else {
  const s = net.connect({ host, port: Number(port), noDelay: true }, async () => {
    const times = [];
    for (let i = 0; i < Number(n); i++) {
      const t0 = performance.now();
      await new Promise((r) => { s.once('data', r); s.write('x'); });
      times.push(performance.now() - t0);
    }
    out({ times });
  });
  s.on('error', (e) => out({ error: e.message }));
}
`;

function client<T>(mode: 'download' | 'ping', host: string, port: number, n: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ['-e', CLIENT, mode, host, String(port), String(n)]);
    let text = '';
    c.stdout.on('data', (d) => (text += d));
    c.on('close', () => {
      const v = JSON.parse(text || '{"error":"no output"}') as T & { error?: string };
      if (v.error) reject(new Error(v.error));
      else resolve(v);
    });
  });
}
const download = async (host: string, port: number, bytes: number) =>
  (await client<{ mbps: number }>('download', host, port, bytes)).mbps;
const pings = async (host: string, port: number, n: number) =>
  (await client<{ times: number[] }>('ping', host, port, n)).times;

/** A host-only source and echo on loopback: the same protocol without any sandbox. */
function loopbackServers(): Promise<{ source: number; echo: number; close: () => void }> {
  const chunk = Buffer.alloc(1 << 20);
  const src = createServer((s) => {
    s.once('data', (d) => {
      let left = Number(d.toString().slice(0, 10));
      const pump = () => {
        while (left > 0) {
          const n = Math.min(left, chunk.length);
          left -= n;
          if (!s.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void s.once('drain', pump);
        }
        s.end();
      };
      pump();
    });
  });
  const echo = createServer((s) => {
    s.setNoDelay(true);
    s.pipe(s);
  });
  return new Promise((resolve) => {
    src.listen(0, '127.0.0.1', () =>
      echo.listen(0, '127.0.0.1', () =>
        resolve({
          source: (src.address() as { port: number }).port,
          echo: (echo.address() as { port: number }).port,
          close: () => {
            src.close();
            echo.close();
          },
        }),
      ),
    );
  });
}

const nft = (input: string) => spawnSync('nft', ['-f', '-'], { input, encoding: 'utf8' });

const rows: ResultRow[] = [];

/** SSH through the gateway with the real OpenSSH client: connect to first output, against API exec. */
async function sshRows(id: string, post: (path: string, body: unknown) => Promise<Record<string, unknown>>): Promise<void> {
  await post(`/sandboxes/${id}/ssh-enable`, {});
  const tk = (await post(`/sandboxes/${id}/ssh-ticket`, {})) as { host: string; port: number; user: string; password: string };
  const askpass = `${dir}/askpass.sh`;
  writeFileSync(askpass, '#!/bin/sh\nprintf "%s\\n" "$PW"\n', { mode: 0o755 });
  const sshOnce = () =>
    new Promise<number>((resolve, reject) => {
      const t0 = performance.now();
      const c = spawn('ssh', ['-o', 'StrictHostKeyChecking=no', '-o', `UserKnownHostsFile=${dir}/known`, '-o', 'PubkeyAuthentication=no',
        '-o', 'LogLevel=ERROR', '-p', String(tk.port), `${tk.user}@${tk.host}`, 'echo hi'],
        { env: { ...process.env, SSH_ASKPASS: askpass, SSH_ASKPASS_REQUIRE: 'force', DISPLAY: ':0', PW: tk.password }, stdio: ['ignore', 'pipe', 'inherit'] });
      // Timed to the command's output, as a user sees it (the client's own teardown is not counted).
      c.stdout.once('data', () => resolve(performance.now() - t0));
      c.on('close', (code) => (code === 0 ? undefined : reject(new Error(`ssh exited ${code}`))));
    });
  await sshOnce();
  const ssh: number[] = [];
  for (let i = 0; i < 20; i++) ssh.push(await sshOnce());
  const api: number[] = [];
  for (let i = 0; i < 50; i++) {
    const t0 = performance.now();
    await post(`/sandboxes/${id}/exec`, { command: 'echo hi' });
    api.push(performance.now() - t0);
  }
  const apiP50 = percentile(api, 50);
  rows.push({ name: 'API: POST exec `echo hi`', p50Ms: apiP50, p99Ms: percentile(api, 99), n: api.length });
  rows.push({
    name: 'ssh (OpenSSH client): connect -> first output of `echo hi`',
    p50Ms: percentile(ssh, 50),
    p99Ms: percentile(ssh, 99),
    n: ssh.length,
    ratio: percentile(ssh, 50) / apiP50,
    ratioAgainst: 'API: POST exec `echo hi`',
    target: '< 300 ms p50',
    pass: percentile(ssh, 50) < 300,
  });
}
const mbps = async (host: string, port: number) => {
  await download(host, port, 8 * 2 ** 20);
  const runs = [];
  for (let i = 0; i < 3; i++) runs.push(await download(host, port, BYTES));
  return Math.max(...runs);
};

mkdirSync(dir, { recursive: true });
const ownerKey = `nube_sk_live_${randomToken(40, BASE62)}`;
const nube = await buildServer(
  loadConfig({
    NUBE_DATA_DIR: dir,
    NUBE_PORT: '0',
    NUBE_OWNER_KEY: ownerKey,
    NUBE_LOG_LEVEL: 'silent',
    NUBE_TEMPLATES_DIR: `${ROOT}/templates`,
    NUBE_SANDBOX_BRIDGE: BRIDGE,
    NUBE_SANDBOX_CGROUP: 'nube-bench',
    NUBE_RAW_PORTS: `${RAW_FIRST}-${RAW_FIRST + 9}`,
    NUBE_SSH_PORT: '0',
  }),
);
const base = `${await nube.listen()}/api/v2`;
const post = async (path: string, body: unknown) => {
  const r = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ownerKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = (await r.json()) as Record<string, unknown>;
  if (r.status !== 200) throw new Error(`${path}: ${r.status} ${JSON.stringify(json)}`);
  return json;
};
const loop = await loopbackServers();
try {
  await nube.services.sandboxes.core.runtime.ensureTemplate('base', (l) => console.log(l));
  const sbx = await post('/sandboxes', { timeoutSeconds: 1800 });
  const id = sbx.id as string;
  await post(`/sandboxes/${id}/files/write`, { path: '/root/servers.js', content: SERVERS });
  await post(`/sandboxes/${id}/bg`, { command: 'exec node /root/servers.js' });
  const addr = (await post(`/sandboxes/${id}/runtime`, {})).address as string;
  const rawEcho = (await post(`/sandboxes/${id}/expose-raw`, { port: 7000 })).publicPort as number;
  const rawSrc = (await post(`/sandboxes/${id}/expose-raw`, { port: 7002 })).publicPort as number;
  for (let i = 0; i < 100; i++) {
    if (await download(addr, 7002, 1).then(() => true, () => false)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  // The alternative: the kernel rewrites the destination (output hook: the client is on this host).
  const dnat = nft(`table ip ${DNAT_TABLE} {
  chain out { type nat hook output priority -100; policy accept;
    ip daddr ${HOST_IP} tcp dport ${DNAT_PORT} dnat to ${addr}:7002
    ip daddr ${HOST_IP} tcp dport ${DNAT_PORT + 1} dnat to ${addr}:7000
  }
}
`);
  const hasDnat = dnat.status === 0;
  if (!hasDnat) console.error(`nft DNAT rule refused: ${dnat.stderr}`);

  const LOOP = 'host loopback (no sandbox)';
  const loopMb = await mbps('127.0.0.1', loop.source);
  const loopPing = await pings('127.0.0.1', loop.echo, PINGS);
  const tput = (name: string, mb: number, target = '-', pass?: boolean) =>
    rows.push({ name: `${name}: TCP download MB/s`, throughputPerSec: mb, ratio: mb / loopMb, ratioAgainst: LOOP, target, ...(pass === undefined ? {} : { pass }) });
  const rtt = (name: string, s: number[]) =>
    rows.push({ name: `${name}: 1-byte round trip`, p50Ms: percentile(s, 50), p99Ms: percentile(s, 99), n: s.length, ratio: percentile(s, 50) / percentile(loopPing, 50), ratioAgainst: `${LOOP} (p50)` });
  tput(LOOP, loopMb);
  rtt(LOOP, loopPing);
  const directMb = await mbps(addr, 7002);
  tput('direct to the sandbox address', directMb);
  rtt('direct to the sandbox address', await pings(addr, 7000, PINGS));
  const rawMb = await mbps('127.0.0.1', rawSrc);
  tput('raw port (nube relay)', rawMb, '>= 0.5x host loopback', rawMb / loopMb >= 0.5);
  rows.push({ name: 'raw port (nube relay) vs direct: MB/s ratio', ratio: rawMb / directMb, ratioAgainst: 'direct to the sandbox address' });
  rtt('raw port (nube relay)', await pings('127.0.0.1', rawEcho, PINGS));
  await sshRows(id, post);
  if (hasDnat) {
    tput('nftables DNAT (not chosen)', await mbps(HOST_IP, DNAT_PORT));
    rtt('nftables DNAT (not chosen)', await pings(HOST_IP, DNAT_PORT + 1, PINGS));
  }
} finally {
  nft(`delete table ip ${DNAT_TABLE}\n`);
  loop.close();
  const rt = nube.services.sandboxes.core.runtime;
  for (const s of await rt.list()) await rt.destroy(s.id).catch(() => {});
  await nube.close();
  rmSync(dir, { recursive: true, force: true });
  rmSync((rt as NamespacesRuntime).runDir, { recursive: true, force: true });
}

const result = newResult('networking', rows, [
  `load average at the end of the run: ${loadavg().map((x) => x.toFixed(2)).join(' ')} (2 cores shared with other work)`,
  `throughput: the best of 3 downloads of ${BYTES / 2 ** 20} MB after an 8 MB warm-up; the source inside the sandbox is node, as on the host`,
  `round trips: ${PINGS} sequential 1-byte echoes on one connection`,
  'the client (downloads, round trips) is a separate node process; sources and the relay run in the bench process, as nube would',
  'ssh row: a new OpenSSH connection each time (key exchange, password auth with a ticket, session, exec through the in-sandbox helper), timed to the first byte of output; the API row is the same command through POST exec in the same run',
  'DNAT row: an nft output-hook DNAT from the bridge host address to the sandbox (the client is on this host); external clients would use the prerouting hook',
]);
printTable(rows);
console.log(`wrote ${writeResult(result)}`);
process.exit(0);
