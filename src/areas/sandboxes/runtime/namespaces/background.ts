import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync } from 'node:fs';
import { mkdir, open, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import type { BackgroundDetail, BackgroundLogsQuery, BackgroundProcess } from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import type { SandboxCgroup } from './cgroups.js';
import { sandboxEnv } from './exec.js';
import { isAlive } from './proc.js';
import type { SandboxRecord } from './state.js';

interface BgMeta {
  execId: string;
  command: string;
  startedAt: string;
  helperPid: number;
}

export function files(bgDir: string, execId: string) {
  const dir = `${bgDir}/${execId}`;
  return {
    execId,
    dir,
    meta: `${dir}/meta.json`,
    stdout: `${dir}/stdout`,
    stderr: `${dir}/stderr`,
    status: `${dir}/status`,
    pid: `${dir}/pid`,
  };
}

/**
 * Start a process that outlives the request and nube itself: the helper is detached, its output goes
 * to files, and its host-side parent writes the exit status to a file when the command ends.
 */
export async function startBackground(
  helper: string,
  bgDir: string,
  rec: SandboxRecord,
  cg: SandboxCgroup,
  command: string,
  opts: { cwd?: string; env?: Record<string, string> },
): Promise<string> {
  if (!rec.init) throw new SandboxRuntimeError('InvalidState', `sandbox ${rec.id} is not running`);
  const execId = `bg_${randomBytes(8).toString('hex')}`;
  const f = files(bgDir, execId);
  await mkdir(f.dir, { recursive: true });
  const args = ['enter', '--target', String(rec.init.innerPid)];
  for (const d of cg.dirs()) args.push('--cgroup', d);
  args.push('--cwd', opts.cwd ?? '/root', '--status-file', f.status, '--pid-file', f.pid);
  args.push('--', '/bin/sh', '-c', command);
  await launchDetached(f, command, helper, args, sandboxEnv(rec, opts.env));
  return execId;
}

/**
 * Spawn the host-side process of a /bg command detached (it outlives nube), output to the log files,
 * write its meta, and wait for the pid file so that an immediate kill finds the process.
 */
export async function launchDetached(
  f: ReturnType<typeof files>,
  command: string,
  cmd: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  pidFile = f.pid,
): Promise<void> {
  const out = openSync(f.stdout, 'a');
  const err = openSync(f.stderr, 'a');
  const child = spawn(cmd, args, { detached: true, stdio: ['ignore', out, err], env });
  closeSync(out);
  closeSync(err);
  child.unref();
  const meta: BgMeta = { execId: f.execId, command, startedAt: new Date().toISOString(), helperPid: child.pid ?? 0 };
  await writeFile(f.meta, JSON.stringify(meta));
  for (let i = 0; i < 1000 && !existsSync(pidFile) && !existsSync(f.status); i++) {
    await new Promise((r) => setTimeout(r, 2));
  }
}

async function describe(bgDir: string, execId: string): Promise<BackgroundProcess> {
  const f = files(bgDir, execId);
  const meta = JSON.parse(await readFile(f.meta, 'utf8')) as BgMeta;
  const base = { execId, command: meta.command, startedAt: meta.startedAt };
  if (existsSync(f.status)) {
    const text = (await readFile(f.status, 'utf8')).trim();
    const m = /^(exit|signal) (\d+)/.exec(text);
    const exitCode = m ? (m[1] === 'exit' ? Number(m[2]) : 128 + Number(m[2])) : null;
    const endedAt = (await stat(f.status)).mtime.toISOString();
    return { ...base, state: 'exited', exitCode, endedAt };
  }
  if (meta.helperPid && isAlive(meta.helperPid)) return { ...base, state: 'running', exitCode: null, endedAt: null };
  // The helper died without a status (the host rebooted, or it was killed): exited, code unknown.
  return { ...base, state: 'exited', exitCode: null, endedAt: null };
}

export async function listBackground(bgDir: string): Promise<BackgroundProcess[]> {
  if (!existsSync(bgDir)) return [];
  const ids = await readdir(bgDir);
  const out = await Promise.all(ids.map((id) => describe(bgDir, id).catch(() => null)));
  return out
    .filter((p): p is BackgroundProcess => p !== null)
    .sort((a, b) => a.startedAt.localeCompare(b.startedAt));
}

async function readFrom(path: string, offset: number, max: number): Promise<{ text: string; next: number }> {
  const fh = await open(path, 'r').catch(() => null);
  if (!fh) return { text: '', next: offset };
  try {
    const size = (await fh.stat()).size;
    const start = Math.min(Math.max(0, offset), size);
    const len = Math.min(max, size - start);
    const buf = Buffer.alloc(len);
    if (len > 0) await fh.read(buf, 0, len, start);
    return { text: buf.toString('utf8'), next: start + len };
  } finally {
    await fh.close();
  }
}

export async function getBackground(
  bgDir: string,
  execId: string,
  q: BackgroundLogsQuery = {},
): Promise<BackgroundDetail> {
  const f = files(bgDir, execId);
  if (!/^bg_[0-9a-f]+$/.test(execId) || !existsSync(f.meta)) {
    throw new SandboxRuntimeError('NotFound', `background process ${execId} not found`);
  }
  const p = await describe(bgDir, execId);
  const max = q.maxBytes ?? 1024 * 1024;
  const out = await readFrom(f.stdout, q.stdoutOffset ?? 0, max);
  const err = await readFrom(f.stderr, q.stderrOffset ?? 0, max);
  return { ...p, stdout: out.text, stderr: err.text, stdoutNextOffset: out.next, stderrNextOffset: err.next };
}

/** SIGTERM to the process group, SIGKILL after the grace period if anything is left. */
export async function killBackground(bgDir: string, execId: string, graceSeconds: number): Promise<void> {
  const f = files(bgDir, execId);
  if (!/^bg_[0-9a-f]+$/.test(execId) || !existsSync(f.meta)) {
    throw new SandboxRuntimeError('NotFound', `background process ${execId} not found`);
  }
  if (existsSync(f.status)) return;
  const pgid = Number((await readFile(f.pid, 'utf8').catch(() => '0')).trim());
  if (!pgid) return;
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pgid, sig);
      return true;
    } catch {
      return false;
    }
  };
  if (!signal('SIGTERM')) return;
  const deadline = Date.now() + graceSeconds * 1000;
  while (Date.now() < deadline) {
    if (!signal(0 as unknown as NodeJS.Signals)) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  signal('SIGKILL');
  for (let i = 0; i < 250 && !existsSync(f.status); i++) await new Promise((r) => setTimeout(r, 4));
}
