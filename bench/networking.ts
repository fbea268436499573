// Networking benchmark: `npm run bench -- networking`. A real nube (in process, SQLite) with one
// sandbox running TCP and UDP echo servers and a TCP source inside. Measured in the same run:
//   - host loopback (servers on 127.0.0.1): the physical limit of this machine;
//   - direct to the sandbox's bridge address (what every forwarder adds to);
//   - the raw port as expose-raw gives it (nftables DNAT while the sandbox runs);
//   - nube's relay (what serves a raw port while the sandbox is suspended, and what raw ports were
//     before DNAT), opened on a host port of its own to the same servers.
// TCP throughput (MB/s of a 128 MB download), 1-byte round trips on one connection, connect latency
// (a new connection to its first echoed byte) and UDP 1-byte round trips (p50/p99) for each. Writes
// bench/results/networking.json.
import { spawn } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createSocket } from 'node:dgram';
import { createServer } from 'node:net';
import { loadavg } from 'node:os';
import { loadConfig } from '../src/config.js';
import { BASE62, randomToken } from '../src/platform/ids.js';
import type { NamespacesRuntime } from '../src/areas/sandboxes/runtime/namespaces/runtime.js';
import { openRawListener } from '../src/areas/sandboxes/networking/raw-listener.js';
import { buildServer } from '../src/server.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { percentile } from './lib/stats.js';

const ROOT = process.env.NUBE_BENCH_DATA ?? '/var/lib/nube-test';
const BRIDGE = 'nubedb0:10.104.192.1/18';
const RAW_FIRST = 42000;
const RELAY_PORT = 42100;
const BYTES = 128 * 1024 * 1024;
const PINGS = 2000;
const CONNECTS = 300;
const dir = `${ROOT}/bench-networking-${process.pid}`;

