/**
 * Console benchmark (issue 16's speed targets): the first load of /console in headless Chromium (cold
 * cache each time: compressed JS+CSS bytes, time until the first screen takes input) and the terminal's
 * keystroke echo through the sandboxes.terminal WebSocket (a key sent, its echo back from `cat` on a
 * PTY in a sandbox). Physical limits in the same run: a blank page from a bare node:http server loaded
 * the same way, and a WebSocket echo on loopback (ws, same process, no sandbox).
 * Run: `npm run bench -- console [loads] [keystrokes]`.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg } from 'node:os';
import { chromium } from 'playwright-core';
import WebSocket, { WebSocketServer } from 'ws';
import { Nube, type WebSocketClass } from '../packages/sdk/src/index.js';
import { ensureConsoleBuilt } from '../test/console/console-build.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { startSandboxNube } from './lib/sandbox-nube.js';
import { summarize } from './lib/stats.js';

const LOADS = Number(process.argv[2] ?? 15);
const KEYS = Number(process.argv[3] ?? 300);
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

async function pageLoads(url: string, mark: string | null, n: number) {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ARGS });
  const times: number[] = [];
  let bytes = 0;
  try {
    for (let i = 0; i < n; i++) {
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      await page.goto(url);
      if (mark) await page.waitForFunction((m) => performance.getEntriesByName(m).length > 0, mark);
      const r = await page.evaluate((m) => {
        // Browser types, read loosely: this file compiles against Node's lib.
        const res = performance.getEntriesByType('resource') as unknown as { name: string; transferSize: number }[];
        const nav = (performance.getEntriesByType as (t: string) => unknown[])('navigation')[0] as { domInteractive: number };
        return {
          ms: m ? performance.getEntriesByName(m)[0]!.startTime : nav.domInteractive,
          bytes: res.filter((x) => /\.(js|css)$/.test(x.name)).reduce((s, x) => s + x.transferSize, 0),
        };
      }, mark);
      times.push(r.ms);
      bytes = r.bytes;
      await ctx.close();
    }
  } finally {
    await browser.close();
  }
  return { ...summarize(times), bytes };
}

/** One byte back per key (`cat` on a raw PTY without echo, or the plain echo): each wait is for its own byte. */
async function echoTimes(send: (ch: string) => void, received: () => number, n: number): Promise<number[]> {
  const times: number[] = [];
  const base = received();
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    send(String.fromCharCode(97 + (i % 26)));
    while (received() < base + i + 1) await new Promise((r) => setImmediate(r));
    times.push(performance.now() - t0);
  }
  return times;
}

async function main() {
  await ensureConsoleBuilt();
  const { nube, key, baseUrl } = await startSandboxNube('console', process.env.NUBE_BENCH_BRIDGE ?? 'nubecon0:10.102.0.1/16', {});
  const rows: ResultRow[] = [];
  try {
    // First load.
    const blank = createServer((_q, s) => s.end('<!doctype html><title>blank</title><p>blank</p>'));
    await new Promise<void>((r) => blank.listen(0, '127.0.0.1', r));
    const bare = await pageLoads(`http://127.0.0.1:${(blank.address() as AddressInfo).port}/`, null, LOADS);
    blank.close();
    const con = await pageLoads(`${baseUrl}/console`, 'console-interactive', LOADS);
    rows.push({ name: 'blank page, bare node:http (limit)', p50Ms: bare.p50Ms, p99Ms: bare.p99Ms });
    rows.push({
      name: 'console first load to interactive',
      p50Ms: con.p50Ms,
      p99Ms: con.p99Ms,
      ratio: con.p50Ms / bare.p50Ms,
      ratioAgainst: 'blank page, bare node:http (limit)',
      compressedKB: con.bytes / 1024,
      target: '<= 250 KB compressed JS+CSS, < 1000 ms',
      pass: con.bytes <= 250 * 1024 && con.p50Ms < 1000,
    });

    // Keystroke echo: a bare WebSocket echo on loopback, then the terminal into a sandbox.
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise((r) => wss.once('listening', r));
    wss.on('connection', (s) => s.on('message', (d, bin) => s.send(d, { binary: bin })));
    const plain = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`);
    await new Promise((r) => plain.once('open', r));
    let got = 0;
    plain.on('message', () => got++);
    const wsTimes = await echoTimes((c) => plain.send(Buffer.from(c)), () => got, KEYS);
    plain.close();
    wss.close();
    const sdk = new Nube({ baseUrl, apiKey: key });
    const created = await sdk.sandboxes.create({ template: 'base' });
    for (let s = created; s.status === 'starting'; s = await sdk.sandboxes.get(created.id)) await new Promise((r) => setTimeout(r, 500));
    const term = sdk.openTerminal(created.id, { WebSocket: WebSocket as unknown as WebSocketClass });
    let out = 0;
    term.onData((d) => {
      out += d.length;
    });
    await term.ready;
    term.write('stty raw -echo; cat\r');
    await new Promise((r) => setTimeout(r, 1000));
    out = 0;
    const started = performance.now();
    const termTimes = await echoTimes((c) => term.write(c), () => out, KEYS);
    if (out !== KEYS) throw new Error(`expected ${KEYS} bytes back, got ${out}`);
    const elapsed = (performance.now() - started) / 1000;
    term.close();
    const ws = summarize(wsTimes);
    const tt = summarize(termTimes);
    rows.push({ name: 'WebSocket echo on loopback, no sandbox (limit)', p50Ms: ws.p50Ms, p99Ms: ws.p99Ms, throughputPerSec: KEYS / (wsTimes.reduce((a, b) => a + b, 0) / 1000) });
    rows.push({
      name: 'terminal keystroke echo (sandbox PTY)',
      p50Ms: tt.p50Ms,
      p99Ms: tt.p99Ms,
      throughputPerSec: KEYS / elapsed,
      ratio: tt.p50Ms / ws.p50Ms,
      ratioAgainst: 'WebSocket echo on loopback, no sandbox (limit)',
      target: 'p50 < 10 ms',
      pass: tt.p50Ms < 10,
    });
    await sdk.sandboxes.delete(created.id);
  } finally {
    await nube.close();
  }
  printTable(rows);
  const load = loadavg().map((x) => x.toFixed(1)).join(' ');
  console.log(`load average: ${load}`);
  writeResult(
    newResult('console', rows, [
      `${LOADS} cold loads (a new browser context each) and ${KEYS} sequential keystrokes; latency ratios are this row's p50 over the limit's p50 (lower is better).`,
      'Interactive = the console\'s own performance mark when its first screen (sign-in) renders and takes input.',
      `The machine was shared with other work during the run (load average ${load}, 2 cores).`,
    ]),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
