// HLS benchmark: `npm run bench -- hls`. A 60 s 720p test video (ffmpeg's testsrc + a sine, made
// here) turned into HLS renditions two ways in the same run: the same ffmpeg command nube runs
// (src/areas/files/hls-transcode.ts), run by hand on a local file (the floor), and through nube
// (upload done, then POST /files/{id}/hls until ready: the copy out of the blob store, ffprobe,
// ffmpeg, the upload of the segments). Target: nube within 1.3x of the command by hand.
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ffmpegArgs, probe, renditionsFor } from '../src/areas/files/hls-transcode.js';
import { startBenchNube } from './lib/nube.js';
import { newResult, printTable, type ResultRow, writeResult } from './lib/result.js';
import { summarize } from './lib/stats.js';

const SECONDS = Number(process.env.BENCH_HLS_SECONDS ?? 60);
const RUNS = Number(process.env.BENCH_HLS_RUNS ?? 3);

const dir = mkdtempSync(join(tmpdir(), 'nube-bench-hls-'));
const rows: ResultRow[] = [];
const notes: string[] = [];
const n = await startBenchNube('hls');
try {
  const src = join(dir, 'src.mp4');
  execFileSync('ffmpeg', [
    '-v',
    'error',
    '-y',
    '-f',
    'lavfi',
    '-i',
    'testsrc=size=1280x720:rate=30',
    '-f',
    'lavfi',
    '-i',
    'sine=frequency=440',
    '-t',
    String(SECONDS),
    '-c:v',
    'libx264',
    '-preset',
    'veryfast',
    '-c:a',
    'aac',
    '-shortest',
    src,
  ]);
  const bytes = readFileSync(src);
  const p = await probe(src, new AbortController().signal);
  const renditions = renditionsFor(p);

  const api = (path: string, init: RequestInit = {}) =>
    fetch(`${n.base}/api/v2${path}`, {
      ...init,
      headers: { authorization: `Bearer ${n.key}`, 'content-type': 'application/json' },
    });
  const throughNube = async (i: number): Promise<number> => {
    const created = (await (
      await api('/files', {
        method: 'POST',
        body: JSON.stringify({ fileName: `v${i}.mp4`, contentType: 'video/mp4', size: bytes.byteLength }),
      })
    ).json()) as {
      file: { id: string };
      putUrl: string;
    };
    await fetch(created.putUrl, { method: 'PUT', body: bytes, headers: { 'content-type': 'video/mp4' } });
    const t0 = performance.now();
    await api(`/files/${created.file.id}/hls`, { method: 'POST' });
    for (;;) {
      const h = (await (await api(`/files/${created.file.id}/hls`)).json()) as {
        status: string;
        error: string | null;
      };
      if (h.status === 'failed') throw new Error(`HLS failed: ${h.error}`);
      if (h.status === 'ready') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    return performance.now() - t0;
  };

  // By hand and through nube taken in turns, so a change of the machine's load falls on both alike.
  const byHand: number[] = [];
  const viaNube: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const out = join(dir, `hand-${i}`);
    const t0 = performance.now();
    // Not execFileSync: nube runs in this process, and its timers (keep-alive) must go on meanwhile.
    await promisify(execFile)('ffmpeg', ffmpegArgs(src, out, p, renditions));
    byHand.push(performance.now() - t0);
    viaNube.push(await throughNube(i));
  }
  const hand = summarize(byHand);
  const HAND = 'ffmpeg by hand, the same command (the floor)';
  // Throughput: seconds of video made into HLS per second of wall time.
  rows.push({
    name: HAND,
    p50Ms: hand.p50Ms,
    p99Ms: hand.p99Ms,
    throughputPerSec: SECONDS / (hand.p50Ms / 1000),
  });
  const nube = summarize(viaNube);
  const ratio = nube.p50Ms / hand.p50Ms;
  rows.push({
    name: 'POST /files/{id}/hls -> ready (60 s 720p video)',
    p50Ms: nube.p50Ms,
    p99Ms: nube.p99Ms,
    throughputPerSec: SECONDS / (nube.p50Ms / 1000),
    ratio,
    ratioAgainst: HAND,
    target: '<= 1.3x by hand',
    pass: ratio <= 1.3,
  });
  notes.push(
    `source: ${SECONDS} s, ${p.width}x${p.height}, ${(bytes.byteLength / 1e6).toFixed(1)} MB; renditions ${renditions.map((r) => `${r.height}p`).join(', ')}, ${RUNS} runs each, by hand and through nube in turns`,
    'throughput: seconds of video per second of wall time; nube: the SQLite store and the local blob store; its time includes the copy out of the blob store, ffprobe, the upload of the segments and the 50 ms poll',
  );
} finally {
  await n.close();
  rmSync(dir, { recursive: true, force: true });
  const result = newResult('hls', rows, notes);
  printTable(result.rows);
  writeResult(result);
}