// Inside the sandbox: 7000 echoes (TCP), 7001 echoes (UDP), 7002 sends the number of bytes asked for
// (10 ASCII digits) and closes.
const SERVERS = `
const net = require('net');
net.createServer((s) => { s.setNoDelay(true); s.pipe(s); }).listen(7000);
const u = require('dgram').createSocket('udp4'); u.on('message', (m, r) => u.send(m, r.port, r.address)); u.bind(7001);
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
} else if (mode === 'connect') {
  (async () => {
    const times = [];
    for (let i = 0; i < Number(n); i++) {
      const t0 = performance.now();
      await new Promise((r, j) => { const s = net.connect({ host, port: Number(port), noDelay: true }, () => s.write('x')); s.once('data', () => { s.destroy(); r(); }); s.once('error', j); });
      times.push(performance.now() - t0);
    }
    out({ times });
  })().catch((e) => out({ error: e.message }));
} else if (mode === 'udp') {
  const s = require('dgram').createSocket('udp4');
  s.connect(Number(port), host, async () => {
    const times = [];
    for (let i = 0; i < Number(n); i++) {
      const t0 = performance.now();
      const got = await new Promise((r) => { const t = setTimeout(() => r(false), 1000); s.once('message', () => { clearTimeout(t); r(true); }); s.send('x'); });
      if (got) times.push(performance.now() - t0);
    }
    out(times.length ? { times, lost: Number(n) - times.length } : { error: 'no UDP answer' });
  });
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

function client<T>(mode: 'download' | 'ping' | 'connect' | 'udp', host: string, port: number, n: number): Promise<T> {
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
const connects = async (host: string, port: number, n: number) =>
  (await client<{ times: number[] }>('connect', host, port, n)).times;
const udpPings = async (host: string, port: number, n: number) =>
  (await client<{ times: number[] }>('udp', host, port, n)).times;

/** A host-only source and echo on loopback: the same protocol without any sandbox. */
function loopbackServers(): Promise<{ source: number; echo: number; udp: number; close: () => void }> {
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
  const udp = createSocket('udp4');
  udp.on('message', (m, r) => udp.send(m, r.port, r.address));
  return new Promise((resolve) => {
    src.listen(0, '127.0.0.1', () =>
      echo.listen(0, '127.0.0.1', () =>
        udp.bind(0, '127.0.0.1', () =>
          resolve({
            source: (src.address() as { port: number }).port,
            echo: (echo.address() as { port: number }).port,
            udp: udp.address().port,
            close: () => {
              src.close();
              echo.close();
              udp.close();
            },
          }),
        ),
      ),
    );
  });
}


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
    // No store image: the data dir is removed without unmounting one.
    NUBE_SANDBOX_STORE: 'copy',
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
const cleanups: (() => Promise<unknown>)[] = [];
try {
  await nube.services.sandboxes.core.runtime.ensureTemplate('base', (l) => console.log(l));
  const sbx = await post('/sandboxes', { timeoutSeconds: 1800 });
  const id = sbx.id as string;
  await post(`/sandboxes/${id}/files/write`, { path: '/root/servers.js', content: SERVERS });
  await post(`/sandboxes/${id}/bg`, { command: 'exec node /root/servers.js' });
  const addr = (await post(`/sandboxes/${id}/runtime`, {})).address as string;
  const echoExposure = await post(`/sandboxes/${id}/expose-raw`, { port: 7000 });
  const rawEcho = echoExposure.publicPort as number;
  // Where raw ports are (127.0.0.2 on a loopback nube: never the console's host).
  const rawHost = echoExposure.host as string;
  const rawSrc = (await post(`/sandboxes/${id}/expose-raw`, { port: 7002 })).publicPort as number;
  for (let i = 0; i < 100; i++) {
    if (await download(addr, 7002, 1).then(() => true, () => false)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const rawUdp = (await post(`/sandboxes/${id}/expose-raw`, { port: 7001, protocol: 'udp' })).publicPort as number;
  // nube's relay, as it serves a raw port while the sandbox is suspended (here: always on, to compare).
  const relays = await Promise.all(
    ([['tcp', 7002, 0], ['tcp', 7000, 1], ['udp', 7001, 1]] as const).map(([protocol, port, off]) =>
      openRawListener({ protocol, bind: '127.0.0.1', publicPort: RELAY_PORT + off, resolve: async () => ({ address: addr, port, woke: false }) }),
    ),
  );
  cleanups.push(() => Promise.all(relays.map((r) => r.close())));

  const LOOP = 'host loopback (no sandbox)';
  const loopMb = await mbps('127.0.0.1', loop.source);
  const loopPing = await pings('127.0.0.1', loop.echo, PINGS);
  const loopConnect = await connects('127.0.0.1', loop.echo, CONNECTS);
  const loopUdp = await udpPings('127.0.0.1', loop.udp, PINGS);
  const tput = (name: string, mb: number, target = '-', pass?: boolean) =>
    rows.push({ name: `${name}: TCP download MB/s`, throughputPerSec: mb, ratio: mb / loopMb, ratioAgainst: LOOP, target, ...(pass === undefined ? {} : { pass }) });
  const lat = (name: string, what: string, s: number[], base: number[]) =>
    rows.push({ name: `${name}: ${what}`, p50Ms: percentile(s, 50), p99Ms: percentile(s, 99), n: s.length, ratio: percentile(s, 50) / percentile(base, 50), ratioAgainst: `${LOOP} (p50)` });
  const latencies = async (name: string, host: string, echo: number, udp: number) => {
    lat(name, '1-byte round trip', host === '127.0.0.1' && echo === loop.echo ? loopPing : await pings(host, echo, PINGS), loopPing);
    lat(name, 'connect to first echoed byte', host === '127.0.0.1' && echo === loop.echo ? loopConnect : await connects(host, echo, CONNECTS), loopConnect);
    lat(name, 'UDP 1-byte round trip', host === '127.0.0.1' && udp === loop.udp ? loopUdp : await udpPings(host, udp, PINGS), loopUdp);
  };
  tput(LOOP, loopMb);
  await latencies(LOOP, '127.0.0.1', loop.echo, loop.udp);
  const DIRECT = 'direct to the sandbox address';
  const directMb = await mbps(addr, 7002);
  tput(DIRECT, directMb);
  await latencies(DIRECT, addr, 7000, 7001);
  const RAW = 'raw port (nftables DNAT, what expose-raw gives a running sandbox)';
  const rawMb = await mbps(rawHost, rawSrc);
  tput(RAW, rawMb, '>= 0.5x host loopback', rawMb / loopMb >= 0.5);
  rows.push({ name: `${RAW} vs direct: MB/s ratio`, ratio: rawMb / directMb, ratioAgainst: DIRECT });
  await latencies(RAW, rawHost, rawEcho, rawUdp);
  const RELAY = "nube's relay (serves a suspended sandbox's raw port)";
  const relayMb = await mbps('127.0.0.1', RELAY_PORT);
  tput(RELAY, relayMb);
  rows.push({ name: `${RELAY} vs direct: MB/s ratio`, ratio: relayMb / directMb, ratioAgainst: DIRECT });
  await latencies(RELAY, '127.0.0.1', RELAY_PORT + 1, RELAY_PORT + 1);
  await sshRows(id, post);
} finally {
  for (const c of cleanups) await c();
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
  `round trips: ${PINGS} sequential 1-byte echoes on one connection (UDP: ${PINGS} sequential datagrams); connect: ${CONNECTS} new connections, each timed to its first echoed byte`,
  'the client (downloads, round trips) is a separate node process; sources and the relay run in the bench process, as nube would',
  'ssh row: a new OpenSSH connection each time (key exchange, password auth with a ticket, session, exec through the in-sandbox helper), timed to the first byte of output; the API row is the same command through POST exec in the same run',
  'raw port rows: the ports expose-raw answered, reached at the host it answered (127.0.0.2 on a loopback nube; nube DNATs them in the output hook and masquerades to the bridge address); clients on other machines take the prerouting hook',
  "relay rows: nube's relay code (raw-listener.ts) in the bench process on ports of its own, to the same servers",
]);
printTable(rows);
console.log(`wrote ${writeResult(result)}`);
process.exit(0);
