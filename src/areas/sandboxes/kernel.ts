// run-cell and kernel-restart: a persistent Python interpreter inside the sandbox, started as a /bg
// process, that keeps one globals dict across cells (a variable set in one cell is there in the next).
// It speaks a tiny protocol on a unix socket: the cell's source in, `{stdout, stderr, result, error}`
// out. A client script run with exec carries the cell on stdin, so the code never meets a shell.
// Works on every template (no Jupyter needed); see docs/decisions.md, "Sandboxes: API".
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import type { SandboxRow } from './repo.js';
import type { SandboxesCore } from './service.js';
import { rt } from './views.js';
import type { Workload } from './workload.js';

const SOCK = '/tmp/.nube-kernel.sock';
const KERNEL_PATH = '/tmp/.nube-kernel.py';
const CLIENT_PATH = '/tmp/.nube-cell.py';
const CELL_TIMEOUT_MS = 120_000;
/** Exit code of the client when no kernel listens. */
const NO_KERNEL = 3;

const KERNEL_PY = `import ast, contextlib, io, json, os, socket, traceback
SOCK = ${JSON.stringify(SOCK)}
try:
    os.unlink(SOCK)
except FileNotFoundError:
    pass
g = {'__name__': '__main__'}
n = 0
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(SOCK)
os.chmod(SOCK, 0o600)
srv.listen(4)
while True:
    c, _ = srv.accept()
    with c:
        data = b''
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
        n += 1
        out, err = io.StringIO(), io.StringIO()
        result = None
        error = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                tree = ast.parse(data.decode('utf-8'), '<cell>', 'exec')
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last = ast.Expression(tree.body.pop().value)
                exec(compile(tree, '<cell>', 'exec'), g)
                if last is not None:
                    v = eval(compile(last, '<cell>', 'eval'), g)
                    if v is not None:
                        result = repr(v)
            except BaseException as e:
                error = {'name': type(e).__name__, 'value': str(e), 'traceback': traceback.format_exc()}
        c.sendall(json.dumps({'stdout': out.getvalue(), 'stderr': err.getvalue(), 'result': result,
                              'error': error, 'executionCount': n}).encode('utf-8'))
`;

const CLIENT_PY = `import socket, sys, time
code = sys.stdin.buffer.read()
s = None
for _ in range(100):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(${JSON.stringify(SOCK)})
        break
    except (FileNotFoundError, ConnectionRefusedError):
        s = None
        if sys.argv[1:] != ['wait']:
            sys.exit(${NO_KERNEL})
        time.sleep(0.05)
if s is None:
    sys.exit(${NO_KERNEL})
s.sendall(code)
s.shutdown(socket.SHUT_WR)
buf = b''
while True:
    d = s.recv(65536)
    if not d:
        break
    buf += d
sys.stdout.buffer.write(buf)
`;

export class Kernel {
  constructor(
    private readonly core: SandboxesCore,
    private readonly work: Workload,
  ) {}

  private async start(row: SandboxRow): Promise<void> {
    const r = this.core.runtime;
    await rt(r.writeFile(row.runtime_id, KERNEL_PATH, Buffer.from(KERNEL_PY)));
    await rt(r.writeFile(row.runtime_id, CLIENT_PATH, Buffer.from(CLIENT_PY)));
    const execId = await rt(r.startBackground(row.runtime_id, `exec python3 -u ${KERNEL_PATH}`));
    await this.core.repo.update(row.id, { kernel_exec_id: execId });
    row.kernel_exec_id = execId;
  }

  private async stop(row: SandboxRow): Promise<void> {
    if (row.kernel_exec_id) {
      await this.core.runtime.killBackground(row.runtime_id, row.kernel_exec_id, 0).catch(() => {});
    }
    await this.core.repo.update(row.id, { kernel_exec_id: null });
    row.kernel_exec_id = null;
  }

  async runCell(p: Principal, id: string, b: { code: string; lang?: 'python' | 'node' | 'bash' }) {
    if ((b.lang ?? 'python') !== 'python') {
      throw errors.badRequest('run-cell keeps a persistent kernel for python only; use run-code for node and bash', [
        { path: ['body', 'lang'], message: 'only python' },
      ]);
    }
    const row = await this.work.active(p, id);
    let started = false;
    if (!row.kernel_exec_id) {
      await this.start(row);
      started = true;
    }
    const run = (wait: boolean) =>
      rt(
        this.core.runtime.exec(row.runtime_id, `python3 ${CLIENT_PATH}${wait ? ' wait' : ''}`, {
          stdin: b.code,
          timeoutMs: CELL_TIMEOUT_MS,
        }),
      );
    let res = await run(started);
    if (res.exitCode === NO_KERNEL || (res.exitCode !== 0 && /No such file/.test(res.stderr))) {
      // The kernel died (or the sandbox was woken since): a fresh one, with empty state.
      await this.stop(row);
      await this.start(row);
      started = true;
      res = await run(true);
    }
    if (res.timedOut) {
      await this.stop(row);
      return { stdout: '', stderr: res.stderr, result: null, error: { name: 'Timeout', value: `cell ran over ${CELL_TIMEOUT_MS / 1000} s; the kernel was restarted`, traceback: '' }, kernelRestarted: true, durationMs: Math.round(res.durationMs) };
    }
    if (res.exitCode !== 0) {
      throw errors.unavailable(`kernel client failed (exit ${res.exitCode}): ${res.stderr.slice(0, 500)}`);
    }
    const out = JSON.parse(res.stdout) as Record<string, unknown>;
    return { ...out, kernelStarted: started, durationMs: Math.round(res.durationMs) };
  }

  async restart(p: Principal, id: string) {
    const row = await this.work.active(p, id);
    await this.stop(row);
    await this.start(row);
    return { ok: true, restarted: true };
  }
}
