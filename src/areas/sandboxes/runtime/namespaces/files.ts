import type { FileEntry } from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import type { RawResult } from './exec.js';

/** Runs an argv inside the sandbox (mount namespace and root included) and returns its raw result. */
export type Enter = (argv: string[], stdin?: Uint8Array | string) => Promise<RawResult>;

// One fixed script, paths passed as positional arguments (never spliced into the script), run with
// the sandbox's own tools inside its mount namespace: a symlink can only resolve inside the sandbox.
// Exit codes: 3 not found, 4 is a directory, 5 not a directory, 6 directory not empty.
const SCRIPT = `op=$1; shift
case $op in
read) [ -e "$1" ] || exit 3; [ -d "$1" ] && exit 4; exec cat -- "$1";;
write) [ -d "$1" ] && exit 4; d=$(dirname -- "$1"); [ -e "$d" ] && [ ! -d "$d" ] && exit 5
  mkdir -p -- "$d" || exit 1; exec cat > "$1";;
list) [ -e "$1" ] || exit 3; [ -d "$1" ] || exit 5
  cd -- "$1" && exec find . -mindepth 1 -maxdepth 1 -printf '%f\\0%y\\0%s\\0%T@\\0';;
delete) [ -e "$1" ] || [ -L "$1" ] || exit 3
  if [ -d "$1" ] && [ ! -L "$1" ]; then
    if [ "$2" = 1 ]; then exec rm -rf -- "$1"; else rmdir -- "$1" 2>/dev/null || exit 6; fi
  else exec rm -f -- "$1"; fi;;
move) [ -e "$1" ] || [ -L "$1" ] || exit 3; mkdir -p -- "$(dirname -- "$2")" && exec mv -T -- "$1" "$2";;
mkdir) [ -e "$1" ] && [ ! -d "$1" ] && exit 5; exec mkdir -p -- "$1";;
esac
exit 2`;

/** Relative paths are taken from /root, the home of the sandbox's user. */
export function sandboxPath(path: string): string {
  if (!path || path.includes('\0')) throw new SandboxRuntimeError('InvalidInput', 'invalid path');
  return path.startsWith('/') ? path : `/root/${path}`;
}

async function op(enter: Enter, name: string, args: string[], stdin?: Uint8Array): Promise<Buffer> {
  const r = await enter(['/bin/sh', '-c', SCRIPT, 'nube-files', name, ...args], stdin);
  const path = args[0];
  switch (r.exitCode) {
    case 0:
      return r.stdout;
    case 3:
      throw new SandboxRuntimeError('FileNotFound', `no such file or directory: ${path}`, { path });
    case 4:
      throw new SandboxRuntimeError('IsADirectory', `is a directory: ${path}`, { path });
    case 5:
      throw new SandboxRuntimeError('NotADirectory', `not a directory: ${path}`, { path });
    case 6:
      throw new SandboxRuntimeError('DirectoryNotEmpty', `directory not empty: ${path}`, { path });
    default:
      throw new SandboxRuntimeError('InvalidInput', `${name} ${path}: ${r.stderr.toString().trim()}`, { path });
  }
}

export async function readFile(enter: Enter, path: string): Promise<Buffer> {
  return op(enter, 'read', [sandboxPath(path)]);
}

export async function writeFile(enter: Enter, path: string, data: Uint8Array): Promise<void> {
  await op(enter, 'write', [sandboxPath(path)], data);
}

export async function listDir(enter: Enter, path: string): Promise<FileEntry[]> {
  const out = await op(enter, 'list', [sandboxPath(path)]);
  const parts = out.toString('utf8').split('\0');
  const entries: FileEntry[] = [];
  for (let i = 0; i + 3 < parts.length; i += 4) {
    const t = parts[i + 1];
    entries.push({
      name: parts[i],
      type: t === 'f' ? 'file' : t === 'd' ? 'dir' : t === 'l' ? 'symlink' : 'other',
      size: Number(parts[i + 2]),
      mtime: new Date(Number(parts[i + 3]) * 1000).toISOString(),
    });
  }
  return entries.sort((a, b) => a.name.localeCompare(b.name));
}

export async function remove(enter: Enter, path: string, recursive: boolean): Promise<void> {
  const p = sandboxPath(path);
  if (p === '/') throw new SandboxRuntimeError('InvalidInput', 'refusing to delete /');
  await op(enter, 'delete', [p, recursive ? '1' : '0']);
}

export async function move(enter: Enter, from: string, to: string): Promise<void> {
  await op(enter, 'move', [sandboxPath(from), sandboxPath(to)]);
}

export async function mkdir(enter: Enter, path: string): Promise<void> {
  await op(enter, 'mkdir', [sandboxPath(path)]);
}

// GNU patch, dry run first: the real run happens only when every hunk applies, so a failing patch
// changes nothing. -p1 (git style a/ b/) is tried before -p0.
const PATCH_SCRIPT = `f=$(mktemp) || exit 1; cat > "$f"
for p in 1 0; do
  if patch -p$p --dry-run --batch --silent --force -i "$f" >/dev/null 2>&1; then
    patch -p$p --batch --silent --force --no-backup-if-mismatch -i "$f"; rc=$?; rm -f "$f"; echo "p$p" >&2; exit $rc
  fi
done
patch -p1 --dry-run --batch --force -i "$f"; rm -f "$f"; exit 7`;

export async function applyPatch(enter: Enter, diff: string): Promise<{ files: string[] }> {
  if (!/^(---|\+\+\+|@@) /m.test(diff)) throw new SandboxRuntimeError('PatchFailed', 'not a unified diff');
  const r = await enter(['/bin/sh', '-c', PATCH_SCRIPT, 'nube-patch'], diff);
  if (r.exitCode !== 0) {
    throw new SandboxRuntimeError('PatchFailed', 'patch does not apply; nothing was changed', {
      output: `${r.stdout.toString()}${r.stderr.toString()}`.trim().slice(0, 4000),
    });
  }
  const strip = /p0\s*$/.test(r.stderr.toString()) ? 0 : 1;
  const files = new Set<string>();
  let minus = '';
  const clean = (n: string) => n.split('/').slice(strip).join('/');
  for (const m of diff.matchAll(/^(---|\+\+\+) (\S+)/gm)) {
    if (m[1] === '---') minus = m[2];
    else files.add(clean(m[2] === '/dev/null' ? minus : m[2]));
  }
  return { files: [...files] };
}
