// Commands and files as a user of the sandbox other than root: an exec's `user`, or the default user
// of the sandbox's template (its `user`, or its image's USER). Names resolve against the sandbox's own
// /etc/passwd and /etc/group, read when first needed and kept a few seconds (a user added inside is
// found at the next miss). Docker's forms: `name`, `uid`, `name:group`, `uid:gid`.
import { errors } from '../../platform/errors.js';
import type { SandboxRuntime } from './runtime/driver.js';
import { isImported } from './runtime/namespaces/imported-template.js';

export interface RunAs {
  name: string;
  uid: number;
  gid: number;
  /** Supplementary groups (from /etc/group), the primary one first. */
  groups: number[];
  home: string;
}

/** The program that switches: nube's static /.nube/runas, or util-linux's setpriv (nube's Debian templates). */
export type Switcher = 'runas' | 'setpriv';

const KEEP_MS = 5_000;
const MAX_SANDBOXES = 2048;

/** Users of a passwd file, with their groups from a group file, by name. */
export function parseUsers(passwd: string, group: string): Map<string, RunAs> {
  const extra = new Map<string, number[]>();
  for (const line of group.split('\n')) {
    const [, , gid, members] = line.split(':');
    for (const m of members?.split(',') ?? []) if (m) extra.set(m, [...(extra.get(m) ?? []), Number(gid)]);
  }
  const users = new Map<string, RunAs>();
  for (const line of passwd.split('\n')) {
    const f = line.split(':');
    if (f.length < 7 || !/^\d+$/.test(f[2]!) || !/^\d+$/.test(f[3]!)) continue;
    const gid = Number(f[3]);
    users.set(f[0]!, {
      name: f[0]!,
      uid: Number(f[2]),
      gid,
      home: f[5] || '/',
      groups: [...new Set([gid, ...(extra.get(f[0]!) ?? [])])],
    });
  }
  return users;
}

function parseGroups(group: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of group.split('\n')) {
    const [name, , gid] = line.split(':');
    if (name && gid && /^\d+$/.test(gid)) out.set(name, Number(gid));
  }
  return out;
}

const ID = /^\d{1,10}$/;
/** A spec that means root: no switch at all. */
export function isRootSpec(spec: string | undefined | null): boolean {
  return !spec || spec === 'root' || spec === '0' || spec === 'root:root' || spec === '0:0';
}

/**
 * The user `spec` names in a sandbox with these files, or why not. A uid without a passwd entry runs
 * with gid 0 and home `/`, as Docker runs it.
 */
export function resolveSpec(spec: string, passwd: string, group: string): RunAs | string {
  const [u, g] = spec.split(':') as [string, string | undefined];
  const users = parseUsers(passwd, group);
  let who: RunAs | undefined = users.get(u);
  if (!who && ID.test(u)) {
    const uid = Number(u);
    who = [...users.values()].find((x) => x.uid === uid) ?? { name: u, uid, gid: 0, groups: [0], home: '/' };
  }
  if (!who) return `user ${u} does not exist in the sandbox (its /etc/passwd)`;
  if (g === undefined) return who;
  const gid = ID.test(g) ? Number(g) : parseGroups(group).get(g);
  if (gid === undefined) return `group ${g} does not exist in the sandbox (its /etc/group)`;
  return { ...who, gid, groups: [gid] };
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** argv that runs `argv` as `u`. */
export function asUserArgv(u: RunAs, argv: string[], how: Switcher): string[] {
  if (how === 'runas')
    return [
      '/.nube/runas',
      String(u.uid),
      String(u.gid),
      u.groups.length ? u.groups.join(',') : '-',
      '--',
      ...argv,
    ];
  const groups = u.groups.length ? [`--groups=${u.groups.join(',')}`] : ['--clear-groups'];
  return ['setpriv', `--reuid=${u.uid}`, `--regid=${u.gid}`, ...groups, '--', ...argv];
}

/** A shell command line that runs `command` (a `sh -c` line) as `u`. */
export function asUserCommand(u: RunAs, command: string, how: Switcher): string {
  return `exec ${asUserArgv(u, ['/bin/sh', '-c', command], how).map(q).join(' ')}`;
}

/** What a process of `u` finds in its environment before the sandbox's and the call's own. */
export function userEnv(u: RunAs): Record<string, string> {
  return { HOME: u.home, USER: u.name, LOGNAME: u.name };
}

export class SandboxUsers {
  private readonly known = new Map<string, { at: number; passwd: string; group: string }>();

  constructor(private readonly runtime: SandboxRuntime) {}

  /**
   * nube's static runas is in every imported template (an image's, a Dockerfile's) and in every gVisor
   * sandbox's /.nube; nube's own templates on the namespaces driver are Debian with setpriv.
   */
  switcher(template: string): Switcher {
    return this.runtime.kind === 'gvisor' || isImported(template) ? 'runas' : 'setpriv';
  }

  private async files(runtimeId: string, fresh: boolean): Promise<{ passwd: string; group: string }> {
    const hit = this.known.get(runtimeId);
    if (hit && !fresh && Date.now() - hit.at < KEEP_MS) return hit;
    const read = (path: string) =>
      this.runtime.readFile(runtimeId, path).then(
        (b) => b.toString('utf8'),
        () => '',
      );
    const got = { at: Date.now(), passwd: await read('/etc/passwd'), group: await read('/etc/group') };
    if (this.known.size >= MAX_SANDBOXES) this.known.clear();
    this.known.set(runtimeId, got);
    return got;
  }

  /**
   * The user a call runs as (null: root, no switch). `asked` is the call's own (a bad one is a 400 on
   * `field`); otherwise the template's default, which the sandbox no longer having is a 409.
   */
  async resolve(
    runtimeId: string,
    asked: string | undefined,
    fallback: string | undefined,
    field: (string | number)[] = ['body', 'user'],
  ): Promise<RunAs | null> {
    const spec = asked ?? fallback;
    if (isRootSpec(spec)) return null;
    let f = await this.files(runtimeId, false);
    let r = resolveSpec(spec!, f.passwd, f.group);
    if (typeof r === 'string') {
      f = await this.files(runtimeId, true);
      r = resolveSpec(spec!, f.passwd, f.group);
    }
    if (typeof r !== 'string') return r;
    if (asked !== undefined) throw errors.badRequest(r, [{ path: field, message: r }]);
    throw errors.conflict(`the template's user: ${r}`, 'TemplateUserMissing');
  }

  forget(runtimeId: string): void {
    this.known.delete(runtimeId);
  }
}
