// The code interpreter's HTTP API (port 49999 in E2B's template): POST /execute answering an NDJSON
// stream of stdout, stderr, result, error and number_of_executions lines, and /contexts. It runs on
// nube's run-cell (a real Jupyter kernel, python, one per sandbox): the lines come when the cell ends,
// not while it runs. Contexts are namespaces of their own in that one kernel (see wrapped()).
import { randomUUID } from 'node:crypto';
import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { DEFAULT_HOME as HOME } from './users.js';

export const DEFAULT_CONTEXT = 'default';

const ExecuteBody = z.object({
  code: z.string(),
  context_id: z.string().nullish(),
  language: z.string().nullish(),
  env_vars: z.record(z.string(), z.string()).nullish(),
});

const MIME: Record<string, string> = {
  'text/plain': 'text',
  'text/html': 'html',
  'text/markdown': 'markdown',
  'image/svg+xml': 'svg',
  'image/png': 'png',
  'image/jpeg': 'jpeg',
  'application/pdf': 'pdf',
  'text/latex': 'latex',
  'application/json': 'json',
  'application/javascript': 'javascript',
};

interface Cell {
  stdout: string;
  stderr: string;
  outputs: { type: string; data: Record<string, unknown> }[];
  error: { name: string; value: string; traceback: string } | null;
  executionCount: number | null;
}

function isPython(language: string | null | undefined): boolean {
  return !language || language === 'python' || language === 'python3';
}

export class Interpreter {
  /** Contexts per sandbox (besides `default`): a namespace of their own in the sandbox's kernel. */
  private readonly contexts = new Map<string, Map<string, { id: string; language: string; cwd: string }>>();

  constructor(private readonly sandboxes: SandboxesService) {}

  list(id: string) {
    return [{ id: DEFAULT_CONTEXT, language: 'python', cwd: HOME }, ...(this.contexts.get(id)?.values() ?? [])];
  }

  create(id: string, body: unknown) {
    const b = (body ?? {}) as { language?: string | null; cwd?: string | null };
    if (!isPython(b.language)) throw errors.badRequest(`nube's kernel runs python, not ${b.language}`);
    const ctx = { id: randomUUID(), language: 'python', cwd: b.cwd || HOME };
    const t = this.contexts.get(id) ?? new Map<string, { id: string; language: string; cwd: string }>();
    this.contexts.set(id, t);
    t.set(ctx.id, ctx);
    return ctx;
  }

  remove(id: string, ctx: string) {
    if (!this.contexts.get(id)?.delete(ctx)) throw errors.notFound(`context ${ctx}`);
  }

  private known(id: string, ctx: string) {
    if (ctx !== DEFAULT_CONTEXT && !this.contexts.get(id)?.has(ctx)) throw errors.notFound(`context ${ctx}`);
  }

  /** Restarting a context restarts the sandbox's kernel: every context starts over empty. */
  async restart(p: Principal, id: string, ctx: string) {
    this.known(id, ctx);
    await this.sandboxes.action(p, id, 'kernel-restart', {});
  }

  async execute(p: Principal, id: string, raw: unknown, reply: FastifyReply) {
    const r = ExecuteBody.safeParse(raw ?? {});
    if (!r.success) {
      throw errors.validation(r.error.issues.map((i) => ({ path: ['body', ...i.path.map(String)], message: i.message })));
    }
    const b = r.data;
    if (!isPython(b.language)) throw errors.badRequest(`nube's kernel runs python, not ${b.language}`);
    const ctx = b.context_id ?? DEFAULT_CONTEXT;
    this.known(id, ctx);
    const env = b.env_vars ?? {};
    // One kernel holds every context: a context's code runs in its cwd, and once a context exists the
    // default one's goes back to the home (the kernel starts there: the sandbox's HOME).
    const others = this.contexts.get(id);
    const cwd = ctx === DEFAULT_CONTEXT ? (others?.size ? HOME : null) : others!.get(ctx)!.cwd;
    const plain = cwd === null && Object.keys(env).length === 0;
    const code = plain ? b.code : wrapped(b.code, ctx === DEFAULT_CONTEXT ? null : ctx, env, cwd);
    const cell = (await this.sandboxes.action(p, id, 'run-cell', { code, lang: 'python', timeoutSeconds: 600 })) as unknown as Cell;
    const lines: unknown[] = [];
    const now = () => Date.now() * 1000;
    if (cell.stdout) lines.push({ type: 'stdout', text: cell.stdout, timestamp: now() });
    if (cell.stderr) lines.push({ type: 'stderr', text: cell.stderr, timestamp: now() });
    for (const o of cell.outputs) {
      const out: Record<string, unknown> = { type: 'result', is_main_result: o.type === 'execute_result' };
      for (const [mime, value] of Object.entries(o.data)) out[MIME[mime] ?? mime] = value;
      lines.push(out);
    }
    if (cell.error) lines.push({ type: 'error', name: cell.error.name, value: cell.error.value, traceback: cell.error.traceback });
    if (cell.executionCount !== null) lines.push({ type: 'number_of_executions', execution_count: cell.executionCount });
    return reply
      .code(200)
      .header('content-type', 'application/x-ndjson')
      .send(lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
  }
}

/**
 * The cell in a context's own namespace (a dict kept in the kernel), in `cwd` (when given) and with
 * `env` in os.environ for this cell only. Its last expression is evaluated apart and becomes the
 * wrapper's own last expression, so the kernel still answers it as the cell's result.
 */
function wrapped(code: string, ctx: string | null, env: Record<string, string>, cwd: string | null): string {
  const s = (v: unknown) => JSON.stringify(v);
  return [
    'import ast as _nube_ast, os as _nube_os',
    ...(cwd === null ? [] : [`_nube_os.chdir(${s(cwd)})`]),
    `_nube_env = ${s(env)}`,
    '_nube_old = {k: _nube_os.environ.get(k) for k in _nube_env}',
    '_nube_os.environ.update(_nube_env)',
    `_nube_ctx = ${ctx === null ? 'None' : s(ctx)}`,
    "_nube_all = globals().setdefault('_nube_contexts', {})",
    "_nube_ns = globals() if _nube_ctx is None else _nube_all.setdefault(_nube_ctx, {'__name__': '__main__'})",
    `_nube_tree = _nube_ast.parse(${s(code)})`,
    '_nube_last = _nube_tree.body.pop() if _nube_tree.body and isinstance(_nube_tree.body[-1], _nube_ast.Expr) else None',
    '_nube_value = None',
    'try:',
    "    exec(compile(_nube_tree, '<cell>', 'exec'), _nube_ns)",
    '    if _nube_last is not None:',
    "        _nube_value = eval(compile(_nube_ast.Expression(_nube_last.value), '<cell>', 'eval'), _nube_ns)",
    'finally:',
    '    for _nube_k, _nube_v in _nube_old.items():',
    '        _nube_os.environ.pop(_nube_k, None) if _nube_v is None else _nube_os.environ.__setitem__(_nube_k, _nube_v)',
    '_nube_value',
  ].join('\n');
}
