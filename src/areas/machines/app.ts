// What runs in a machine's box: the supervisor and its app (restart applies the runspec and the
// secrets), the secrets themselves (sealed in the store), and the logs.
import { runInNewContext } from 'node:vm';
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { randomToken } from '../../platform/ids.js';
import type { AppWatch } from './app-health.js';
import type { MachineRow } from './repo.js';
import { DEFAULT_PORT, type Overrides, resolveRunspec, type Runspec, RunspecError } from './runspec.js';
import type { MachinesCore } from './service.js';
import { APP_DIR, LOG_FILE, SUPERVISOR_PATH, SUPERVISOR_SCRIPT } from './supervisor.js';

/** A regular expression given to grep may run this long over the lines, then the request is a 400. */
const GREP_REGEX_MS = 500;
/** How long a restarted app has to listen before the first port it opened is looked for. */
const PORT_DETECT_MS = 30_000;

export class MachineApps {
  constructor(private readonly core: MachinesCore) {}

  private get sbx() {
    return this.core.s.sandboxes;
  }

  /** The machine once its box runs (a provisioning one is a 409 the caller can retry). */
  async ready(p: Principal, id: string): Promise<MachineRow> {
    const r = await this.core.refresh(p, await this.core.own(p, id));
    if (r.status === 'provisioning') throw errors.conflict('the machine is still starting its box; retry shortly', 'MachineStarting');
    if (r.status === 'failed' && r.supervisor_exec_id === null && r.runspec === null) {
      throw errors.conflict(`the machine failed: ${r.last_error ?? 'unknown error'}`, 'MachineFailed');
    }
    return r;
  }

  overrides(r: MachineRow): Overrides {
    return r.overrides ? (JSON.parse(r.overrides) as Overrides) : {};
  }

  /** The runspec of the tree at `dir` (the app, or a launch's new tree), with the launch's overrides. */
  async runspecOf(p: Principal, r: MachineRow, dir = APP_DIR): Promise<Omit<Runspec, 'secretNames'>> {
    // One listing of the tree, then reads of only the files that are there (each read enters the box).
    const names = new Set(
      await this.sbx.work
        .file(p, r.sandbox_id, 'list', { path: dir })
        .then((l) => (l.entries as { name: string; type: string }[]).filter((e) => e.type === 'file').map((e) => e.name))
        .catch(() => [] as string[]),
    );
    const read = (name: string) => (names.has(name) ? this.readBox(p, r, `${dir}/${name}`) : Promise.resolve(null));
    try {
      return await resolveRunspec(read, this.overrides(r));
    } catch (e) {
      if (e instanceof RunspecError) throw errors.badRequest(e.message, undefined, 'NoRunspec');
      throw e;
    }
  }

  secrets(r: MachineRow): Record<string, string> {
    return r.secrets_sealed ? (JSON.parse(this.core.deps.secretBox.open(r.secrets_sealed)) as Record<string, string>) : {};
  }

  /** Stops the app (its supervisor) if one runs. */
  async stop(p: Principal, r: MachineRow): Promise<void> {
    if (!r.supervisor_exec_id) return;
    await this.sbx.work.bgKill(p, r.sandbox_id, r.supervisor_exec_id, 3).catch((e: unknown) => {
      if (!(e instanceof ApiError && (e.status === 404 || e.status === 409))) throw e;
    });
  }

  /**
   * Restart: read the runspec from the app tree, stop the old supervisor, start a new one with the
   * secrets. By default it answers once the app serves (its port answers the health check), or fails
   * with why (it keeps exiting, the kernel killed it for memory, it does not answer); lastError stays
   * until then. A launch keeps the machine `building` (keepStatus) until its release is published.
   */
  async restart(p: Principal, id: string, o: { keepStatus?: boolean } = {}) {
    const { execId, startedAt } = await this.start(p, id, o);
    await this.untilServing(p, id, execId, startedAt);
    return { ok: true as const, machineId: id, restartedAt: new Date(startedAt).toISOString(), servingAfterMs: Date.now() - startedAt };
  }

