// The agent's built-in tools, acting inside its own sandbox: a shell, files (read, write, edit) and,
// for the code-agent template, a unified diff, the project's tests and git.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, isAbsolute, resolve } from 'node:path';
import type { ToolSpec } from './llm.js';

export type ToolKind = 'read' | 'edit' | 'execute' | 'other';

export interface Tool extends ToolSpec {
  kind: ToolKind;
  /** Side effects: asks the client's permission first (session/request_permission). */
  asks: boolean;
  title(args: Record<string, unknown>): string;
  run(args: Record<string, unknown>, ctx: { cwd: string; signal: AbortSignal }): Promise<string>;
}

const MAX_OUTPUT = 64 * 1024;

function clip(s: string): string {
  return s.length > MAX_OUTPUT ? `${s.slice(0, MAX_OUTPUT)}\n[... ${s.length - MAX_OUTPUT} more characters cut]` : s;
}

/** Runs a program (no shell unless asked for) and answers its exit code and output as text. */
export function runProgram(
  argv: string[],
  o: { cwd: string; signal: AbortSignal; timeoutMs?: number; stdin?: string },
): Promise<{ code: number | null; output: string }> {
  return new Promise((done) => {
    const child = spawn(argv[0]!, argv.slice(1), { cwd: o.cwd, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    let output = '';
    const take = (d: Buffer) => {
      if (output.length < MAX_OUTPUT * 2) output += d.toString('utf8');
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    const kill = () => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {}
    };
    const timer = setTimeout(kill, o.timeoutMs ?? 120_000);
    o.signal.addEventListener('abort', kill, { once: true });
    child.on('error', (e) => {
      clearTimeout(timer);
      done({ code: 127, output: String(e.message) });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      o.signal.removeEventListener('abort', kill);
      done({ code, output: clip(output) });
    });
    // A program that exits without reading its stdin (`true`) makes this write fail with EPIPE.
    child.stdin.on('error', () => {});
    child.stdin.end(o.stdin ?? '');
  });
}

const str = (v: unknown, name: string): string => {
  if (typeof v !== 'string') throw new Error(`argument ${name} must be a string`);
  return v;
};
const at = (cwd: string, p: string) => (isAbsolute(p) ? p : resolve(cwd, p));
const report = (r: { code: number | null; output: string }) => `exit code ${r.code ?? 'killed'}\n${r.output}`;

const shell: Tool = {
  name: 'shell',
  description: 'Run a shell command (/bin/sh -c) in the workspace. Returns the exit code and the combined output.',
  parameters: {
    type: 'object',
    properties: { command: { type: 'string' }, timeoutSeconds: { type: 'integer', minimum: 1, maximum: 600 } },
    required: ['command'],
  },
  kind: 'execute',
  asks: true,
  title: (a) => `$ ${String(a.command ?? '')}`.slice(0, 200),
  run: async (a, ctx) =>
    report(
      await runProgram(['/bin/sh', '-c', str(a.command, 'command')], {
        ...ctx,
        timeoutMs: typeof a.timeoutSeconds === 'number' ? a.timeoutSeconds * 1000 : 120_000,
      }),
    ),
};

const readFileTool: Tool = {
  name: 'read_file',
  description: 'Read a text file (path relative to the workspace or absolute).',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  kind: 'read',
  asks: false,
  title: (a) => `Read ${String(a.path ?? '')}`,
  run: async (a, ctx) => clip(await readFile(at(ctx.cwd, str(a.path, 'path')), 'utf8')),
};

const writeFileTool: Tool = {
  name: 'write_file',
  description: 'Create or replace a text file with the given content (directories are created).',
  parameters: { type: 'object', properties: { path: { type: 'string' }, content: { type: 'string' } }, required: ['path', 'content'] },
  kind: 'edit',
  asks: true,
  title: (a) => `Write ${String(a.path ?? '')}`,
  run: async (a, ctx) => {
    const p = at(ctx.cwd, str(a.path, 'path'));
    await mkdir(dirname(p), { recursive: true });
    const content = str(a.content, 'content');
    await writeFile(p, content);
    return `wrote ${Buffer.byteLength(content)} bytes to ${p}`;
  },
};

const editFileTool: Tool = {
  name: 'edit_file',
  description: 'Replace exactly one occurrence of old_string with new_string in a text file.',
  parameters: {
    type: 'object',
    properties: { path: { type: 'string' }, old_string: { type: 'string' }, new_string: { type: 'string' } },
    required: ['path', 'old_string', 'new_string'],
  },
  kind: 'edit',
  asks: true,
  title: (a) => `Edit ${String(a.path ?? '')}`,
  run: async (a, ctx) => {
    const p = at(ctx.cwd, str(a.path, 'path'));
    const text = await readFile(p, 'utf8');
    const oldS = str(a.old_string, 'old_string');
    const n = text.split(oldS).length - 1;
    if (n !== 1) throw new Error(`old_string occurs ${n} times in ${p}; it must occur exactly once`);
    await writeFile(p, text.replace(oldS, () => str(a.new_string, 'new_string')));
    return `edited ${p}`;
  },
};

const applyDiff: Tool = {
  name: 'apply_diff',
  description: 'Apply a unified diff (as produced by git diff or diff -u) to the workspace; all or nothing.',
  parameters: { type: 'object', properties: { diff: { type: 'string' } }, required: ['diff'] },
  kind: 'edit',
  asks: true,
  title: () => 'Apply a diff',
  run: async (a, ctx) => {
    const diff = str(a.diff, 'diff');
    for (const p of ['-p1', '-p0']) {
      const dry = await runProgram(['patch', p, '--dry-run', '--batch', '--forward'], { ...ctx, stdin: diff });
      if (dry.code === 0) return report(await runProgram(['patch', p, '--batch', '--forward'], { ...ctx, stdin: diff }));
    }
    const r = await runProgram(['patch', '-p1', '--dry-run', '--batch', '--forward'], { ...ctx, stdin: diff });
    throw new Error(`the diff does not apply (nothing was changed):\n${r.output}`);
  },
};

/** The project's test command, guessed from what the workspace holds. */
export function testCommand(cwd: string): string | null {
  if (existsSync(`${cwd}/package.json`)) return 'npm test --silent';
  if (existsSync(`${cwd}/pytest.ini`) || existsSync(`${cwd}/pyproject.toml`) || existsSync(`${cwd}/tests`))
    return 'python3 -m pytest -q || python3 -m unittest discover -v';
  if (existsSync(`${cwd}/Makefile`)) return 'make test';
  return null;
}

const runTests: Tool = {
  name: 'run_tests',
  description: "Run the project's tests (npm test, pytest/unittest or make test, guessed from the workspace) or the given command.",
  parameters: { type: 'object', properties: { command: { type: 'string' } } },
  kind: 'execute',
  asks: true,
  title: (a) => `Run tests${a.command ? `: ${String(a.command)}` : ''}`,
  run: async (a, ctx) => {
    const cmd = typeof a.command === 'string' && a.command ? a.command : testCommand(ctx.cwd);
    if (!cmd) return 'no test command found (no package.json, pytest config, tests/ or Makefile); pass one as command';
    return report(await runProgram(['/bin/sh', '-c', cmd], { ...ctx, timeoutMs: 600_000 }));
  },
};

const git: Tool = {
  name: 'git',
  description: 'Run git with the given arguments in the workspace (e.g. ["status"], ["diff"], ["commit","-am","msg"]).',
  parameters: { type: 'object', properties: { args: { type: 'array', items: { type: 'string' } } }, required: ['args'] },
  kind: 'execute',
  asks: true,
  title: (a) => `git ${Array.isArray(a.args) ? a.args.join(' ') : ''}`.slice(0, 200),
  run: async (a, ctx) => {
    if (!Array.isArray(a.args) || !a.args.every((x) => typeof x === 'string')) throw new Error('args must be an array of strings');
    return report(
      await runProgram(['git', '-c', 'user.name=nube agent', '-c', 'user.email=agent@nube.local', ...(a.args as string[])], ctx),
    );
  },
};

export const BASE_TOOLS: Tool[] = [shell, readFileTool, writeFileTool, editFileTool];
export const CODE_TOOLS: Tool[] = [...BASE_TOOLS, applyDiff, runTests, git];
