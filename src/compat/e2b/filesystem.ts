// envd's filesystem service (filesystem.Filesystem): stat, list, make, move and remove, each one small
// shell script run inside the sandbox (so paths resolve there, symlinks included), paths as argv. As
// envd's, they run as root: the call's user gives relative paths their base (its home) and owns the
// directories made for it. Entries come from `find -printf`, one format for a
// single entry and for listings at any depth; E2B's file metadata (`user.e2b.*` extended attributes)
// comes from getfattr after them.
import { posix } from 'node:path';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { Principal } from '../../platform/auth.js';
import { ConnectError } from './connect-rpc.js';
import { METADATA_SCRIPT, parseMetadata } from './metadata.js';
import type { E2bUser } from './users.js';

/** A path of the call: relative ones (and `~`) resolve under the user's home, as envd resolves them. */
export function absolute(path: unknown, home: string): string {
  if (typeof path !== 'string' || path === '') throw new ConnectError('invalid_argument', 'path is required');
  if (path.includes('\0')) throw new ConnectError('invalid_argument', 'path contains a NUL byte');
  const p = path === '~' ? home : path.startsWith('~/') ? `${home}/${path.slice(2)}` : path;
  return posix.resolve(home, p);
}

// type, type followed through symlinks, size, octal mode, permissions, owner, group, mtime, path,
// symlink target: NUL after each.
const FORMAT = "%y\\0%Y\\0%s\\0%m\\0%M\\0%u\\0%g\\0%T@\\0%p\\0%l\\0";
const FIELDS = 10;
/** Between the entries and the metadata (never the first byte of an entry: that is a type letter). */
const METADATA_MARK = 0x01;
const MISSING = 44;
const EXISTS = 17;
const NOT_DIR = 20;

const ENTRY = `{ find "$1" -maxdepth 0 -printf '${FORMAT}'; printf '\\001'; $GF -- "$1" 2>/dev/null; true; }`;
const SCRIPTS = {
  stat: `[ -e "$1" ] || [ -L "$1" ] || exit ${MISSING}; ${ENTRY}`,
  list: `[ -e "$1" ] || exit ${MISSING}; [ -d "$1" ] || exit ${NOT_DIR}
find "$1" -mindepth 1 -maxdepth "$2" -printf '${FORMAT}'; printf '\\001'
find "$1" -mindepth 1 -maxdepth "$2" -exec $GF -- {} + 2>/dev/null; true`,
  makeDir: `[ -e "$1" ] && exit ${EXISTS}; ensure "$1" "$3" && ${ENTRY}`,
  move: `[ -e "$2" ] || [ -L "$2" ] || exit ${MISSING}; ensure "$(dirname -- "$1")" "$3" && mv -fT -- "$2" "$1" && ${ENTRY}`,
  // envd's remove is RemoveAll: a path that is not there is no error.
  remove: 'rm -rf -- "$1"',
};

/** `ensure DIR UID:GID`: makes DIR and its missing parents, each owned by the user (envd's EnsureDirs). */
export const ENSURE_DIRS = `ensure() { [ -d "$1" ] && return 0; ensure "$(dirname -- "$1")" "$2" || return 1; mkdir -- "$1" && chown "$2" -- "$1"; }`;

const TYPES: Record<string, string> = { f: 'FILE_TYPE_FILE', d: 'FILE_TYPE_DIRECTORY', l: 'FILE_TYPE_SYMLINK' };

export interface Entry {
  name: string;
  type: string;
  path: string;
  size: string;
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  modifiedTime: string;
  symlinkTarget?: string;
  metadata?: Record<string, string>;
}

/**
 * A directory's size as E2B's sandboxes (ext4) report it: whole 4 KiB blocks, at least one. nube's
 * sandbox layers sit on btrfs, whose directory size is the length of its names (0 when empty); the
 * SDK's users see what E2B's envd shows them.
 */
export function ext4DirSize(size: string): string {
  return String(Math.max(1, Math.ceil(Number(size) / 4096)) * 4096);
}

