// A Dockerfile parser of its own (the npm ones pull in an editor's language-server stack for what is
// a line format): comments and parser directives, line continuations with the escape character,
// JSON (exec) and shell forms, flags, and variable substitution the way BuildKit does it for the
// instructions that take it. What nube cannot build (multi-stage, heredocs, HEALTHCHECK...) is an
// error naming its line, never silently ignored.

export class DockerfileError extends Error {
  constructor(
    readonly line: number,
    message: string,
  ) {
    super(`line ${line}: ${message}`);
    this.name = 'DockerfileError';
  }
}

export interface Instruction {
  /** First line of the instruction (1-based). */
  line: number;
  /** Upper case keyword. */
  keyword: string;
  flags: Record<string, string>;
  /** The text after the flags (continuations joined). */
  args: string;
  /** The exec form's array when the args are one (`["a","b"]`). */
  json: string[] | null;
}

const SUPPORTED = new Set([
  'FROM',
  'RUN',
  'COPY',
  'ADD',
  'ENV',
  'ARG',
  'WORKDIR',
  'USER',
  'EXPOSE',
  'CMD',
  'ENTRYPOINT',
  'LABEL',
  'MAINTAINER',
]);
const KNOWN = new Set([...SUPPORTED, 'HEALTHCHECK', 'ONBUILD', 'STOPSIGNAL', 'SHELL', 'VOLUME']);
const FLAGS: Record<string, string[]> = {
  FROM: [],
  RUN: [],
  COPY: ['chown', 'chmod'],
  ADD: ['chown', 'chmod'],
};

function parseJson(args: string): string[] | null {
  if (!args.startsWith('[')) return null;
  try {
    const v = JSON.parse(args) as unknown;
    return Array.isArray(v) && v.every((x) => typeof x === 'string') ? (v as string[]) : null;
  } catch {
    return null;
  }
}

