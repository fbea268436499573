// E2B's users. Every envd call runs as a user of the sandbox: the one it names (`Authorization: Basic
// base64("<name>:")` on RPCs, `username` on /files), else E2B's default, `user` (uid 1000, home
// /home/user, passwordless sudo: nube's Debian templates have it). A sandbox without that account (a
// template of the operator's own) runs the default user's work as root, as nube did before it had one.
// Names resolve through the sandbox's own /etc/passwd and /etc/group, read when first needed and kept
// for a while (a user added inside is found at the next miss).
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import { asUserArgv, parseUsers, type RunAs, type Switcher, userEnv as sandboxUserEnv } from '../../areas/sandboxes/run-as.js';
import type { Principal } from '../../platform/auth.js';
import { ConnectError } from './connect-rpc.js';

export const DEFAULT_USER = 'user';
/** E2B's default user's home: relative paths resolve under it when that user is missing too. */
export const DEFAULT_HOME = '/home/user';

/** A user of the sandbox (the sandboxes area's RunAs: name, uid, gid, groups, home); `workdir`: its template's. */
export type E2bUser = RunAs & { workdir?: string; how?: Switcher };

export const ROOT: E2bUser = { name: 'root', uid: 0, gid: 0, home: '/root', groups: [0] };

const KEEP_MS = 60_000;
const MAX_SANDBOXES = 2048;

/** The name an RPC's `Authorization: Basic base64("<name>:")` carries, if any. */
export function basicUser(header: string | string[] | undefined): string | undefined {
  const v = Array.isArray(header) ? header[0] : header;
  const m = v ? /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(v) : null;
  if (!m) return undefined;
  const text = Buffer.from(m[1]!, 'base64').toString('utf8');
  const name = text.includes(':') ? text.slice(0, text.indexOf(':')) : text;
  return name || undefined;
}

export class Users {
  private readonly known = new Map<string, { users: Map<string, E2bUser>; at: number; defaults: { user?: string; cwd?: string; switcher: Switcher } }>();

  constructor(private readonly sandboxes: SandboxesService) {}

  private async read(p: Principal, id: string) {
    const text = async (path: string) => {
      const r = (await this.sandboxes.work.file(p, id, 'read', { path, encoding: 'base64' }).catch(() => null)) as { content?: string } | null;
      return r?.content ? Buffer.from(r.content, 'base64').toString('utf8') : '';
    };
    const users = parseUsers(await text('/etc/passwd'), await text('/etc/group'));
    const defaults = await this.sandboxes.templateDefaults(p, id);
    if (this.known.size >= MAX_SANDBOXES) this.known.clear();
    const entry = { users, at: Date.now(), defaults };
    this.known.set(id, entry);
    return entry;
  }

  /**
   * The user a call runs as: the name it gives, else its template's user (an E2B template's last
   * setUser), else E2B's default (root when the sandbox lacks it); with its template's working dir.
   */
  async resolve(p: Principal, id: string, name: string | undefined): Promise<E2bUser> {
    const cached = this.known.get(id);
    const fresh = cached && Date.now() - cached.at < KEEP_MS ? cached : await this.read(p, id);
    const wanted = name ?? fresh.defaults.user ?? DEFAULT_USER;
    const cwd = { ...(fresh.defaults.cwd ? { workdir: fresh.defaults.cwd } : {}), how: fresh.defaults.switcher };
    if (wanted === 'root') return { ...ROOT, ...cwd };
    const found = fresh.users.get(wanted) ?? (fresh === cached ? (await this.read(p, id)).users.get(wanted) : undefined);
    if (found) return { ...found, ...cwd };
    if (name === undefined) return { ...ROOT, home: DEFAULT_HOME, ...cwd };
    throw new ConnectError('invalid_argument', `user '${wanted}' does not exist in the sandbox`);
  }
}

/** argv that runs `argv` as `u` (util-linux's setpriv in nube's Debian templates, nube's runas in imported ones); root needs none. */
export function asUser(u: E2bUser, argv: string[]): string[] {
  return u.uid === 0 ? argv : asUserArgv(u, argv, u.how ?? 'setpriv');
}

/** What envd puts in a process's environment for its user (before the sandbox's and the call's own). */
export const userEnv: (u: E2bUser) => Record<string, string> = sandboxUserEnv;
