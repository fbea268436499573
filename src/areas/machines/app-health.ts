// What a machine's app is doing, as its owner needs to know it: `starting`, `running` (only once its
// port answers the health check), `crashing` (with its last exit and restarts), `oom` (the kernel
// killed it for memory, from the cgroup's counters), `unhealthy` (it runs but does not answer), or
// `stopped`. Read from three places: the supervisor's state line in the box, the box's cgroup counters
// on the host, and one HTTP request to the app's port from the host.
import type { Principal } from '../../platform/auth.js';
import type { Services } from '../../platform/operation.js';
import type { MachineRow, MachinesRepo } from './repo.js';
import type { Runspec } from './runspec.js';
import { LOG_FILE, STATE_FILE } from './supervisor.js';
import { tierNamed } from './tiers.js';

/** A health check waits this long for an answer. */
const PROBE_MS = 2000;
/** SIGKILL's exit code: how the kernel's OOM killer ends a process. */
const KILLED = 137;

export type AppStatus = 'starting' | 'running' | 'crashing' | 'oom' | 'unhealthy' | 'stopped';

/** The supervisor run nube started last (stored with the machine). */
export interface AppWatch {
  /** Token the supervisor writes in its state line: a line from an older run is not this one's. */
  run: string;
  startedAt: number;
  /** The box's OOM kill count when the run started, and the count already said in the log. */
  oomBase: number;
  oomNoted: number;
}

/** The supervisor's state line. Times are epoch seconds. */
export interface SupervisorState {
  run: string;
  state: 'up' | 'exited' | 'stopped';
  starts: number;
  code: number | null;
  exited: number | null;
  /** Seconds until the next start, while exited. */
  next: number | null;
}

export interface AppHealth {
  status: AppStatus;
  /** Times the supervisor started the app again since nube (re)started it. */
  restarts: number;
  lastExit: { code: number; signal: number | null; oom: boolean; at: string } | null;
  /** Processes the kernel killed for memory since nube (re)started the app. */
  oomKills: number;
  /** What is wrong, in words (null while it serves). */
  message: string | null;
  /** Times the app ended since nube (re)started it. */
  exits: number;
}

export function parseState(text: string | null): SupervisorState | null {
  if (!text) return null;
  const f = new Map(text.trim().split(/\s+/).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)] as const));
  const num = (k: string) => (/^\d+$/.test(f.get(k) ?? '') ? Number(f.get(k)) : null);
  const state = f.get('state');
  if (state !== 'up' && state !== 'exited' && state !== 'stopped') return null;
  return { run: f.get('run') ?? '', state, starts: num('starts') ?? 0, code: num('code'), exited: num('exited'), next: num('next') };
}

export interface JudgeInput {
  watch: AppWatch;
  state: SupervisorState | null;
  /** The box's OOM kill count now (null: not known). */
  oomTotal: number | null;
  /** The health check's answer (null when none was made: the app is not up). */
  probe: { status: number } | { error: string } | null;
  port: number;
  health: string | null;
  memoryMB: number | null;
  startTimeoutMs: number;
  now: number;
}

/** Whether the health check passed: any HTTP answer, or 2xx/3xx from the runspec's `health` path. */
export function serves(probe: JudgeInput['probe'], health: string | null): boolean {
  if (!probe || !('status' in probe)) return false;
  return health === null ? probe.status > 0 : probe.status >= 200 && probe.status < 400;
}

/** The app's state from what was read; pure, so every case is tested without a box. */
export function judge(i: JudgeInput): AppHealth {
  const st = i.state && i.state.run === i.watch.run ? i.state : null;
  const oomKills = i.oomTotal === null ? 0 : Math.max(0, i.oomTotal - i.watch.oomBase);
  const restarts = st ? Math.max(0, st.starts - 1) : 0;
  const code = st?.code ?? null;
  const lastExit =
    st && code !== null
      ? {
          code,
          signal: code > 128 ? code - 128 : null,
          oom: code === KILLED && oomKills > 0,
          at: new Date((st.exited ?? 0) * 1000).toISOString(),
        }
      : null;
  const where = `port ${i.port}${i.health ? ` (GET ${i.health})` : ''}`;
  const restarted = restarts === 1 ? 'restarted once' : `restarted ${restarts} times`;
  const exits = st ? (st.state === 'up' ? st.starts - 1 : st.starts) : 0;
  const base = { restarts, lastExit, oomKills, exits };
  const down = (): AppHealth => {
    if (lastExit?.oom) {
      const limit = i.memoryMB ? `its ${i.memoryMB} MB` : 'its memory limit';
      return {
        ...base,
        status: 'oom',
        message: `the kernel killed the app for using more than ${limit} (out of memory; ${oomKills} OOM ${oomKills === 1 ? 'kill' : 'kills'} since it was started, ${restarted}): use less memory or a larger tier`,
      };
    }
    const how = lastExit ? `it exited with code ${lastExit.code}${lastExit.signal ? ` (killed by signal ${lastExit.signal})` : ''}` : 'it exited';
    return { ...base, status: 'crashing', message: `the app keeps stopping: ${how} at ${lastExit?.at ?? 'an unknown time'}, ${restarted}; see the logs` };
  };
  if (!st) return { ...base, status: 'starting', message: `the app is starting: it has not answered on ${where} yet` };
  if (st.state === 'stopped') return { ...base, status: 'stopped', message: 'the app is stopped' };
  if (st.state === 'exited') return down();
  if (serves(i.probe, i.health)) return { ...base, status: 'running', message: null };
  if (restarts > 0) return down();
  const why = i.probe && 'status' in i.probe ? `${i.health ?? '/'} answered ${i.probe.status}` : (i.probe?.error ?? 'no answer');
  const since = Math.round((i.now - i.watch.startedAt) / 1000);
  if (i.now - i.watch.startedAt < i.startTimeoutMs) {
    return { ...base, status: 'starting', message: `the app is starting: it has not answered on ${where} yet (${why}, ${since} s after it started)` };
  }
  return { ...base, status: 'unhealthy', message: `the app runs but has not answered on ${where} for ${since} s (${why}); see the logs` };
}

