// run-cell and kernel-restart on a real Jupyter kernel: a bridge (kernel-bridge.ts) started inside the
// sandbox as a /bg process runs ipykernel through jupyter_client; each request is an exec of a small
// client that carries it on stdin. A cell over its timeout is interrupted (the kernel and its state
// survive; one that ignores the interrupt gets the kernel restarted). Needs ipykernel + jupyter_client
// in the sandbox (the code-interpreter template); elsewhere run-cell is a 400 naming that template.
import { randomBytes } from 'node:crypto';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { KERNEL_PATH, KERNEL_PY, KERNEL_VANISHED, NO_JUPYTER, NO_KERNEL } from './kernel-bridge.js';
import type { SandboxRow } from './repo.js';
import { KeyedLock } from './runtime/keyed-lock.js';
import type { SandboxesCore } from './service.js';
import { rt } from './views.js';
import type { Workload } from './workload.js';

const DEFAULT_CELL_TIMEOUT_S = 120;
/** On top of the cell's own timeout: the interrupt grace, a kernel restart, the client's start. */
const CLIENT_SLACK_MS = 150_000;
/** The answer carries rich outputs (base64 images): room above the bridge's own caps. */
const ANSWER_CAP = 16 * 1024 * 1024;

type Request = { op: 'run'; code: string; timeoutMs: number } | { op: 'restart' | 'ping' };

export class Kernel {
  private readonly locks = new KeyedLock();

  constructor(
    private readonly core: SandboxesCore,
    private readonly work: Workload,
  ) {}

  /** Starts the bridge; returns the error file it writes when it cannot start a kernel. */
  private async start(row: SandboxRow): Promise<string> {
    const r = this.core.runtime;
    const errFile = `/tmp/.nube-kernel-${randomBytes(6).toString('hex')}.err`;
    await rt(r.writeFile(row.runtime_id, KERNEL_PATH, Buffer.from(KERNEL_PY)));
    // Only our own paths are in the command line. The kernel runs cells as the template's user, as exec does.
    const { command, ...o } = await this.work.asTemplateUser(row, `exec python3 -u ${KERNEL_PATH} serve ${errFile}`);
    const execId = await rt(r.startBackground(row.runtime_id, command, o));
    await this.core.repo.update(row.id, { kernel_exec_id: execId });
    row.kernel_exec_id = execId;
    return errFile;
  }

  private async stop(row: SandboxRow): Promise<void> {
    if (row.kernel_exec_id) {
      // SIGTERM lets the bridge shut its kernel down (the kernel is in a session of its own).
      await this.core.runtime.killBackground(row.runtime_id, row.kernel_exec_id, 2).catch(() => {});
    }
    await this.core.repo.update(row.id, { kernel_exec_id: null });
    row.kernel_exec_id = null;
  }

  /**
   * One request to the bridge, starting it first when none runs. One request per sandbox at a time
   * (the bridge answers one at a time anyway), so two first cells cannot start two bridges.
   */
  private call(row: SandboxRow, req: Request, timeoutMs: number) {
    return this.locks.run(row.id, async () => {
      row.kernel_exec_id = (await this.core.repo.get(row.id))?.kernel_exec_id ?? null;
      // Starting a bridge is itself a restart: a fresh kernel.
      return this.callLocked(
        row,
        req.op === 'restart' && !row.kernel_exec_id ? { op: 'ping' } : req,
        timeoutMs,
      );
    });
  }

  private async callLocked(row: SandboxRow, req: Request, timeoutMs: number) {
    let errFile = row.kernel_exec_id ? null : await this.start(row);
    let started = errFile !== null;
    const send = () =>
      rt(
        this.core.runtime.exec(row.runtime_id, `python3 ${KERNEL_PATH} call${errFile ? ` ${errFile}` : ''}`, {
          stdin: JSON.stringify(req),
          timeoutMs,
          maxOutputBytes: ANSWER_CAP,
        }),
      );
    let res = await send();
    if (
      res.exitCode === NO_KERNEL ||
      res.exitCode === KERNEL_VANISHED ||
      (res.exitCode === 2 && /No such file/.test(res.stderr))
    ) {
      // The bridge is gone (it died, or the sandbox was suspended since): a fresh kernel, empty state.
      await this.stop(row);
      errFile = await this.start(row);
      started = true;
      res = await send();
    }
    if (res.exitCode === NO_JUPYTER) {
      await this.stop(row);
      throw errors.badRequest(
        res.stdout.trim() || 'run-cell needs the code-interpreter template',
        undefined,
        'KernelUnavailable',
      );
    }
    if (res.timedOut) {
      // The bridge itself is stuck: start over on the next request.
      await this.stop(row);
      throw errors.unavailable(
        'the kernel did not answer in time; it was stopped and the next cell starts a fresh one',
      );
    }
    if (res.exitCode !== 0) {
      throw errors.unavailable(`kernel client failed (exit ${res.exitCode}): ${res.stderr.slice(0, 500)}`);
    }
    const out = JSON.parse(res.stdout) as Record<string, unknown>;
    if (typeof out.bridgeError === 'string') throw errors.unavailable(`kernel bridge: ${out.bridgeError}`);
    return { out, started, durationMs: Math.round(res.durationMs) };
  }

  async runCell(
    p: Principal,
    id: string,
    b: { code: string; lang?: 'python' | 'node' | 'bash'; timeoutSeconds?: number },
  ) {
    if ((b.lang ?? 'python') !== 'python') {
      throw errors.badRequest(
        'run-cell keeps a persistent kernel for python only; use run-code for node and bash',
        [{ path: ['body', 'lang'], message: 'only python' }],
      );
    }
    const row = await this.work.active(p, id);
    const cellMs = (b.timeoutSeconds ?? DEFAULT_CELL_TIMEOUT_S) * 1000;
    const { out, started, durationMs } = await this.call(
      row,
      { op: 'run', code: b.code, timeoutMs: cellMs },
      cellMs + CLIENT_SLACK_MS,
    );
    return { ...out, kernelStarted: started, durationMs };
  }

  async restart(p: Principal, id: string) {
    const row = await this.work.active(p, id);
    await this.call(row, { op: 'restart' }, CLIENT_SLACK_MS);
    return { ok: true, restarted: true };
  }
}
