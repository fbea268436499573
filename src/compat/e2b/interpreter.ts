// The code interpreter's HTTP API (port 49999 in E2B's template): POST /execute answering an NDJSON
// stream of stdout, stderr, result, error and number_of_executions lines, and /contexts. It runs on
// nube's run-cell (a real Jupyter kernel, python, one per sandbox): the lines come when the cell ends,
// not while it runs. Only the sandbox's one context (`default`) exists here.
import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { HOME } from './filesystem.js';

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
  constructor(private readonly sandboxes: SandboxesService) {}

  contexts() {
    return [{ id: DEFAULT_CONTEXT, language: 'python', cwd: HOME }];
  }

  createContext(body: unknown) {
    const language = (body as { language?: string } | undefined)?.language;
    if (!isPython(language)) throw errors.badRequest(`nube's kernel runs python, not ${language}`);
    throw errors.notImplemented('contexts besides the default one (nube runs one kernel per sandbox)');
  }

  async execute(p: Principal, id: string, raw: unknown, reply: FastifyReply) {
    const r = ExecuteBody.safeParse(raw ?? {});
    if (!r.success) {
      throw errors.validation(r.error.issues.map((i) => ({ path: ['body', ...i.path.map(String)], message: i.message })));
    }
    const b = r.data;
    if (!isPython(b.language)) throw errors.badRequest(`nube's kernel runs python, not ${b.language}`);
    if (b.context_id && b.context_id !== DEFAULT_CONTEXT) throw errors.notFound(`context ${b.context_id}`);
    // Per-execution variables, as E2B sets them: for this cell only, restored afterwards.
    const code = b.env_vars && Object.keys(b.env_vars).length ? withEnv(b.code, b.env_vars) : b.code;
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

/** The cell wrapped so `os.environ` holds `env` while it runs (the last expression still displays). */
function withEnv(code: string, env: Record<string, string>): string {
  const set = JSON.stringify(env);
  return [
    `import os as __nube_os; __nube_saved = {k: __nube_os.environ.get(k) for k in ${set}}; __nube_os.environ.update(${set})`,
    'try:',
    `    get_ipython().run_cell(${JSON.stringify(code)})`,
    'finally:',
    '    [__nube_os.environ.pop(k, None) if v is None else __nube_os.environ.__setitem__(k, v) for k, v in __nube_saved.items()]',
  ].join('\n');
}
