// A parsed Dockerfile resolved against its base image's settings: the FROM reference (ARGs before it
// substituted), then every step with the environment, working dir and user it runs with, and the
// settings the template ends with (its image config). Only RUN, COPY and ADD change files; the other
// steps only change what later ones see.
import type { ImageConfig } from '../oci/registry.js';
import { DockerfileError, type Instruction, pairs, parseDockerfile, substitute, words } from './parse.js';

export interface FsStep {
  kind: 'run' | 'copy';
  /** 1-based index among all steps after FROM, and the line it came from. */
  index: number;
  line: number;
  /** The instruction as written (for logs and the cache key). */
  text: string;
  env: Record<string, string>;
  /** The ARG values in scope (defaults or build args): part of the step's cache key. */
  args: Record<string, string>;
  workdir: string;
  user: string;
  /** run: the shell command (the exec form's argv quoted for sh). */
  command?: string;
  /** copy: sources (context paths, or archives ADD unpacks), destination, --chown, --chmod. */
  sources?: string[];
  dest?: string;
  chown?: string;
  chmod?: string;
  add?: boolean;
}

export interface Plan {
  from: string;
  fromLine: number;
  /** Steps after FROM (metadata steps included, for `step k/n`). */
  total: number;
  steps: FsStep[];
  /** What each step is, in words, by index (1..total). */
  labels: string[];
  config: ImageConfig;
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * FROM's reference with ARGs declared before it substituted (validated before anything is pulled),
 * and every ARG name the Dockerfile declares (build args may only set those). `buildArgs` override
 * ARG defaults, as `docker build --build-arg` does.
 */
export function fromOf(
  dockerfile: string,
  buildArgs: Record<string, string> = {},
): { from: string; line: number; instructions: Instruction[]; declared: Set<string> } {
  const ins = parseDockerfile(dockerfile);
  const declared = new Set<string>();
  for (const i of ins) if (i.keyword === 'ARG') for (const [k] of argPairs(i)) declared.add(k);
  const args: Record<string, string> = {};
  for (const i of ins) {
    if (i.keyword === 'ARG') {
      for (const [k, v] of argPairs(i)) args[k] = buildArgs[k] ?? v ?? '';
      continue;
    }
    const ws = words(substitute(i.args, args, i.line), i.line);
    if (ws.length !== 1) {
      const as = ws.length === 3 && ws[1]!.toLowerCase() === 'as';
      if (!as) throw new DockerfileError(i.line, 'FROM takes one image (or template) name');
    }
    return { from: ws[0]!, line: i.line, instructions: ins, declared };
  }
  throw new DockerfileError(1, 'no FROM');
}

function argPairs(i: Instruction): [string, string | undefined][] {
  return words(i.args, i.line).map((w) => {
    const at = w.indexOf('=');
    const k = at < 0 ? w : w.slice(0, at);
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new DockerfileError(i.line, `bad ARG name ${k}`);
    return [k, at < 0 ? undefined : w.slice(at + 1)];
  });
}

/** The plan of a Dockerfile whose FROM resolved to an image (or template) with `base` settings. */
export function planOf(dockerfile: string, base: ImageConfig | null, buildArgs: Record<string, string> = {}): Plan {
  const { from, line, instructions } = fromOf(dockerfile, buildArgs);
  const after = instructions.slice(instructions.findIndex((i) => i.keyword === 'FROM') + 1);
  const env: Record<string, string> = {};
  for (const l of base?.env ?? []) {
    const at = l.indexOf('=');
    if (at > 0) env[l.slice(0, at)] = l.slice(at + 1);
  }
  const args: Record<string, string> = {};
  let workdir = base?.workdir || '/';
  let user = base?.user || 'root';
  let cmd = base?.cmd ?? null;
  let entrypoint = base?.entrypoint ?? null;
  const exposed = new Set(base?.exposedPorts ?? []);
  const steps: FsStep[] = [];
  const labels: string[] = [];
  const vars = () => ({ ...args, ...env });
  for (const [n, i] of after.entries()) {
    const index = n + 1;
    const text = `${i.keyword} ${Object.entries(i.flags)
      .map(([k, v]) => `--${k}=${v} `)
      .join('')}${i.args}`.trim();
    labels.push(text.length > 200 ? `${text.slice(0, 197)}...` : text);
    const sub = (s: string) => substitute(s, vars(), i.line);
    switch (i.keyword) {
      case 'ARG':
        for (const [k, v] of argPairs(i)) args[k] = buildArgs[k] ?? (v === undefined ? (args[k] ?? '') : sub(v));
        break;
      case 'ENV':
        for (const [k, v] of pairs(i, vars())) env[k] = v;
        break;
      case 'LABEL':
      case 'MAINTAINER':
        break;
      case 'WORKDIR': {
        const w = sub(words(i.args, i.line).join(' '));
        workdir = w.startsWith('/') ? w : `${workdir.replace(/\/$/, '')}/${w}`;
        break;
      }
      case 'USER':
        user = sub(i.args.trim());
        break;
      case 'EXPOSE':
        for (const p of words(sub(i.args), i.line)) {
          if (!/^\d{1,5}(\/(tcp|udp))?$/.test(p)) throw new DockerfileError(i.line, `EXPOSE: bad port ${p}`);
          exposed.add(p.includes('/') ? p : `${p}/tcp`);
        }
        break;
      case 'CMD':
        cmd = i.json ?? (i.args ? ['/bin/sh', '-c', i.args] : null);
        break;
      case 'ENTRYPOINT':
        entrypoint = i.json ?? (i.args ? ['/bin/sh', '-c', i.args] : null);
        // As with docker: a shell-form ENTRYPOINT ignores CMD, and setting ENTRYPOINT resets CMD.
        cmd = null;
        break;
      case 'RUN': {
        const command = i.json ? i.json.map(q).join(' ') : i.args;
        const runEnv = { ...env };
        // ARGs are in RUN's environment (not in the template's).
        for (const [k, v] of Object.entries(args)) if (!(k in runEnv)) runEnv[k] = v;
        steps.push({ kind: 'run', index, line: i.line, text, env: runEnv, args: { ...args }, workdir, user, command });
        break;
      }
      case 'COPY':
      case 'ADD': {
        const list = (i.json ?? words(i.args, i.line)).map(sub);
        if (list.length < 2) throw new DockerfileError(i.line, `${i.keyword} needs a source and a destination`);
        const dest = list.pop()!;
        for (const s of list) {
          if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s))
            throw new DockerfileError(i.line, `${i.keyword} of a URL is not supported: put it in the context`);
        }
        if (i.flags.chmod !== undefined && !/^[0-7]{3,4}$/.test(i.flags.chmod))
          throw new DockerfileError(i.line, `--chmod takes an octal mode, not ${i.flags.chmod}`);
        if (i.flags.chown !== undefined && !/^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?$/.test(sub(i.flags.chown)))
          throw new DockerfileError(i.line, `--chown takes user[:group], not ${i.flags.chown}`);
        steps.push({
          kind: 'copy',
          index,
          line: i.line,
          text,
          env: { ...env },
          args: { ...args },
          workdir,
          user,
          sources: list,
          dest: dest.startsWith('/') ? dest : `${workdir.replace(/\/$/, '')}/${dest}`,
          chown: i.flags.chown === undefined ? undefined : sub(i.flags.chown),
          chmod: i.flags.chmod,
          add: i.keyword === 'ADD',
        });
        break;
      }
    }
  }
  return {
    from,
    fromLine: line,
    total: after.length,
    steps,
    labels,
    config: {
      env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      cmd,
      entrypoint,
      workdir,
      user,
      exposedPorts: [...exposed],
    },
  };
}

/** The command a template's config starts (ENTRYPOINT then CMD), as one shell line; null when none. */
export function startCommandOf(c: ImageConfig): string | null {
  const argv = [...(c.entrypoint ?? []), ...(c.cmd ?? [])];
  if (!argv.length) return null;
  if (argv.length === 3 && argv[0] === '/bin/sh' && argv[1] === '-c') return argv[2]!;
  return argv.map(q).join(' ');
}
