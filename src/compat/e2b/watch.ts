// envd's WatchDir: a watcher inside the sandbox (python3 and inotify through ctypes; root, as envd's)
// prints one JSON line per event; recursive watches add the directories created under them as
// they come. Events are named relative to the watched directory and typed as envd's fsnotify names
// them. With `includeEntry`, create, write and chmod events carry the entry as Stat gives it (best
// effort: gone again by then, none).
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { Principal } from '../../platform/auth.js';
import { ConnectError } from './connect-rpc.js';
import type { Filesystem } from './filesystem.js';
import type { E2bUser } from './users.js';

const MISSING = 44;
const NOT_DIR = 20;

const WATCHER = String.raw`
import ctypes, json, os, struct, sys
root, recursive = sys.argv[1], sys.argv[2] == '1'
if not os.path.lexists(root): sys.exit(${MISSING})
if not os.path.isdir(root): sys.exit(${NOT_DIR})
libc = ctypes.CDLL(None, use_errno=True)
libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
MODIFY, ATTRIB, MOVED_FROM, MOVED_TO, CREATE, DELETE, DELETE_SELF, MOVE_SELF = 0x2, 0x4, 0x40, 0x80, 0x100, 0x200, 0x400, 0x800
IGNORED, ISDIR, OVERFLOW, ONLYDIR, DONT_FOLLOW = 0x8000, 0x40000000, 0x4000, 0x1000000, 0x2000000
MASK = MODIFY | ATTRIB | MOVED_FROM | MOVED_TO | CREATE | DELETE | DELETE_SELF | MOVE_SELF | ONLYDIR | DONT_FOLLOW
fd = libc.inotify_init1(os.O_CLOEXEC)
if fd < 0: sys.exit(1)
wds = {}
def add(path, rel):
    wd = libc.inotify_add_watch(fd, os.fsencode(path), MASK)
    if wd >= 0: wds[wd] = rel
    if not recursive: return
    try: names = os.listdir(path)
    except OSError: return
    for n in names:
        p = os.path.join(path, n)
        if os.path.isdir(p) and not os.path.islink(p): add(p, os.path.join(rel, n))
add(root, '')
if not wds: sys.exit(1)
out = sys.stdout
def emit(t, name):
    out.write(json.dumps({'t': t, 'n': name}) + '\n')
out.write('{"ready": true}\n'); out.flush()
while True:
    buf = os.read(fd, 65536)
    i = 0
    while i + 16 <= len(buf):
        wd, mask, cookie, ln = struct.unpack_from('iIII', buf, i)
        name = os.fsdecode(buf[i + 16:i + 16 + ln].rstrip(b'\0'))
        i += 16 + ln
        if mask & IGNORED:
            wds.pop(wd, None); continue
        if wd not in wds or mask & OVERFLOW: continue
        rel = os.path.join(wds[wd], name) if name else wds[wd]
        if mask & (CREATE | MOVED_TO):
            emit('EVENT_TYPE_CREATE', rel)
            if recursive and mask & ISDIR: add(os.path.join(root, rel), rel)
        if mask & MODIFY: emit('EVENT_TYPE_WRITE', rel)
        if mask & ATTRIB: emit('EVENT_TYPE_CHMOD', rel)
        if mask & (DELETE | DELETE_SELF): emit('EVENT_TYPE_REMOVE', rel)
        if mask & (MOVED_FROM | MOVE_SELF): emit('EVENT_TYPE_RENAME', rel)
    out.flush()
`;

const CARRIES_ENTRY = new Set(['EVENT_TYPE_CREATE', 'EVENT_TYPE_WRITE', 'EVENT_TYPE_CHMOD']);

export interface WatchRequest {
  path: string;
  recursive: boolean;
  includeEntry: boolean;
  timeoutMs?: number;
  user: E2bUser;
}

export class Watcher {
  constructor(
    private readonly sandboxes: SandboxesService,
    private readonly fs: Filesystem,
  ) {}

  /**
   * Watches until `signal` aborts or the deadline passes (then resolves true): `onStart` once the
   * watches are in place, `onEvent` per event, in order.
   */
  async watch(p: Principal, id: string, req: WatchRequest, signal: AbortSignal, onStart: () => void, onEvent: (e: unknown) => void): Promise<boolean> {
    let pending = '';
    let ready = false;
    let chain = Promise.resolve();
    const err: Buffer[] = [];
    const line = (text: string) => {
      const msg = JSON.parse(text) as { ready?: boolean; t?: string; n?: string };
      if (msg.ready) {
        ready = true;
        onStart();
        return;
      }
      const event = { name: msg.n!, type: msg.t! };
      if (!req.includeEntry || !CARRIES_ENTRY.has(event.type)) {
        chain = chain.then(() => onEvent(event));
        return;
      }
      const full = `${req.path.replace(/\/$/, '')}/${event.name}`;
      const entry = this.fs.stat(p, id, req.user, full).catch(() => undefined);
      chain = chain.then(async () => onEvent({ ...event, ...((await entry) ? { entry: await entry } : {}) }));
    };
    const r = await this.sandboxes.work.execStream(
      p,
      id,
      ['python3', '-I', '-S', '-c', WATCHER, req.path, req.recursive ? '1' : '0'],
      { cwd: '/', timeoutMs: req.timeoutMs, signal },
      {
        stdout: (b) => {
          const lines = (pending + b.toString('utf8')).split('\n');
          pending = lines.pop()!;
          for (const l of lines) if (l) line(l);
        },
        stderr: (b) => err.push(b),
      },
    );
    await chain;
    if (signal.aborted || r.timedOut) return r.timedOut;
    if (r.exitCode === MISSING) throw new ConnectError('not_found', `directory '${req.path}' does not exist`);
    if (r.exitCode === NOT_DIR) throw new ConnectError('invalid_argument', `path '${req.path}' is not a directory`);
    if (r.exitCode === 127) throw new ConnectError('unimplemented', 'watching a directory needs python3 in the sandbox');
    const why = Buffer.concat(err).toString('utf8').trim().split('\n').pop();
    throw new ConnectError(ready ? 'unknown' : 'internal', `the watch ended: ${why || `exit ${r.exitCode}`}`);
  }
}
