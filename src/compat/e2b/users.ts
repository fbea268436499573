// E2B's users. Every envd call runs as a user of the sandbox: the one it names (`Authorization: Basic
// base64("<name>:")` on RPCs, `username` on /files), else E2B's default, `user` (uid 1000, home
// /home/user, passwordless sudo: nube's Debian templates have it). A sandbox without that account (a
// template of the operator's own) runs the default user's work as root, as nube did before it had one.
// Names resolve through the sandbox's own /etc/passwd and /etc/group, read when first needed and kept
// for a while (a user added inside is found at the next miss).
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import { asUserArgv, parseUsers, type RunAs, userEnv as sandboxUserEnv } from '../../areas/sandboxes/run-as.js';
import type { Principal } from '../../platform/auth.js';
import { ConnectError } from './connect-rpc.js';

export const DEFAULT_USER = 'user';
/** E2B's default user's home: relative paths resolve under it when that user is missing too. */
export const DEFAULT_HOME = '/home/user';

/** A user of the sandbox (the sandboxes area's RunAs: name, uid, gid, groups, home). */
export type E2bUser = RunAs;

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
  private readonly known = new Map<string, { users: Map<string, E2bUser>; at: number }>();

  constructor(private readonly sandboxes: SandboxesService) {}

  private async read(p: Principal, id: string): Promise<Map<string, E2bUser>> {
    const text = async (path: string) => {
      const r = (await this.sandboxes.work.file(p, id, 'read', { path, encoding: 'base64' }).catch(() => null)) as { content?: string } | null;
      return r?.content ? Buffer.from(r.content, 'base64').toString('utf8') : '';
    };
    const users = parseUsers(await text('/etc/passwd'), await text('/etc/group'));
    if (this.known.size >= MAX_SANDBOXES) this.known.clear();
    this.known.set(id, { users, at: Date.now() });
    return users;
  }

  /** The user a call runs as: the name it gives, else E2B's default (root when the sandbox lacks it). */
  async resolve(p: Principal, id: string, name: string | undefined): Promise<E2bUser> {
    const wanted = name ?? DEFAULT_USER;
    if (wanted === 'root') return ROOT;
    const cached = this.known.get(id);
    const hit = cached && Date.now() - cached.at < KEEP_MS ? cached.users.get(wanted) : undefined;
    const found = hit ?? (await this.read(p, id)).get(wanted);
    if (found) return found;
    if (name === undefined) return { ...ROOT, home: DEFAULT_HOME };
    throw new ConnectError('invalid_argument', `user '${wanted}' does not exist in the sandbox`);
  }
}

/** argv that runs `argv` as `u` (util-linux's setpriv, in every Debian template); root needs none. */
export function asUser(u: E2bUser, argv: string[]): string[] {
  return u.uid === 0 ? argv : asUserArgv(u, argv, 'setpriv');
}

/** What envd puts in a process's environment for its user (before the sandbox's and the call's own). */
export const userEnv: (u: E2bUser) => Record<string, string> = sandboxUserEnv;
