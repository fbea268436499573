// The program the SSH gateway starts inside a sandbox (python3 is in every template): it listens on
// the sandbox's own address and, for each connection that proves the sandbox's helper token, runs a
// shell or a command (with a PTY when asked) or opens a TCP connection from inside (port forwarding).
// Frames both ways are `type (1 byte) | length (4 bytes BE) | payload`:
//   gateway -> helper: h header JSON (first), i stdin, e stdin EOF, w window {rows, cols},
//                      k signal (decimal) to the command's process group
//   helper -> gateway: p started (the command's pid inside), f could not start (why), o stdout,
//                      x stderr, s ended by a signal (decimal, before c), c exit status (decimal),
//                      y connected, n refused (reason), a accepted ({id, address, port} JSON, on a
//                      listen connection)
// A run header may name the argv, the working directory and the user ({uid, gid, groups}) to run as.
// After `y` a forwarded (or accepted) connection carries raw bytes. Remote forwarding (ssh -R): a
// `listen` connection binds a port inside and answers `y` with the port, then one `a` per connection
// accepted there; the gateway picks each up with an `accept` connection naming its id. The listener
// closes with its listen connection. The token is derived from nube's secret and the
// sandbox id, so a restarted nube reaches a helper started by the previous one.

export const SSH_HELPER_PORT = 65022;
export const SSH_HELPER_PATH = '/usr/local/lib/nube/ssh-helper.py';
export const SFTP_SERVER_PATH = '/usr/local/lib/nube/sftp-server';

