// E2B's template build (the SDK's `Template()` steps) as a Dockerfile for nube's templates area, with
// E2B's semantics kept where a Dockerfile's differ: a default user `user` (made with passwordless sudo
// where the image has sudoers.d) whose home is the working dir until setWorkdir; RUN, COPY's owner and
// setWorkdir's new directories as the current user; setUser making a user the image lacks; a step's
// `force` (and the build's) as an ARG no earlier build had, so it and every step after it run again.
// Each SDK step's lines follow a `# e2b step k: ...` comment: a failure's Dockerfile line leads back
// to the SDK's step (its `reason.step`, which the SDK turns into the stack trace of the call).
import { randomBytes } from 'node:crypto';
import { errors } from '../../platform/errors.js';

export interface E2bStep {
  type: string;
  args?: string[];
  filesHash?: string;
  force?: boolean;
}

export interface E2bBuildStart {
  fromImage?: string;
  fromTemplate?: string;
  startCmd?: string;
  readyCmd?: string;
  steps?: E2bStep[];
  force?: boolean;
}

export interface Translated {
  dockerfile: string;
  /** The uploads COPY steps read, by files hash (each goes under `<hash>/` in the context). */
  hashes: string[];
}

/** E2B's default user, made at the start of every build from an image (and FROM a template, if missing). */
export const E2B_USER = 'user';
const USER_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$/;
const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MODE = /^[0-7]{3,4}$/;

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** A RUN line: the shell form when it stays one line, else the exec form (a JSON string holds any text). */
function run(cmd: string): string {
  return /[\n\r]/.test(cmd) || cmd.trimStart().startsWith('[') ? `RUN ${JSON.stringify(['/bin/sh', '-c', cmd])}` : `RUN ${cmd}`;
}

/**
 * Makes user `name` when /etc/passwd has none (useradd, busybox adduser, else the files by hand), with
 * its home; with `sudo`, a NOPASSWD sudoers entry where the image has /etc/sudoers.d. Only a shell needed.
 */
export function ensureUser(name: string, sudo: boolean): string {
  const has = `(while IFS=: read -r u _; do [ "$u" = "$n" ] && exit 0; done < /etc/passwd; exit 1) 2>/dev/null`;
  const uidUsed = `(while IFS=: read -r _ _ i _; do [ "$i" = "$id" ] && exit 0; done < /etc/passwd; exit 1) 2>/dev/null`;
  const byHand = `id=1000; while ${uidUsed}; do id=$((id+1)); done; echo "$n:x:$id:$id::/home/$n:/bin/sh" >> /etc/passwd && echo "$n:x:$id:" >> /etc/group && mkdir -p "/home/$n" && chown "$id:$id" "/home/$n"`;
  const make = `if command -v useradd >/dev/null 2>&1; then useradd --create-home --shell "$(command -v bash || echo /bin/sh)" "$n"; elif command -v adduser >/dev/null 2>&1; then adduser -D "$n"; else ${byHand}; fi`;
  const sudoers = sudo
    ? `; if [ -d /etc/sudoers.d ]; then echo "$n ALL=(ALL:ALL) NOPASSWD: ALL" > "/etc/sudoers.d/$n" && chmod 440 "/etc/sudoers.d/$n"; fi`
    : '';
  return `n=${q(name)}; if ! ${has}; then ${make}; fi${sudoers}`;
}

