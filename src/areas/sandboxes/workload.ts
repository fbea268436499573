// What runs inside a sandbox: exec, run-code, background processes, files, patches.
import { randomBytes } from 'node:crypto';
import type { z } from 'zod';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { type SandboxFileOp, sandboxFileBodies } from './action-bodies.js';
import type { SandboxRow } from './repo.js';
import type { BackgroundDetail, BackgroundProcess, ExecResult, OutputSinks, StreamExecOptions, StreamExecResult } from './runtime/driver.js';
import type { BgExec } from './schemas.js';
import { bootstrapOf, type SandboxesCore } from './service.js';
import { asUserCommand, userEnv } from './run-as.js';
import { rt } from './views.js';

export type Lang = 'python' | 'node' | 'bash';
/** Bytes per command when a file moves into or out of a sandbox in pieces. */
const BOX_CHUNK = 4 * 1024 * 1024;
/** Interpreter per language; the code goes to a file inside, so it never passes through a shell string. */
export const INTERPRETERS: Record<Lang, { argv0: string; ext: string }> = {
  python: { argv0: 'python3', ext: 'py' },
  node: { argv0: 'node', ext: 'js' },
  bash: { argv0: 'bash', ext: 'sh' },
};

type BgView = z.input<typeof BgExec>;

function bgView(p: BackgroundProcess | BackgroundDetail): BgView {
  const base: BgView = {
    execId: p.execId,
    command: p.command,
    state: p.state,
    exitCode: p.exitCode,
    startedAt: p.startedAt,
    endedAt: p.endedAt,
  };
  if ('stdoutNextOffset' in p) {
    base.logs = {
      stdout: p.stdout,
      stderr: p.stderr,
      stdoutNextOffset: p.stdoutNextOffset,
      stderrNextOffset: p.stderrNextOffset,
    };
  }
  return base;
}

export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const r = schema.safeParse(body ?? {});
  if (!r.success) {
    throw errors.validation(r.error.issues.map((i) => ({ path: ['body', ...i.path.map((x) => (typeof x === 'symbol' ? String(x) : x))], message: i.message, code: i.code })));
  }
  return r.data;
}

export class Workload {
  constructor(private readonly core: SandboxesCore) {}

  /** The caller's sandbox, woken if suspended, with its idle clock re-armed. */
  async active(p: Principal, id: string): Promise<SandboxRow> {
    const own = await this.core.own(p, id);
    await this.core.cpu.assertCap(p);
    const row = await this.core.ensureRunning(own);
    await this.core.clocks.touch(row);
    return row;
  }

  /**
   * A command line, cwd and env for the user a call runs as (its `user`, else the template's): the
   * command wrapped in the switch, the user's home as the cwd when none is named, HOME, USER and
   * LOGNAME beneath the call's env. As given for root.
   */
  /** `command` as the sandbox's template user (the kernel bridge, which runs cells: as exec would). */
  asTemplateUser(row: SandboxRow, command: string) {
    return this.asUser(row, { command });
  }

  private async asUser(row: SandboxRow, b: { command: string; cwd?: string; env?: Record<string, string>; user?: string }) {
    const u = await this.core.users.resolve(row.runtime_id, b.user, userOf(row));
    if (!u) return { command: b.command, cwd: b.cwd ?? cwdOf(row), env: b.env };
    return {
      command: asUserCommand(u, b.command, this.core.users.switcher(row.template)),
      cwd: b.cwd ?? cwdOf(row) ?? u.home,
      env: { ...userEnv(u), ...b.env },
    };
  }

  async exec(
    p: Principal,
    id: string,
    b: { command: string; cwd?: string; timeoutSeconds: number; env?: Record<string, string>; user?: string },
  ): Promise<ExecView> {
    const row = await this.active(p, id);
    const { command, ...o } = await this.asUser(row, b);
    return execView(await rt(this.core.runtime.exec(row.runtime_id, command, { ...o, timeoutMs: b.timeoutSeconds * 1000 })));
  }

  /**
   * Called before the API makes `path` in a sandbox whose template has a user: what gives it to that
   * user afterwards, as that user's commands would own it. A path that exists already keeps its owner
   * (writing over /etc/hosts must not hand it over); parent dirs made on the way stay root's.
   */
  private async ownerAfter(row: SandboxRow, path: string): Promise<() => Promise<void>> {
    const u = await this.core.users.resolve(row.runtime_id, undefined, userOf(row));
    if (!u) return async () => {};
    const quiet = { stdout: () => {}, stderr: () => {} };
    const o = { timeoutMs: 30_000, cwd: '/root' };
    const sid = row.runtime_id;
    const probe = await rt(this.core.runtime.execStream(sid, ['/bin/sh', '-c', '[ -e "$1" ] || [ -L "$1" ]', 'nube-exists', path], o, quiet));
    if (probe.exitCode === 0) return async () => {};
    return async () => {
      const argv =
        this.core.users.switcher(row.template) === 'runas'
          ? ['/.nube/runas', '--chown', String(u.uid), String(u.gid), path]
          : ['chown', '-h', `${u.uid}:${u.gid}`, '--', path];
      const r = await rt(this.core.runtime.execStream(sid, argv, o, quiet));
      if (r.exitCode !== 0) throw errors.conflict(`giving ${path} to user ${u.name} failed (exit ${r.exitCode})`, 'SandboxFileFailed');
    };
  }