/** What the check reads through: the machines' rows, the sandboxes service, a file of the box. */
export interface HealthDeps {
  repo: MachinesRepo;
  sandboxes: Services['sandboxes'];
  readBox(p: Principal, r: MachineRow, path: string): Promise<string | null>;
  startTimeoutMs: number;
}

/** Reads what judge() needs from the box and the host; notes OOM kills in the app's log as it finds them. */
export class AppHealthCheck {
  constructor(private readonly core: HealthDeps) {}

  private get sbx() {
    return this.core.sandboxes;
  }

  watchOf(r: MachineRow): AppWatch | null {
    return r.app_watch ? (JSON.parse(r.app_watch) as AppWatch) : null;
  }

  /** The box's OOM kill count now (null when the box cannot say: not running, or another driver). */
  async oomTotal(p: Principal, r: MachineRow): Promise<number | null> {
    return this.sbx.counters(p, r.sandbox_id).then(
      (c) => c.oomKills,
      () => null,
    );
  }

  /** The app's health, or null when nube has started no app in this machine. */
  async of(p: Principal, r: MachineRow): Promise<AppHealth | null> {
    const watch = this.watchOf(r);
    if (!r.supervisor_exec_id || !watch || r.port === null) return null;
    const [text, oomTotal] = await Promise.all([this.core.readBox(p, r, STATE_FILE), this.oomTotal(p, r)]);
    const state = parseState(text);
    const health = r.runspec ? (JSON.parse(r.runspec) as Runspec).health : null;
    const up = state?.run === watch.run && state.state === 'up';
    const probe = up ? await this.sbx.probePort(p, r.sandbox_id, r.port, health ?? '/', PROBE_MS).catch((e: Error) => ({ error: e.message })) : null;
    const h = judge({
      watch,
      state,
      oomTotal,
      probe,
      port: r.port,
      health,
      memoryMB: tierNamed(r.tier)?.memoryMB ?? null,
      startTimeoutMs: this.core.startTimeoutMs,
      now: Date.now(),
    });
    await this.noteOom(p, r, watch, oomTotal);
    return h;
  }

  /**
   * The supervisor sees only an exit with code 137; the kernel's counter says it was for memory. New
   * OOM kills are written to the app's log (once each) so its logs say why the app died.
   */
  async noteOom(p: Principal, r: MachineRow, watch: AppWatch | null = this.watchOf(r), known?: number | null): Promise<void> {
    if (!watch) return;
    const total = known === undefined ? await this.oomTotal(p, r) : known;
    if (total === null || total - watch.oomBase <= watch.oomNoted) return;
    const fresh = total - watch.oomBase - watch.oomNoted;
    const memory = tierNamed(r.tier)?.memoryMB;
    const line = `[nube] the kernel killed ${fresh === 1 ? 'a process' : `${fresh} processes`} of the app for memory (out of memory${memory ? `: the ${r.tier} tier has ${memory} MB` : ''}); ${total - watch.oomBase} since the app was started`;
    // Recorded first: two readers at once say it once (the loser's update changes nothing).
    const noted = { ...watch, oomNoted: total - watch.oomBase };
    if (!(await this.core.repo.swapAppWatch(r.id, r.app_watch, JSON.stringify(noted)))) return;
    await this.sbx.work
      .exec(p, r.sandbox_id, { command: `printf '%s %s\\n' "$(date -u +%FT%TZ)" ${shellWord(line)} >> ${LOG_FILE}`, timeoutSeconds: 10 })
      .catch(() => {});
  }
}

const shellWord = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
