// HLS with Debian's ffmpeg: what a video holds (ffprobe), then one ffmpeg run that makes every rendition
// at once (the source decoded once): H.264 + AAC, 5 s segments (keyframes forced on the boundaries, so
// every rendition cuts at the same instants), a VOD playlist per rendition and a master playlist.
import { spawn } from 'node:child_process';

export interface Probe {
  width: number;
  height: number;
  durationSeconds: number;
  audio: boolean;
}

export interface Rendition {
  name: string;
  width: number;
  height: number;
  /** Peak bits per second announced in the master playlist. */
  bandwidth: number;
}

/** Rendition heights and their video bitrates (kbit/s); those above the source's height are left out. */
const LADDER = [
  { height: 360, kbps: 800 },
  { height: 720, kbps: 2800 },
];
const AUDIO_KBPS = 128;
export const SEGMENT_SECONDS = 5;

/** A failure of the file itself (not a video, unreadable): the job ends with it, in words. */
export class NotAVideo extends Error {}

function runTool(
  cmd: string,
  args: string[],
  signal: AbortSignal,
  onStdout?: (chunk: string) => void,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], signal });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      const s = d.toString();
      if (onStdout) onStdout(s);
      else stdout += s;
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-8000);
    });
    child.once('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT')
        reject(
          new Error(
            `${cmd} is not installed on this host (Debian package ffmpeg; scripts/setup.sh installs it)`,
          ),
        );
      else reject(e);
    });
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export async function probe(input: string, signal: AbortSignal): Promise<Probe> {
  const r = await runTool(
    'ffprobe',
    ['-v', 'error', '-print_format', 'json', '-show_streams', '-show_format', input],
    signal,
  );
  if (r.code !== 0)
    throw new NotAVideo(
      `the file is not a video ffmpeg can read: ${lastLine(r.stderr) || `ffprobe exited with ${r.code}`}`,
    );
  const j = JSON.parse(r.stdout) as {
    streams?: { codec_type?: string; width?: number; height?: number; duration?: string }[];
    format?: { duration?: string };
  };
  const streams = j.streams ?? [];
  const video = streams.find((s) => s.codec_type === 'video' && s.width && s.height);
  if (!video) {
    const kinds = [...new Set(streams.map((s) => s.codec_type ?? 'unknown'))];
    throw new NotAVideo(
      `the file has no video stream${kinds.length ? ` (it holds ${kinds.join(', ')})` : ''}`,
    );
  }
  const duration = Number(j.format?.duration ?? video.duration ?? 0);
  return {
    width: video.width!,
    height: video.height!,
    durationSeconds: Number.isFinite(duration) ? duration : 0,
    audio: streams.some((s) => s.codec_type === 'audio'),
  };
}

/** The renditions for a source: the ladder's steps up to its height, or the source's own height when below them all. */
export function renditionsFor(p: Probe): Rendition[] {
  const even = (n: number) => Math.max(2, Math.round(n / 2) * 2);
  const steps = LADDER.filter((s) => s.height <= p.height);
  const chosen = steps.length ? steps : [{ height: even(p.height), kbps: LADDER[0]!.kbps }];
  return chosen.map((s, i) => ({
    name: `v${i}`,
    height: s.height,
    width: even((p.width * s.height) / p.height),
    bandwidth: Math.round((s.kbps * 1.1 + (p.audio ? AUDIO_KBPS : 0)) * 1000),
  }));
}

/** ffmpeg's arguments: every rendition from one decode, into `outDir` (master.m3u8, v<i>/index.m3u8, v<i>/seg_NNN.ts). */
export function ffmpegArgs(input: string, outDir: string, p: Probe, renditions: Rendition[]): string[] {
  const n = renditions.length;
  const split = `[0:v]split=${n}${renditions.map((_, i) => `[s${i}]`).join('')};${renditions.map((r, i) => `[s${i}]scale=${r.width}:${r.height}[o${i}]`).join(';')}`;
  const args = ['-hide_banner', '-nostats', '-y', '-i', input, '-filter_complex', split];
  renditions.forEach((r, i) => {
    const kbps = Math.round((r.bandwidth / 1000 - (p.audio ? AUDIO_KBPS : 0)) / 1.1);
    args.push(
      '-map',
      `[o${i}]`,
      `-c:v:${i}`,
      'libx264',
      `-b:v:${i}`,
      `${kbps}k`,
      `-maxrate:v:${i}`,
      `${Math.round(kbps * 1.1)}k`,
      `-bufsize:v:${i}`,
      `${kbps * 2}k`,
    );
  });
  if (p.audio) for (let i = 0; i < n; i++) args.push('-map', 'a:0');
  if (p.audio) args.push('-c:a', 'aac', '-b:a', `${AUDIO_KBPS}k`, '-ac', '2');
  args.push(
    '-preset',
    'veryfast',
    '-pix_fmt',
    'yuv420p',
    '-force_key_frames',
    `expr:gte(t,n_forced*${SEGMENT_SECONDS})`,
    '-sc_threshold',
    '0',
    '-f',
    'hls',
    '-hls_time',
    String(SEGMENT_SECONDS),
    '-hls_playlist_type',
    'vod',
    '-hls_segment_filename',
    `${outDir}/v%v/seg_%03d.ts`,
    '-master_pl_name',
    'master.m3u8',
    '-var_stream_map',
    renditions.map((_, i) => (p.audio ? `v:${i},a:${i}` : `v:${i}`)).join(' '),
    '-progress',
    'pipe:1',
    `${outDir}/v%v/index.m3u8`,
  );
  return args;
}

/** Runs ffmpeg; `onProgress` gets 0..1 from its progress reports. */
export async function transcode(
  input: string,
  outDir: string,
  p: Probe,
  renditions: Rendition[],
  signal: AbortSignal,
  onProgress: (f: number) => void,
): Promise<void> {
  const total = p.durationSeconds * 1_000_000;
  let pending = '';
  const r = await runTool('ffmpeg', ffmpegArgs(input, outDir, p, renditions), signal, (chunk) => {
    pending += chunk;
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      const m = /^out_time_us=(\d+)/.exec(line) ?? /^out_time_ms=(\d+)/.exec(line);
      if (m && total > 0) onProgress(Math.min(0.99, Number(m[1]) / total));
    }
  });
  if (r.code !== 0)
    throw new NotAVideo(
      `ffmpeg could not make the HLS renditions: ${lastLine(r.stderr) || `it exited with ${r.code}`}`,
    );
}

function lastLine(s: string): string {
  return s.trim().split('\n').filter(Boolean).at(-1)?.slice(0, 300) ?? '';
}