/** The instructions of a Dockerfile; a DockerfileError names the first line nube cannot take. */
export function parseDockerfile(text: string): Instruction[] {
  const lines = text.replace(/\r\n/g, '\n').split('\n');
  let esc = '\\';
  let i = 0;
  // Parser directives: `# key=value` lines before anything else.
  for (; i < lines.length; i++) {
    const m = /^\s*#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$/.exec(lines[i]!);
    if (!m) break;
    const key = m[1]!.toLowerCase();
    if (key === 'escape') {
      if (m[2] !== '\\' && m[2] !== '`')
        throw new DockerfileError(i + 1, `escape must be \\ or \`, not ${m[2]}`);
      esc = m[2]!;
    } else if (key !== 'syntax' && key !== 'check') {
      break;
    }
  }
  const out: Instruction[] = [];
  while (i < lines.length) {
    const raw = lines[i]!;
    if (/^\s*(#.*)?$/.test(raw)) {
      i++;
      continue;
    }
    const start = i + 1;
    let text = '';
    let cur = raw;
    for (;;) {
      const trimmed = cur.replace(/\s+$/, '');
      if (trimmed.endsWith(esc) && !trimmed.endsWith(esc + esc)) {
        text += `${trimmed.slice(0, -1)}`;
        i++;
        // Comment and blank lines inside a continuation are dropped.
        while (i < lines.length && /^\s*(#.*)?$/.test(lines[i]!)) i++;
        if (i >= lines.length) break;
        cur = lines[i]!;
        continue;
      }
      text += trimmed;
      i++;
      break;
    }
    const m = /^\s*(\S+)(?:\s+([\s\S]*))?$/.exec(text);
    const word = m![1]!;
    const keyword = word.toUpperCase();
    if (!/^[A-Za-z]+$/.test(word) || !KNOWN.has(keyword))
      throw new DockerfileError(start, `unknown instruction ${word}`);
    if (!SUPPORTED.has(keyword))
      throw new DockerfileError(start, `${keyword} is not supported by nube's builder`);
    let rest = (m![2] ?? '').trim();
    if (/<<-?["']?[A-Za-z_]/.test(rest) && (keyword === 'RUN' || keyword === 'COPY' || keyword === 'ADD'))
      throw new DockerfileError(start, `heredocs (<<) are not supported by nube's builder`);
    const flags: Record<string, string> = {};
    for (;;) {
      const f = /^--([a-z-]+)(?:=(\S*))?(?:\s+|$)/.exec(rest);
      if (!f) break;
      const allowed = FLAGS[keyword] ?? [];
      if (keyword === 'COPY' && f[1] === 'from')
        throw new DockerfileError(start, 'COPY --from (multi-stage builds) is not supported');
      if (!allowed.includes(f[1]!))
        throw new DockerfileError(start, `${keyword} --${f[1]} is not supported`);
      flags[f[1]!] = f[2] ?? '';
      rest = rest.slice(f[0].length);
    }
    if (!rest && keyword !== 'CMD' && keyword !== 'ENTRYPOINT')
      throw new DockerfileError(start, `${keyword} needs arguments`);
    out.push({ line: start, keyword, flags, args: rest, json: parseJson(rest) });
  }
  const froms = out.filter((x) => x.keyword === 'FROM');
  const first = out.find((x) => x.keyword !== 'ARG');
  if (!first || first.keyword !== 'FROM')
    throw new DockerfileError(first?.line ?? 1, 'a Dockerfile starts with FROM (after ARGs)');
  if (froms.length > 1)
    throw new DockerfileError(froms[1]!.line, 'multi-stage builds (a second FROM) are not supported');
  return out;
}

/** `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR:+alt}` replaced from `vars`; `\$` stays `$`. */
export function substitute(s: string, vars: Record<string, string>, line: number): string {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (c === '\\' && s[i + 1] === '$') {
      out += '$';
      i++;
      continue;
    }
    if (c !== '$') {
      out += c;
      continue;
    }
    if (s[i + 1] === '{') {
      const end = s.indexOf('}', i + 2);
      if (end < 0) throw new DockerfileError(line, `missing } in ${s}`);
      const body = s.slice(i + 2, end);
      const m = /^([A-Za-z_][A-Za-z0-9_]*)(?::([-+])(.*))?$/.exec(body);
      if (!m) throw new DockerfileError(line, `bad substitution \${${body}}`);
      const v = vars[m[1]!];
      if (m[2] === '-') out += v ? v : substitute(m[3]!, vars, line);
      else if (m[2] === '+') out += v ? substitute(m[3]!, vars, line) : '';
      else out += v ?? '';
      i = end;
      continue;
    }
    const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(s.slice(i + 1));
    if (!m) {
      out += c;
      continue;
    }
    out += vars[m[0]] ?? '';
    i += m[0].length;
  }
  return out;
}

/** Words of a shell-like argument list: quotes group and are removed, `\` escapes. */
export function words(s: string, line: number): string[] {
  const out: string[] = [];
  let cur = '';
  let any = false;
  let q: '"' | "'" | null = null;
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (q) {
      if (c === q) q = null;
      else if (c === '\\' && q === '"' && i + 1 < s.length) cur += s[++i];
      else cur += c;
    } else if (c === '"' || c === "'") {
      q = c;
      any = true;
    } else if (c === '\\' && i + 1 < s.length) {
      cur += s[++i];
      any = true;
    } else if (/\s/.test(c)) {
      if (cur || any) out.push(cur);
      cur = '';
      any = false;
    } else {
      cur += c;
      any = true;
    }
  }
  if (q) throw new DockerfileError(line, `unterminated ${q} quote`);
  if (cur || any) out.push(cur);
  return out;
}

/** ENV and LABEL pairs: `K=v K2="a b"`, or the old `K value with spaces`. */
export function pairs(ins: Instruction, vars: Record<string, string>): [string, string][] {
  const ws = words(ins.args, ins.line);
  if (ws.length && !ws[0]!.includes('=')) {
    if (ins.keyword === 'ENV' || ins.keyword === 'LABEL') {
      const key = ws[0]!;
      const value = ins.args.slice(ins.args.indexOf(key) + key.length).trim();
      return [[key, substitute(words(value, ins.line).join(' '), vars, ins.line)]];
    }
  }
  return ws.map((w) => {
    const at = w.indexOf('=');
    if (at <= 0) throw new DockerfileError(ins.line, `${ins.keyword} expects KEY=value, not ${w}`);
    return [w.slice(0, at), substitute(w.slice(at + 1), vars, ins.line)];
  });
}
