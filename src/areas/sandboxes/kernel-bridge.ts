// The Python side of run-cell, one script written into the sandbox. `serve ERR_FILE`: the bridge,
// started as a /bg process, runs a real Jupyter kernel (ipykernel through jupyter_client) and answers
// one JSON request per connection on a unix socket; it writes ERR_FILE and exits when Jupyter is
// missing or the kernel does not start. `call [ERR_FILE]`: the client nube runs with exec for each
// request (request on stdin, answer on stdout, so user code never meets a shell); with ERR_FILE it
// waits for a bridge that is starting, without it no listening bridge is exit NO_KERNEL at once.
// Being a /bg process, the kernel (and its variables) outlives a restart of nube.
// Requests: {"op": "run", "code", "timeoutMs"} | {"op": "restart"} | {"op": "ping"}.

export const KERNEL_SOCK = '/tmp/.nube-kernel.sock';
export const KERNEL_PATH = '/tmp/.nube-kernel.py';
/** Client exit codes. */
export const NO_KERNEL = 3;
export const NO_JUPYTER = 4;
export const KERNEL_VANISHED = 5;
/** Caps inside the bridge: per text stream, and for all rich outputs together. */
const STREAM_CAP = 1024 * 1024;
const OUTPUTS_CAP = 4 * 1024 * 1024;
/** How long an interrupted cell may take to stop before the kernel is restarted. */
const INTERRUPT_GRACE_S = 5;

export const KERNEL_PY = String.raw`import json, os, queue, re, signal, socket, sys, time
SOCK = ${JSON.stringify(KERNEL_SOCK)}

def recv_all(s):
    buf = b''
    while True:
        d = s.recv(65536)
        if not d:
            return buf
        buf += d

def call(err):
    req = sys.stdin.buffer.read()
    deadline = time.monotonic() + 180
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(SOCK)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            s.close()
            if err and os.path.exists(err):
                sys.stdout.write(open(err).read())
                sys.exit(${NO_JUPYTER})
            if not err or time.monotonic() > deadline:
                sys.exit(${NO_KERNEL})
            time.sleep(0.05)
    s.sendall(req)
    s.shutdown(socket.SHUT_WR)
    buf = recv_all(s)
    if not buf:
        sys.exit(${KERNEL_VANISHED})
    sys.stdout.buffer.write(buf)
    sys.exit(0)

if sys.argv[1] == 'call':
    call(sys.argv[2] if len(sys.argv) > 2 else None)
ERR = sys.argv[2]
STREAM_CAP, OUTPUTS_CAP, GRACE = ${STREAM_CAP}, ${OUTPUTS_CAP}, ${INTERRUPT_GRACE_S}
ANSI = re.compile(r'\x1b\[[0-9;]*[A-Za-z]')

def fail(msg):
    with open(ERR + '.tmp', 'w') as f:
        f.write(msg)
    os.rename(ERR + '.tmp', ERR)
    sys.exit(1)

try:
    from jupyter_client.manager import KernelManager
    import ipykernel  # noqa: F401
except ImportError as e:
    fail('run-cell needs Jupyter (ipykernel, jupyter_client) in the sandbox: %s. Create the sandbox from the code-interpreter template.' % e)

os.chdir(os.environ.get('HOME') or '/root')
km = kc = None

def start():
    global km, kc
    km = KernelManager(kernel_name='python3')
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)

def shutdown(*_):
    try:
        km.shutdown_kernel(now=True)
    finally:
        os._exit(0)

def restart():
    global kc
    try:
        kc.stop_channels()
    except Exception:
        pass
    km.restart_kernel(now=True)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)

def run(code, timeout_s):
    # Replies of earlier (interrupted) cells still queued on the shell channel.
    while True:
        try:
            kc.get_shell_msg(timeout=0)
        except queue.Empty:
            break
    msg_id = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
    res = {'stdout': '', 'stderr': '', 'result': None, 'outputs': [], 'error': None, 'executionCount': None,
           'timedOut': False, 'truncated': False, 'kernelRestarted': False}
    size = 0
    deadline = time.monotonic() + timeout_s
    while True:
        now = time.monotonic()
        if not res['timedOut'] and now >= deadline:
            res['timedOut'] = True
            km.interrupt_kernel()
            deadline = now + GRACE
        elif res['timedOut'] and now >= deadline:
            restart()
            res['kernelRestarted'] = True
            break
        try:
            msg = kc.get_iopub_msg(timeout=min(1.0, max(0.0, deadline - now)))
        except queue.Empty:
            if not km.is_alive():
                restart()
                res['kernelRestarted'] = True
                res['error'] = {'name': 'KernelDied', 'value': 'the kernel died during the cell; it was restarted with an empty namespace', 'traceback': ''}
                break
            continue
        if msg['parent_header'].get('msg_id') != msg_id:
            continue
        t, c = msg['msg_type'], msg['content']
        if t == 'stream':
            key = 'stdout' if c.get('name') == 'stdout' else 'stderr'
            room = STREAM_CAP - len(res[key])
            if len(c['text']) > room:
                res['truncated'] = True
            res[key] += c['text'][:max(0, room)]
        elif t in ('execute_result', 'display_data'):
            data = c.get('data', {})
            n = len(json.dumps(data))
            if size + n > OUTPUTS_CAP:
                res['truncated'] = True
            else:
                size += n
                res['outputs'].append({'type': t, 'data': data})
            if t == 'execute_result':
                res['result'] = data.get('text/plain')
                res['executionCount'] = c.get('execution_count')
        elif t == 'execute_input':
            res['executionCount'] = c.get('execution_count')
        elif t == 'error':
            res['error'] = {'name': c.get('ename', ''), 'value': c.get('evalue', ''),
                            'traceback': ANSI.sub('', '\n'.join(c.get('traceback', [])))}
        elif t == 'status' and c.get('execution_state') == 'idle':
            break
    if res['timedOut']:
        tb = res['error']['traceback'] if res['error'] else ''
        what = 'the kernel was restarted (it did not stop when interrupted)' if res['kernelRestarted'] else 'it was interrupted; the kernel keeps its state'
        res['error'] = {'name': 'Timeout', 'value': 'cell ran over %g s: %s' % (timeout_s, what), 'traceback': tb}
    return res

try:
    start()
except Exception as e:
    fail('the Jupyter kernel did not start: %s' % e)
signal.signal(signal.SIGTERM, shutdown)
signal.signal(signal.SIGINT, shutdown)
try:
    os.unlink(SOCK)
except FileNotFoundError:
    pass
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
os.umask(0o077)
srv.bind(SOCK)
srv.listen(8)
while True:
    conn, _ = srv.accept()
    with conn:
        data = recv_all(conn)
        try:
            req = json.loads(data)
            if req.get('op') == 'restart':
                restart()
                out = {'ok': True}
            elif req.get('op') == 'ping':
                out = {'ok': True}
            else:
                out = run(req['code'], max(1, int(req.get('timeoutMs', 120000))) / 1000)
        except Exception as e:
            out = {'bridgeError': '%s: %s' % (type(e).__name__, e)}
        try:
            conn.sendall(json.dumps(out).encode('utf-8'))
        except OSError:
            pass
`;
