// E2B's file metadata: user-defined key/value pairs kept as extended attributes `user.e2b.<key>` on the
// file (as envd keeps them), set by an upload's `X-Metadata-<key>` headers, read back with every entry.
// Inside the sandbox: attr's getfattr and setfattr (in nube's templates; without them there is none).
import { ConnectError } from './connect-rpc.js';

const PREFIX = 'user.e2b.';
/** Linux's xattr name limit (255) minus the prefix; envd's own caps. */
const MAX_KEY = 246;
const MAX_TOTAL = 4096;

/** Shell prologue: $GF dumps a file's metadata (hex values), `true` where getfattr is missing. */
export const METADATA_SCRIPT = `GF="getfattr --absolute-names -d -m ^user\\\\.e2b\\\\. -e hex"; command -v getfattr >/dev/null 2>&1 || GF=true`;

/**
 * Replaces a file's metadata with "key=hexvalue" arguments after $1 (none: clears it). Run after the
 * file was written, as the same user.
 */
export const SET_METADATA_SCRIPT = `f=$1; shift
if command -v getfattr >/dev/null 2>&1; then
  for n in $(getfattr --absolute-names -m '^user\\.e2b\\.' -- "$f" 2>/dev/null | grep -v '^#'); do setfattr -x "$n" -- "$f" || exit 1; done
elif [ $# -gt 0 ]; then echo "file metadata needs getfattr and setfattr (Debian's attr package) in the sandbox" >&2; exit 95; fi
for kv; do v=\${kv#*=}; setfattr -n "user.e2b.\${kv%%=*}" -v "\${v:+0x}$v" -- "$f" || exit 1; done`;

/** getfattr's escapes in a file name (`\\ooo` octal bytes) undone. */
function unescapeName(s: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < s.length; i++) {
    const m = s[i] === '\\' ? /^[0-7]{3}/.exec(s.slice(i + 1)) : null;
    if (m) {
      bytes.push(Number.parseInt(m[0], 8));
      i += 3;
    } else bytes.push(...Buffer.from(s[i]!, 'utf8'));
  }
  return Buffer.from(bytes).toString('utf8');
}

/** `getfattr -d -e hex` output: metadata per file path. */
export function parseMetadata(out: Buffer): Map<string, Record<string, string>> {
  const byPath = new Map<string, Record<string, string>>();
  let current: Record<string, string> | undefined;
  for (const line of out.toString('latin1').split('\n')) {
    if (line.startsWith('# file: ')) {
      current = {};
      byPath.set(unescapeName(line.slice(8)), current);
      continue;
    }
    if (!current || !line.startsWith(PREFIX)) continue;
    const eq = line.indexOf('=');
    const value = eq < 0 ? '' : line.slice(eq + 1);
    current[line.slice(PREFIX.length, eq < 0 ? undefined : eq)] = value.startsWith('0x') ? Buffer.from(value.slice(2), 'hex').toString('utf8') : '';
  }
  return byPath;
}

const PRINTABLE = /^[\x20-\x7e]*$/;

/** `X-Metadata-<key>: value` headers as envd reads them: keys lowercased, the first of a repeated one. */
export function metadataFromHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  let total = 0;
  for (const [name, raw] of Object.entries(headers)) {
    if (!name.toLowerCase().startsWith('x-metadata-')) continue;
    const key = name.slice('x-metadata-'.length).toLowerCase();
    const value = Array.isArray(raw) ? raw[0]! : (raw ?? '');
    if (!key || !PRINTABLE.test(key) || !PRINTABLE.test(value)) {
      throw new ConnectError('invalid_argument', `metadata ${JSON.stringify(key)}: keys and values must be printable ASCII`);
    }
    if (key.length > MAX_KEY) throw new ConnectError('invalid_argument', `metadata key ${key.slice(0, 20)}... is over ${MAX_KEY} bytes`);
    total += PREFIX.length + key.length + value.length;
    if (total > MAX_TOTAL) throw new ConnectError('invalid_argument', `metadata is over ${MAX_TOTAL} bytes in all`);
    if (!(key in out)) out[key] = value;
  }
  return out;
}

/** The "key=hexvalue" arguments of SET_METADATA_SCRIPT. */
export function metadataArgs(m: Record<string, string>): string[] {
  return Object.entries(m).map(([k, v]) => `${k}=${Buffer.from(v, 'utf8').toString('hex')}`);
}