  /** Starts a new supervisor (stopping the old one) and answers without waiting for the app. */
  async start(p: Principal, id: string, o: { keepStatus?: boolean } = {}): Promise<{ execId: string; startedAt: number }> {
    const r = await this.ready(p, id);
    const spec = await this.runspecOf(p, r);
    const secrets = this.secrets(r);
    await this.stop(p, r);
    const port = spec.port ?? DEFAULT_PORT;
    const watch: AppWatch = { run: randomToken(16), startedAt: Date.now(), oomBase: (await this.core.health.oomTotal(p, r)) ?? 0, oomNoted: 0 };
    // The script is written on every restart (a newer nube brings a newer supervisor), by the same
    // /bg command that then runs it: one entry into the box.
    const { execId } = await this.sbx.work.bgStart(p, r.sandbox_id, {
      command: `mkdir -p /opt/nube /var/log/nube && printf '%s' "$NUBE_SUPERVISOR" > ${SUPERVISOR_PATH} && exec bash ${SUPERVISOR_PATH}`,
      cwd: APP_DIR,
      env: {
        ...this.core.caEnv(),
        ...(this.overrides(r).env ?? {}),
        ...secrets,
        NUBE_START: spec.start,
        PORT: String(port),
        NUBE_RUN: watch.run,
        NUBE_SUPERVISOR: SUPERVISOR_SCRIPT,
      },
    });
    const { url } = await this.sbx.manage.expose(p, r.sandbox_id, port);
    const runspec: Runspec = { ...spec, secretNames: Object.keys(secrets).sort() };
    await this.core.repo.update(r.id, {
      ...(o.keepStatus ? {} : { status: 'running' as const }),
      supervisor_exec_id: execId,
      runspec: JSON.stringify(runspec),
      port,
      url,
      pending_restart: 0,
      app_watch: JSON.stringify(watch),
    });
    if (spec.port === null) void this.detectPort(p, r.id, execId, port);
    return { execId, startedAt: watch.startedAt };
  }

  /**
   * Waits until the app started by supervisor `execId` serves; fails with why once it has ended twice
   * (a crash loop, or the kernel killing it for memory) or has not answered within the start timeout.
   * The reason is kept as the machine's lastError; serving clears it.
   */
  private async untilServing(p: Principal, id: string, execId: string, startedAt: number): Promise<void> {
    const end = startedAt + this.core.deps.config.machines.startTimeoutMs;
    for (;;) {
      const r = await this.core.repo.get(id);
      if (!r || r.status === 'deleted') throw errors.notFound('machine');
      if (r.supervisor_exec_id !== execId) throw errors.conflict('the machine was restarted again while this restart waited for its app', 'RestartSuperseded');
      const h = await this.core.health.of(p, r);
      if (h?.status === 'running') {
        if (r.last_error !== null) await this.core.repo.update(id, { last_error: null });
        return;
      }
      const timedOut = Date.now() > end;
      if (h && (h.exits >= 2 || timedOut)) {
        const code = h.status === 'oom' ? 'AppOutOfMemory' : h.status === 'crashing' ? 'AppCrashing' : 'AppNotServing';
        const message =
          code === 'AppNotServing'
            ? `the app did not answer on port ${r.port} within ${Math.round((Date.now() - startedAt) / 1000)} s: ${h.message}`
            : (h.message ?? 'the app does not serve');
        await this.core.repo.update(id, { last_error: message });
        const logTail = (await this.logs(p, id, { lines: 20 }).catch(() => ({ lines: [] as string[] }))).lines;
        throw errors.conflict(message, code, { status: h.status, restarts: h.restarts, lastExit: h.lastExit, logTail });
      }
      if (timedOut) throw errors.conflict(`the app did not answer on port ${r.port} in time`, 'AppNotServing');
      await new Promise((res) => setTimeout(res, 250));
    }
  }

  /**
   * Without a port in the runspec the app was offered PORT; if it listens elsewhere, the first port it
   * opens becomes the machine's (exposed, and the URL follows).
   */
  private async detectPort(p: Principal, id: string, execId: string, offered: number): Promise<void> {
    const end = Date.now() + PORT_DETECT_MS;
    try {
      while (Date.now() < end) {
        const r = await this.core.repo.get(id);
        if (!r || r.supervisor_exec_id !== execId) return;
        const ports = await this.listening(p, r);
        if (ports.includes(offered)) return;
        if (ports.length > 0) {
          const { url } = await this.sbx.manage.expose(p, r.sandbox_id, ports[0]!);
          await this.core.repo.update(id, { port: ports[0]!, url });
          return;
        }
        await new Promise((res) => setTimeout(res, 500));
      }
    } catch (e) {
      this.core.deps.log.warn({ err: e, machine: id }, 'port detection stopped');
    }
  }