  /**
   * Runs an argv with its output handed to `sinks` as it comes (the E2B adapter's process stream).
   * `onReady` is called once the sandbox is found running, before the command starts: an error before
   * then (no such sandbox) is the caller's to report as a failed start.
   */
  async execStream(
    p: Principal,
    id: string,
    argv: string[],
    opts: StreamExecOptions,
    sinks: OutputSinks,
    onReady?: () => void,
  ): Promise<StreamExecResult> {
    const row = await this.active(p, id);
    onReady?.();
    return rt(this.core.runtime.execStream(row.runtime_id, argv, { ...opts, cwd: opts.cwd ?? cwdOf(row) }, sinks));
  }

  /** Writes the code to a fresh file under /tmp inside, runs the interpreter on it, removes it. */
  /** Writes the code to a fresh file under /tmp inside, runs the interpreter on it (as the template's user), removes it. */
  async runCode(p: Principal, id: string, b: { code: string; lang: Lang; timeoutSeconds: number }): Promise<ExecView> {
    const row = await this.active(p, id);
    const it = INTERPRETERS[b.lang];
    const file = `/tmp/nube-run-${randomBytes(6).toString('hex')}.${it.ext}`;
    const give = await this.ownerAfter(row, file);
    await rt(this.core.runtime.writeFile(row.runtime_id, file, Buffer.from(b.code, 'utf8')));
    await give();
    // The path is ours (hex), never the caller's: safe to put in the command line.
    const { command, ...o } = await this.asUser(row, { command: `${it.argv0} ${file}; rc=$?; rm -f ${file}; exit $rc` });
    return execView(await rt(this.core.runtime.exec(row.runtime_id, command, { ...o, timeoutMs: b.timeoutSeconds * 1000 })));
  }

  async bgStart(p: Principal, id: string, b: { command: string; cwd?: string; env?: Record<string, string>; user?: string }) {
    const row = await this.active(p, id);
    const { command, ...o } = await this.asUser(row, b);
    return { execId: await rt(this.core.runtime.startBackground(row.runtime_id, command, o)) };
  }

  async bgList(p: Principal, id: string) {
    const row = await this.core.started(p, id);
    await this.core.clocks.touch(row);
    const processes = (await rt(this.core.runtime.listBackground(row.runtime_id))).map(bgView);
    return { count: processes.length, processes };
  }

  async bgGet(p: Principal, id: string, execId: string, q: { stdoutOffset?: number; stderrOffset?: number }) {
    const row = await this.core.started(p, id);
    await this.core.clocks.touch(row);
    return bgView(await rt(this.core.runtime.getBackground(row.runtime_id, execId, q)));
  }

  async bgKill(p: Principal, id: string, execId: string, graceSeconds?: number) {
    const row = await this.core.started(p, id);
    await this.core.clocks.touch(row);
    await rt(this.core.runtime.killBackground(row.runtime_id, execId, graceSeconds ?? 5));
    return { ok: true as const };
  }

  async file(p: Principal, id: string, op: SandboxFileOp, body: unknown): Promise<Record<string, unknown>> {
    const row = await this.active(p, id);
    const sid = row.runtime_id;
    const r = this.core.runtime;
    switch (op) {
      case 'write': {
        const b = parseBody(sandboxFileBodies.write, body);
        const data = b.encoding === 'base64' ? decodeBase64(b.content) : Buffer.from(b.content, 'utf8');
        const give = await this.ownerAfter(row, b.path);
        await rt(r.writeFile(sid, b.path, data));
        await give();
        return { ok: true, path: b.path, size: data.length };
      }
      case 'read': {
        const b = parseBody(sandboxFileBodies.read, body);
        const data = await rt(r.readFile(sid, b.path));
        // utf8 when the bytes are valid UTF-8 (unless base64 is asked for), base64 otherwise.
        const wantBase64 = (body as { encoding?: unknown } | undefined)?.encoding === 'base64';
        const asText = wantBase64 ? null : utf8OrNull(data);
        return asText !== null
          ? { path: b.path, content: asText, encoding: 'utf8', size: data.length }
          : { path: b.path, content: data.toString('base64'), encoding: 'base64', size: data.length };
      }
      case 'list': {
        const b = parseBody(sandboxFileBodies.list, body);
        return { path: b.path, entries: await rt(r.listDir(sid, b.path)) };
      }
      case 'delete': {
        const b = parseBody(sandboxFileBodies.delete, body);
        await rt(r.remove(sid, b.path, { recursive: b.recursive }));
        return { ok: true };
      }
      case 'move': {
        const b = parseBody(sandboxFileBodies.move, body);
        await rt(r.move(sid, b.from, b.to));
        return { ok: true };
      }
      case 'mkdir': {
        const b = parseBody(sandboxFileBodies.mkdir, body);
        const give = await this.ownerAfter(row, b.path);
        await rt(r.mkdir(sid, b.path));
        await give();
        return { ok: true };
      }
    }
  }