/** The entries `find -printf FORMAT` printed, then the metadata section after the mark. */
export function parseEntries(out: Buffer): Entry[] {
  const list: Entry[] = [];
  let at = 0;
  const field = () => {
    const end = out.indexOf(0, at);
    const v = out.toString('utf8', at, end === -1 ? out.length : end);
    at = end === -1 ? out.length : end + 1;
    return v;
  };
  while (at < out.length && out[at] !== METADATA_MARK) {
    const [type, followed, size, mode, perms, owner, group, mtime, path, target] = Array.from({ length: FIELDS }, field) as string[];
    // As envd: a symlink is reported with its target's type, the target resolved to an absolute path.
    const link = type === 'l';
    list.push({
      name: posix.basename(path!),
      type: TYPES[link ? followed! : type!] ?? 'FILE_TYPE_UNSPECIFIED',
      path: path!,
      size: type === 'd' ? ext4DirSize(size!) : size!,
      mode: Number.parseInt(mode!, 8),
      permissions: link ? `L${perms!.slice(1)}` : perms!,
      owner: owner!,
      group: group!,
      modifiedTime: new Date(Number(mtime) * 1000).toISOString(),
      ...(link ? { symlinkTarget: posix.resolve(posix.dirname(path!), target!) } : {}),
    });
  }
  const meta = parseMetadata(out.subarray(at + 1));
  for (const e of list) {
    const m = meta.get(e.path);
    if (m && Object.keys(m).length) e.metadata = m;
  }
  return list;
}

export class Filesystem {
  constructor(private readonly sandboxes: SandboxesService) {}

  /** Runs one of the scripts for `user`: stdout, or the ConnectError its exit code stands for. */
  private async run(p: Principal, id: string, user: E2bUser, script: keyof typeof SCRIPTS, args: string[]) {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    // $1 [$2] the paths, the next one the user's uid:gid.
    const owner = `${user.uid}:${user.gid}`;
    const argv = script === 'list' || script === 'move' ? [...args, owner] : [...args, '', owner];
    const r = await this.sandboxes.work.execStream(
      p,
      id,
      ['/bin/sh', '-c', `${METADATA_SCRIPT}\n${ENSURE_DIRS}\n${SCRIPTS[script]}`, 'sh', ...argv],
      { cwd: '/', timeoutMs: 60_000 },
      { stdout: (b) => out.push(b), stderr: (b) => err.push(b) },
    );
    const what = args[script === 'move' ? 1 : 0];
    if (r.exitCode === MISSING) throw new ConnectError('not_found', `no such file or directory: ${what}`);
    if (r.exitCode === EXISTS) throw new ConnectError('already_exists', `already exists: ${what}`);
    if (r.exitCode === NOT_DIR) throw new ConnectError('invalid_argument', `path '${what}' is not a directory`);
    if (r.exitCode !== 0) {
      const msg = Buffer.concat(err).toString('utf8').trim() || `exit ${r.exitCode}`;
      throw new ConnectError(/Permission denied|Operation not permitted/.test(msg) ? 'permission_denied' : 'internal', msg);
    }
    return parseEntries(Buffer.concat(out));
  }

  /** One entry (Stat): also what a watch event carries and what an upload answers. */
  async stat(p: Principal, id: string, user: E2bUser, path: string): Promise<Entry> {
    return (await this.run(p, id, user, 'stat', [path]))[0]!;
  }

  async call(p: Principal, id: string, user: E2bUser, method: string, req: Record<string, unknown>): Promise<unknown> {
    const abs = (v: unknown) => absolute(v, user.home);
    switch (method) {
      case 'Stat':
        return { entry: await this.stat(p, id, user, abs(req.path)) };
      case 'ListDir': {
        const depth = req.depth === undefined ? 1 : Number(req.depth);
        if (!Number.isInteger(depth) || depth < 0) throw new ConnectError('invalid_argument', 'depth must be a whole number');
        const list = await this.run(p, id, user, 'list', [abs(req.path), String(Math.max(1, depth))]);
        return { entries: list.sort((a, b) => a.path.localeCompare(b.path)) };
      }
      case 'MakeDir':
        return { entry: (await this.run(p, id, user, 'makeDir', [abs(req.path)]))[0] };
      case 'Move':
        return { entry: (await this.run(p, id, user, 'move', [abs(req.destination), abs(req.source)]))[0] };
      case 'Remove':
        await this.run(p, id, user, 'remove', [abs(req.path)]);
        return {};
      default:
        throw new ConnectError('unimplemented', `filesystem.Filesystem/${method} is not implemented on nube`);
    }
  }
}
