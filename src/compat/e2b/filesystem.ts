// envd's filesystem service (filesystem.Filesystem): stat, list, make, move and remove, each one small
// shell script run inside the sandbox (so paths resolve there, symlinks included), paths as argv.
// Entries come from `find -printf`, one format for a single entry and for listings.
import { posix } from 'node:path';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { Principal } from '../../platform/auth.js';
import { ConnectError } from './connect-rpc.js';

/**
 * E2B's working directory and home (its user's, /home/user): relative paths resolve against it, commands
 * start in it with HOME set to it, the code interpreter's kernel runs in it. Templates have the
 * directory; nube's commands run as root (root inside a sandbox is no one outside it).
 */
export const HOME = '/home/user';

export function absolute(path: unknown): string {
  if (typeof path !== 'string' || path === '') throw new ConnectError('invalid_argument', 'path is required');
  if (path.includes('\0')) throw new ConnectError('invalid_argument', 'path contains a NUL byte');
  const p = path === '~' ? HOME : path.startsWith('~/') ? `${HOME}/${path.slice(2)}` : path;
  return posix.resolve(HOME, p);
}

// type, size, octal mode, permissions, owner, group, mtime, path, symlink target
const FORMAT = "%y\\0%s\\0%m\\0%M\\0%u\\0%g\\0%T@\\0%p\\0%l\\0";
const FIELDS = 9;
const MISSING = 44;
const EXISTS = 17;
const NOT_DIR = 20;

const ENTRY = `find "$1" -maxdepth 0 -printf '${FORMAT}'`;
const SCRIPTS = {
  stat: `[ -e "$1" ] || [ -L "$1" ] || exit ${MISSING}; ${ENTRY}`,
  list: `[ -e "$1" ] || exit ${MISSING}; [ -d "$1" ] || exit ${NOT_DIR}; find "$1" -mindepth 1 -maxdepth "$2" -printf '${FORMAT}'`,
  makeDir: `[ -e "$1" ] && exit ${EXISTS}; mkdir -p -- "$1" && ${ENTRY}`,
  move: `[ -e "$2" ] || [ -L "$2" ] || exit ${MISSING}; mkdir -p -- "$(dirname -- "$1")" && mv -fT -- "$2" "$1" && ${ENTRY}`,
  remove: `[ -e "$1" ] || [ -L "$1" ] || exit ${MISSING}; rm -rf -- "$1"`,
};

const TYPES: Record<string, string> = { f: 'FILE_TYPE_FILE', d: 'FILE_TYPE_DIRECTORY', l: 'FILE_TYPE_SYMLINK' };

function entries(out: Buffer) {
  const f = out.toString('utf8').split('\0');
  const list = [];
  for (let i = 0; i + FIELDS <= f.length; i += FIELDS) {
    const [type, size, mode, perms, owner, group, mtime, path, target] = f.slice(i, i + FIELDS) as string[];
    list.push({
      name: posix.basename(path!),
      type: TYPES[type!] ?? 'FILE_TYPE_UNSPECIFIED',
      path: path!,
      size: size!,
      mode: Number.parseInt(mode!, 8),
      permissions: perms!,
      owner: owner!,
      group: group!,
      modifiedTime: new Date(Number(mtime) * 1000).toISOString(),
      ...(type === 'l' ? { symlinkTarget: target! } : {}),
    });
  }
  return list;
}

export class Filesystem {
  constructor(private readonly sandboxes: SandboxesService) {}

  private async run(p: Principal, id: string, script: keyof typeof SCRIPTS, args: string[]) {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const r = await this.sandboxes.work.execStream(
      p,
      id,
      ['/bin/sh', '-c', SCRIPTS[script], 'sh', ...args],
      { cwd: '/', timeoutMs: 60_000 },
      { stdout: (b) => out.push(b), stderr: (b) => err.push(b) },
    );
    const what = args[script === 'move' ? 1 : 0];
    if (r.exitCode === MISSING) throw new ConnectError('not_found', `no such file or directory: ${what}`);
    if (r.exitCode === EXISTS) throw new ConnectError('already_exists', `already exists: ${what}`);
    if (r.exitCode === NOT_DIR) throw new ConnectError('invalid_argument', `not a directory: ${what}`);
    if (r.exitCode !== 0) {
      const msg = Buffer.concat(err).toString('utf8').trim() || `exit ${r.exitCode}`;
      throw new ConnectError(/Permission denied/.test(msg) ? 'permission_denied' : 'internal', msg);
    }
    return entries(Buffer.concat(out));
  }

  async call(p: Principal, id: string, method: string, req: Record<string, unknown>): Promise<unknown> {
    switch (method) {
      case 'Stat':
        return { entry: (await this.run(p, id, 'stat', [absolute(req.path)]))[0] };
      case 'ListDir': {
        const depth = req.depth === undefined ? 1 : Number(req.depth);
        if (!Number.isInteger(depth) || depth < 1) throw new ConnectError('invalid_argument', 'depth must be at least 1');
        const list = await this.run(p, id, 'list', [absolute(req.path), String(depth)]);
        return { entries: list.sort((a, b) => a.path.localeCompare(b.path)) };
      }
      case 'MakeDir':
        return { entry: (await this.run(p, id, 'makeDir', [absolute(req.path)]))[0] };
      case 'Move':
        return { entry: (await this.run(p, id, 'move', [absolute(req.destination), absolute(req.source)]))[0] };
      case 'Remove':
        await this.run(p, id, 'remove', [absolute(req.path)]);
        return {};
      default:
        throw new ConnectError('unimplemented', `filesystem.Filesystem/${method} is not implemented on nube`);
    }
  }
}