  /**
   * Writes `body` to `path` inside (created with its folders, or replaced), BOX_CHUNK bytes per
   * command, so a large file (a launch's source, a backup) never sits whole in nube's memory.
   * Answers the bytes written.
   */
  async writeFrom(p: Principal, id: string, path: string, body: AsyncIterable<Uint8Array>): Promise<number> {
    const row = await this.active(p, id);
    const give = await this.ownerAfter(row, path);
    let parts: Buffer[] = [];
    let held = 0;
    let size = 0;
    let started = false;
    const flush = async () => {
      const script = started ? 'exec cat >> "$1"' : 'mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"';
      started = true;
      await this.piped(row, ['/bin/sh', '-c', script, 'nube-write', path], parts.length === 1 ? parts[0] : Buffer.concat(parts, held));
      parts = [];
      held = 0;
    };
    for await (const c of body) {
      parts.push(Buffer.from(c.buffer, c.byteOffset, c.byteLength));
      held += c.byteLength;
      size += c.byteLength;
      if (held >= BOX_CHUNK) await flush();
    }
    if (held > 0 || !started) await flush();
    await give();
    return size;
  }

  /** The bytes of `path` inside, BOX_CHUNK at a time (the counterpart of writeFrom). */
  async *readFrom(p: Principal, id: string, path: string): AsyncGenerator<Buffer> {
    const row = await this.active(p, id);
    for (let block = 0; ; block++) {
      const argv = ['dd', `if=${path}`, `bs=${BOX_CHUNK}`, `skip=${block}`, 'count=1', 'iflag=fullblock', 'status=none'];
      const chunk = await this.piped(row, argv);
      if (chunk.length > 0) yield chunk;
      if (chunk.length < BOX_CHUNK) return;
    }
  }

  /** Runs an argv inside with `stdin`, answering its stdout (bounded by what the argv prints); a failure says why. */
  private async piped(row: SandboxRow, argv: string[], stdin?: Buffer): Promise<Buffer> {
    const out: Buffer[] = [];
    let err = '';
    const r = await rt(
      this.core.runtime.execStream(row.runtime_id, argv, { stdin, timeoutMs: 120_000 }, {
        stdout: (c) => out.push(c),
        stderr: (c) => {
          if (err.length < 2000) err += c.toString('utf8');
        },
      }),
    );
    if (r.exitCode !== 0 || r.timedOut) {
      throw errors.conflict(`moving a file in the sandbox failed (${r.timedOut ? 'timed out' : `exit ${r.exitCode}`}): ${err.trim().slice(0, 500)}`, 'SandboxFileFailed');
    }
    return Buffer.concat(out);
  }

  async applyPatch(p: Principal, id: string, patch: string) {
    const row = await this.active(p, id);
    const out = await rt(this.core.runtime.applyPatch(row.runtime_id, patch));
    return { ok: true, files: out.files };
  }
}

/** The API's ExecResult: whole milliseconds; a killed process has no exit status. */
export function execView(r: ExecResult): ExecView {
  return { ...r, durationMs: Math.round(r.durationMs), exitCode: r.timedOut ? null : r.exitCode };
}
export type ExecView = Omit<ExecResult, 'exitCode'> & { exitCode: number | null };

function utf8OrNull(data: Buffer): string | null {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(data);
  } catch {
    return null;
  }
}

function decodeBase64(s: string): Buffer {
  const clean = s.replace(/\s+/g, '');
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(clean)) {
    throw errors.validation([{ path: ['body', 'content'], message: 'not valid base64' }]);
  }
  return Buffer.from(clean, 'base64');
}

/** The working dir of the sandbox's template (its WORKDIR, or `workdir`), for commands that name none. */
export function cwdOf(row: SandboxRow): string | undefined {
  return bootstrapOf(row)?.template?.cwd;
}

/** The user of the sandbox's template (its `user`, or its image's USER), for calls that name none. */
export function userOf(row: SandboxRow): string | undefined {
  return bootstrapOf(row)?.template?.user;
}