  /** TCP ports listening inside the box, in the order /proc lists them. */
  async listening(p: Principal, r: MachineRow): Promise<number[]> {
    const out = await this.sbx.work.exec(p, r.sandbox_id, { command: 'cat /proc/net/tcp /proc/net/tcp6 2>/dev/null', timeoutSeconds: 10 });
    const ports: number[] = [];
    for (const line of out.stdout.split('\n')) {
      const f = line.trim().split(/\s+/);
      if (f[3] !== '0A') continue; // LISTEN
      const port = Number.parseInt(f[1]?.split(':')[1] ?? '', 16);
      if (Number.isInteger(port) && !ports.includes(port)) ports.push(port);
    }
    return ports;
  }

  async getSecrets(p: Principal, id: string) {
    const r = await this.core.own(p, id);
    const applied = r.runspec ? (JSON.parse(r.runspec) as Runspec).secretNames : [];
    return { secretNames: applied, inVault: Object.keys(this.secrets(r)).sort() };
  }

  /** Merges the given secrets into the sealed map; restarts to apply them unless told not to. */
  async setSecrets(p: Principal, id: string, values: Record<string, string>, restart: boolean) {
    const r = await this.core.own(p, id);
    const merged = { ...this.secrets(r), ...values };
    await this.core.repo.update(r.id, { secrets_sealed: this.core.deps.secretBox.seal(JSON.stringify(merged)), pending_restart: 1 });
    let pendingRestart = true;
    if (restart && r.supervisor_exec_id !== null) {
      await this.restart(p, id).catch((e: unknown) => {
        // The values are stored and the app runs with them: the error says so, then what the app does.
        if (e instanceof ApiError && e.code.startsWith('App')) throw new ApiError(e.status, e.code, `the secrets are saved and applied, but ${e.message}`, e.extra);
        throw e;
      });
      pendingRestart = false;
    }
    return { secretNames: Object.keys(merged).sort(), pendingRestart };
  }

  async logs(p: Principal, id: string, q: { lines: number; grep?: string }) {
    const r = await this.core.own(p, id);
    // OOM kills the kernel counted since the last look go into the log before it is read.
    await this.core.health.noteOom(p, r).catch(() => {});
    const match = matcher(q.grep);
    let lines: string[] = [];
    // The current file, then the rotated one while more lines are wanted.
    for (const path of [LOG_FILE, `${LOG_FILE}.1`]) {
      const text = await this.readBox(p, r, path);
      if (text === null) continue;
      const chunk = text.split('\n').filter((l) => l.length > 0);
      lines = [...match(chunk), ...lines];
      if (lines.length >= q.lines) break;
    }
    return { lines: lines.slice(-q.lines) };
  }

  readBox(p: Principal, r: MachineRow, path: string): Promise<string | null> {
    return this.core.readBox(p, r, path);
  }
}

/**
 * grep: a plain substring, or `/pattern/flags` for a regular expression. A regular expression runs in
 * a separate V8 context with a deadline, so a catastrophic pattern answers 400 instead of stalling nube.
 */
export function matcher(grep: string | undefined): (lines: string[]) => string[] {
  if (grep === undefined) return (l) => l;
  const m = /^\/(.+)\/([imsu]*)$/.exec(grep);
  if (!m) return (lines) => lines.filter((l) => l.includes(grep));
  let re: RegExp;
  try {
    re = new RegExp(m[1]!, m[2]);
  } catch (e) {
    throw errors.validation([{ path: ['query', 'grep'], message: `invalid regular expression: ${(e as Error).message}` }]);
  }
  return (lines) => {
    try {
      return runInNewContext('lines.filter((l) => re.test(l))', { lines, re }, { timeout: GREP_REGEX_MS }) as string[];
    } catch {
      throw errors.validation([{ path: ['query', 'grep'], message: `the regular expression took longer than ${GREP_REGEX_MS} ms` }]);
    }
  };
}