/** E2B's COPY source: the part of the pattern before its first glob (doublestar's SplitPattern of `src/`). */
export function copyBase(src: string): string {
  const p = src.endsWith('/') ? src : `${src}/`;
  const meta = p.search(/[*?[{]/);
  const head = meta < 0 ? p : p.slice(0, meta);
  const cut = head.lastIndexOf('/');
  const base = cut < 0 ? '' : head.slice(0, cut);
  return base === '.' || base === './' ? '' : base.replace(/^\.\//, '');
}

const bad = (k: number, message: string) =>
  errors.badRequest(`step ${k}: ${message}`, [{ path: ['body', 'steps', k - 1], message }]);

/** The SDK's build as a Dockerfile; bad steps are 400s naming the step. */
export function translate(b: E2bBuildStart): Translated {
  const from = b.fromTemplate ?? b.fromImage;
  if (!from || (b.fromImage !== undefined && b.fromTemplate !== undefined))
    throw errors.badRequest('give exactly one of fromImage and fromTemplate', [{ path: ['body', 'fromImage'], message: 'one of fromImage, fromTemplate' }]);
  if (/\s/.test(from)) throw errors.badRequest(`${from} is not an image or template name`, [{ path: ['body', b.fromTemplate ? 'fromTemplate' : 'fromImage'], message: 'no spaces' }]);
  const lines: string[] = [`FROM ${from}`];
  const force = (n: string) => lines.push(`ARG NUBE_E2B_FORCE${n}=${randomBytes(8).toString('hex')}`);
  if (b.force) force('');
  lines.push('# e2b step base: the default user', 'USER root', run(ensureUser(E2B_USER, true)), `USER ${E2B_USER}`);
  let user = E2B_USER;
  // Until setWorkdir, E2B's steps run in the current user's home; FROM a template, in its working dir.
  let workdirSet = b.fromTemplate !== undefined;
  if (!workdirSet) lines.push(`WORKDIR /home/${E2B_USER}`);
  const asUser = (who: string, body: string[]) => (who === user ? body : [`USER ${who}`, ...body, `USER ${user}`]);
  const hashes = new Set<string>();
  for (const [i, s] of (b.steps ?? []).entries()) {
    const k = i + 1;
    const args = s.args ?? [];
    const type = s.type.toUpperCase();
    lines.push(`# e2b step ${k}: ${`${type} ${args.join(' ')}`.replace(/\s+/g, ' ').slice(0, 120)}`);
    if (s.force) force(`_${k}`);
    switch (type) {
      case 'RUN': {
        if (!args[0]) throw bad(k, 'RUN needs a command');
        const who = args[1] || user;
        if (!USER_NAME.test(who)) throw bad(k, `${who} is not a user name`);
        lines.push(...asUser(who, [run(args[0])]));
        break;
      }
      case 'COPY': {
        const [src, dest, owner, mode] = args;
        if (!src || !dest) throw bad(k, 'COPY needs a source and a destination');
        if (!s.filesHash || !/^[a-f0-9]{64}$/.test(s.filesHash)) throw bad(k, 'COPY needs the filesHash of its upload');
        const who = owner || `${user}:${user}`;
        const [u, g] = who.split(':');
        if (!USER_NAME.test(u!) || (g !== undefined && !USER_NAME.test(g))) throw bad(k, `${who} is not user[:group]`);
        if (mode && !MODE.test(mode)) throw bad(k, `${mode} is not an octal mode`);
        hashes.add(s.filesHash);
        const base = copyBase(src);
        const flags = [...(u === 'root' && (g ?? 'root') === 'root' ? [] : [`--chown=${g === undefined ? `${u}:${u}` : who}`]), ...(mode ? [`--chmod=${mode}`] : [])];
        lines.push(`COPY ${flags.map((f) => `${f} `).join('')}${JSON.stringify([base ? `${s.filesHash}/${base}` : s.filesHash, dest])}`);
        break;
      }
      case 'ENV': {
        if (!args.length || args.length % 2) throw bad(k, 'ENV takes key and value pairs');
        const pairs: string[] = [];
        for (let j = 0; j < args.length; j += 2) {
          const [key, value] = [args[j]!, args[j + 1]!];
          if (!ENV_KEY.test(key)) throw bad(k, `${key} is not an environment variable name`);
          if (/[\n\r]/.test(value)) throw bad(k, `the value of ${key} has a line break, which nube's builder does not take`);
          pairs.push(`${key}="${value.replace(/[\\"]/g, (c) => `\\${c}`)}"`);
        }
        lines.push(`ENV ${pairs.join(' ')}`);
        break;
      }
      case 'WORKDIR': {
        const dir = args[0];
        if (!dir || /[\n\r]/.test(dir)) throw bad(k, 'WORKDIR needs a path');
        // New directories belong to the current user, as E2B makes them.
        const own = user === 'root' ? '' : ` && chown ${q(user)}: "$d" 2>/dev/null || chown ${q(user)} "$d"`;
        lines.push('USER root', run(`d=${q(dir)}; [ -d "$d" ] || { mkdir -p "$d"${own}; }`), `USER ${user}`, `WORKDIR ${dir}`);
        workdirSet = true;
        break;
      }
      case 'USER': {
        const name = args[0];
        if (!name || !USER_NAME.test(name)) throw bad(k, `${name ?? ''} is not a user name`);
        if (name !== 'root') lines.push('USER root', run(ensureUser(name, args[1] === 'true')));
        lines.push(`USER ${name}`);
        user = name;
        if (!workdirSet) lines.push(`WORKDIR ${name === 'root' ? '/root' : `/home/${name}`}`);
        break;
      }
      default:
        throw bad(k, `${s.type} steps are not supported by nube (RUN, COPY, ENV, WORKDIR, USER are)`);
    }
  }
  return { dockerfile: `${lines.join('\n')}\n`, hashes: [...hashes] };
}

/** The SDK's step a Dockerfile line belongs to: its number, `base`, or undefined (FROM). */
export function stepOfLine(dockerfile: string, line: number): { step: string; label: string } | undefined {
  const lines = dockerfile.split('\n');
  for (let i = Math.min(line, lines.length) - 1; i >= 0; i--) {
    const m = /^# e2b step (\w+): (.*)$/.exec(lines[i]!);
    if (m) return { step: m[1]!, label: m[2]! };
  }
  return undefined;
}

/** Failures of the base (the image or template built on), which the SDK pins on its from...() call. */
const BASE_CODES = new Set([
  'ImageNotFound', 'AuthRefused', 'RegistryRefused', 'RegistryUnreachable', 'RegistryError', 'DigestMismatch',
  'UnsupportedImage', 'LayerRefused', 'BaseNotReady',
]);

/**
 * A build failure in the SDK's terms: the step it came from (for its stack trace) and the message with
 * that step named instead of the generated Dockerfile's line.
 */
export function failureOf(dockerfile: string | null, error: string, code: string | null): { message: string; step?: string } {
  if (code && BASE_CODES.has(code)) return { message: error, step: 'base' };
  const m = /^(?:RUN )?step \d+\/\d+ \(line (\d+)\):? ?([\s\S]*)$/.exec(error);
  const at = m && dockerfile ? stepOfLine(dockerfile, Number(m[1])) : undefined;
  if (!m || !at) return { message: error };
  if (at.step === 'base') return { message: `making the default user failed: ${m[2]}`, step: 'base' };
  return { message: `step ${at.step} (${at.label}) ${m[2]}`, step: at.step };
}