export const SSH_HELPER_SCRIPT = String.raw`
import fcntl, hmac, json, os, pty, signal, socket, struct, subprocess, termios, threading
TOKEN = os.environ.pop('NUBE_SSH_TOKEN').encode()
PORT = int(os.environ.pop('NUBE_SSH_PORT'))

def recv_exact(s, n):
    b = b''
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            return None
        b += c
    return b

def read_frame(s):
    h = recv_exact(s, 5)
    if h is None:
        return None, None
    n = struct.unpack('>I', h[1:])[0]
    p = recv_exact(s, n) if n else b''
    if p is None:
        return None, None
    return h[0:1], p

class Out:
    def __init__(self, s):
        self.s, self.lock = s, threading.Lock()
    def send(self, t, p=b''):
        with self.lock:
            try:
                self.s.sendall(t + struct.pack('>I', len(p)) + p)
            except OSError:
                pass

def winsize(fd, w):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', int(w.get('rows') or 24), int(w.get('cols') or 80), 0, 0))

def pump(src, out, t):
    while True:
        try:
            d = os.read(src, 65536)
        except OSError:
            d = b''
        if not d:
            return
        out.send(t, d)

def relay(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    for x in (a, b):
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

def forward(s, out, h):
    try:
        u = socket.create_connection((h['host'], int(h['port'])), timeout=10)
    except OSError as e:
        out.send(b'n', str(e).encode())
        return
    u.settimeout(None)
    out.send(b'y')
    threading.Thread(target=relay, args=(u, s), daemon=True).start()
    relay(s, u)

PENDING = {}
PENDING_LOCK = threading.Lock()

def listen(s, out, h):
    host = h.get('host') or ''
    host = {'': '127.0.0.1', 'localhost': '127.0.0.1', '*': '0.0.0.0', '::': '0.0.0.0'}.get(host, host)
    try:
        lst = socket.socket()
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind((host, int(h['port'])))
        lst.listen(64)
    except OSError as e:
        out.send(b'n', str(e).encode())
        return
    out.send(b'y', str(lst.getsockname()[1]).encode())
    mine = set()
    def accept_loop():
        while True:
            try:
                c, a = lst.accept()
            except OSError:
                return
            cid = os.urandom(16).hex()
            with PENDING_LOCK:
                PENDING[cid] = c
                mine.add(cid)
            out.send(b'a', json.dumps({'id': cid, 'address': a[0], 'port': a[1]}).encode())
    threading.Thread(target=accept_loop, daemon=True).start()
    while read_frame(s)[0] is not None:
        pass
    # close() alone leaves a socket that another thread is accepting on listening: shutdown wakes it.
    try:
        lst.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    lst.close()
    with PENDING_LOCK:
        left = [PENDING.pop(cid, None) for cid in mine]
    for c in left:
        if c is not None:
            c.close()

def accept(s, out, h):
    with PENDING_LOCK:
        c = PENDING.pop(str(h.get('id')), None)
    if c is None:
        out.send(b'n', b'no such connection')
        return
    out.send(b'y')
    threading.Thread(target=relay, args=(c, s), daemon=True).start()
    relay(s, c)

def run(s, out, h):
    env = dict(os.environ)
    env.update({'HOME': '/root', 'USER': 'root', 'LOGNAME': 'root', 'SHELL': '/bin/bash'})
    env.update(h.get('env') or {})
    cmd = h.get('cmd')
    argv = h.get('argv') or (['/bin/bash', '-l'] if cmd is None else ['/bin/bash', '-c', cmd])
    cwd = h.get('cwd') or '/root'
    u = h.get('user')
    cred = {'user': int(u['uid']), 'group': int(u['gid']), 'extra_groups': [int(g) for g in u['groups']]} if u else {}
    w = h.get('pty')
    try:
        if w is not None:
            env['TERM'] = w.get('term') or env.get('TERM') or 'xterm'
            master, slave = pty.openpty()
            winsize(slave, w)
            def pre():
                os.setsid()
                fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            try:
                proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, preexec_fn=pre, close_fds=True, **cred)
            except BaseException:
                os.close(master)
                raise
            finally:
                os.close(slave)
            readers = [threading.Thread(target=pump, args=(master, out, b'o'), daemon=True)]
            stdin = master
        else:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True, **cred)
            readers = [threading.Thread(target=pump, args=(proc.stdout.fileno(), out, b'o'), daemon=True),
                       threading.Thread(target=pump, args=(proc.stderr.fileno(), out, b'x'), daemon=True)]
            stdin = proc.stdin.fileno()
            master = None
    except OSError as e:
        out.send(b'f', ('%s: %s' % (e.filename or argv[0], e.strerror or e)).encode())
        return
    out.send(b'p', str(proc.pid).encode())
    for r in readers:
        r.start()
    def feed():
        nonlocal stdin
        while True:
            t, p = read_frame(s)
            if t is None:
                # The client went away: the whole process group goes too.
                try:
                    os.killpg(proc.pid, signal.SIGHUP)
                except OSError:
                    pass
                return
            try:
                if t == b'i' and stdin is not None:
                    os.write(stdin, p)
                elif t == b'e' and stdin is not None:
                    if master is None:
                        proc.stdin.close()
                        stdin = None
                    else:
                        os.write(master, b'\x04')
                elif t == b'w' and master is not None:
                    winsize(master, json.loads(p))
                    os.killpg(proc.pid, signal.SIGWINCH)
                elif t == b'k':
                    os.killpg(proc.pid, int(p))
            except OSError:
                pass
    threading.Thread(target=feed, daemon=True).start()
    code = proc.wait()
    for r in readers:
        r.join(timeout=2 if master is not None else None)
    if master is not None:
        os.close(master)
    if code < 0:
        out.send(b's', str(-code).encode())
    out.send(b'c', str(code if code >= 0 else 128 - code).encode())

def handle(s):
    out = Out(s)
    try:
        t, p = read_frame(s)
        if t != b'h':
            return
        h = json.loads(p)
        if not hmac.compare_digest(str(h.get('token', '')).encode(), TOKEN):
            return
        if h.get('mode') == 'forward':
            forward(s, out, h)
        elif h.get('mode') == 'listen':
            listen(s, out, h)
        elif h.get('mode') == 'accept':
            accept(s, out, h)
        else:
            run(s, out, h)
    except Exception as e:
        out.send(b'x', ('nube ssh helper: %s\n' % e).encode())
        out.send(b'c', b'255')
    finally:
        try:
            s.close()
        except OSError:
            pass

srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(('0.0.0.0', PORT))
srv.listen(64)
while True:
    c, _ = srv.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`;
