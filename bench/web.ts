/**
 * Web fetch benchmark: POST /api/v2/web/fetch of a local article (~30 KB of HTML) through nube (SSRF
 * guard, undici, Readability on linkedom, turndown, metering) against a direct undici fetch of the same
 * page in the same run. The page is served by a child process (its own event loop); nube runs in this
 * process. Sequential rows time one request at a time (latency); load rows use wrk (closed loop).
 * Run: `npm run bench -- web [seconds]`.
 */
import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Agent, fetch as undiciFetch } from 'undici';
import { runLoad } from './lib/load.js';
import { startBenchNube } from './lib/nube.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { timeIt } from './lib/stats.js';

const CONNECTIONS = 8;

function articleHtml(): string {
  const para = (i: number) =>
    `<p>Paragraph ${i} of the article: agents read the web through nube, which fetches a page, keeps its main ` +
    `content and hands it back as Markdown with <a href="/link/${i}">a link</a>, <em>emphasis</em> and <code>code</code>. ` +
    'The rest of the sentence is filler so that the page weighs what a news article weighs. '.repeat(2) +
    '</p>';
  const nav = Array.from({ length: 40 }, (_, i) => `<li><a href="/section/${i}">Section ${i}</a></li>`).join('');
  const body = Array.from({ length: 60 }, (_, i) => (i % 10 === 0 ? `<h2>Part ${i / 10}</h2>` : '') + para(i)).join('');
  return (
    '<!doctype html><html><head><meta charset="utf-8"><title>Benchmark article</title>' +
    '<meta name="description" content="A page for the web bench"><style>body{font:16px sans-serif}</style>' +
    `<script>var x = ${'1+'.repeat(200)}1;</script></head><body><header><nav><ul>${nav}</ul></nav></header>` +
    `<main><article><h1>Benchmark article</h1>${body}</article></main><aside>${nav}</aside><footer>Footer</footer></body></html>`
  );
}

async function startSite(): Promise<{ url: string; stop(): void }> {
  const child = fork(fileURLToPath(import.meta.url), ['site'], { execArgv: ['--import', 'tsx'] });
  const port = await new Promise<number>((resolve) => child.once('message', (m: { port: number }) => resolve(m.port)));
  return { url: `http://127.0.0.1:${port}/article`, stop: () => child.kill() };
}

async function main(): Promise<void> {
  const seconds = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 8);
  const site = await startSite();
  const { nube, base, key, close } = await startBenchNube('web', { NUBE_RATE_LIMIT_PER_MINUTE: '10000000' });
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const api = `${base}/api/v2/web/fetch`;
  const agent = new Agent({ connections: CONNECTIONS });
  const rows: ResultRow[] = [];
  try {
    const owner = ((await (await fetch(`${base}/api/v2/account`, { headers })).json()) as { id: string }).id;
    // Keeps the plan's monthly allowance (Tera: 50,000 queries) from answering 402 mid-run.
    let charged = 0;
    const resetBalance = async () => {
      charged += await nube.deps.usage.counter(owner, 'webQueries');
      await nube.deps.store.db.deleteFrom('usage_counters').execute();
    };
    const direct = async () => {
      const r = await undiciFetch(site.url, { dispatcher: agent });
      await r.text();
    };
    const viaNube = (asMarkdown: boolean) => async () => {
      const r = await undiciFetch(api, { dispatcher: agent, method: 'POST', headers, body: JSON.stringify({ url: site.url, asMarkdown }) });
      const b = (await r.json()) as { markdown?: string; html?: string };
      if (r.status !== 200 || !(b.markdown ?? b.html)) throw new Error(`web.fetch answered ${r.status}`);
    };
    const seq = { iterations: 2000, warmup: 100, maxMs: seconds * 1000 };
    const bareSeq = await timeIt(direct, seq);
    const bareSeqRow: ResultRow = { name: 'direct undici fetch of the page, sequential', p50Ms: bareSeq.p50Ms, p99Ms: bareSeq.p99Ms, throughputPerSec: bareSeq.throughputPerSec };
    for (const asMarkdown of [true, false]) {
      const s = await timeIt(viaNube(asMarkdown), seq);
      rows.push({
        name: `nube POST /web/fetch ${asMarkdown ? 'as Markdown' : 'raw HTML'}, sequential`,
        p50Ms: s.p50Ms,
        p99Ms: s.p99Ms,
        throughputPerSec: s.throughputPerSec,
        ratio: s.throughputPerSec / bareSeq.throughputPerSec,
        ratioAgainst: bareSeqRow.name,
      });
    }
    rows.push(bareSeqRow);

    const bareLoad = await runLoad({ url: site.url, connections: CONNECTIONS, durationSec: seconds });
    const bareLoadRow: ResultRow = {
      name: `wrk GET of the page directly, ${CONNECTIONS} connections`,
      p50Ms: bareLoad.p50Ms,
      p99Ms: bareLoad.p99Ms,
      throughputPerSec: bareLoad.throughputPerSec,
    };
    for (const asMarkdown of [true, false]) {
      await resetBalance();
      const l = await runLoad({
        url: api,
        method: 'POST',
        headers,
        body: JSON.stringify({ url: site.url, asMarkdown }),
        connections: CONNECTIONS,
        durationSec: seconds,
      });
      if (l.non2xx || l.errors) throw new Error(`load run: ${l.non2xx} non-2xx, ${l.errors} errors`);
      rows.push({
        name: `nube POST /web/fetch ${asMarkdown ? 'as Markdown' : 'raw HTML'}, wrk ${CONNECTIONS} connections`,
        p50Ms: l.p50Ms,
        p99Ms: l.p99Ms,
        throughputPerSec: l.throughputPerSec,
        ratio: l.throughputPerSec / bareLoad.throughputPerSec,
        ratioAgainst: bareLoadRow.name,
      });
    }
    rows.push(bareLoadRow);
    await resetBalance();
    printTable(rows);
    const size = articleHtml().length;
    const notes = [
      `The page: ${size} bytes of HTML (nav, aside, 60 paragraphs with links, a script and a style), served by node:http in a child process.`,
      'nube in this process: each call checks the balance (2 counter reads), fetches through the SSRF-guarded undici Agent (keep-alive), parses with linkedom, runs Readability and turndown (Markdown rows) or only collects links and title (raw rows), and adds one web query (an upsert).',
      `ratio = throughput / the direct row of the same kind (sequential undici fetch; wrk GET). ${charged} web queries were charged during the run.`,
      "Measured on a 2-core VM shared with other engineers' test runs: compare rows within one run, not across runs.",
    ];
    console.log(`wrote ${writeResult(newResult('web', rows, notes))}`);
  } finally {
    await agent.close();
    await close();
    site.stop();
  }
}

function siteChild(): void {
  const html = Buffer.from(articleHtml());
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-length': html.length });
    res.end(html);
  });
  server.keepAliveTimeout = 30_000;
  server.listen(0, '127.0.0.1', () => process.send?.({ port: (server.address() as AddressInfo).port }));
  process.on('disconnect', () => process.exit(0));
}

if (process.argv[2] === 'site') siteChild();
else await main();
