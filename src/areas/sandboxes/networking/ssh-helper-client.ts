// The gateway's side of the in-sandbox SSH helper (ssh-helper-script.ts): one TCP connection per
// SSH channel, to the helper on the sandbox's bridge address, framed as the script describes.
import { EventEmitter } from 'node:events';
import { connect, type Socket } from 'node:net';

export interface RunHeader {
  mode: 'run';
  /** null: a login shell. */
  cmd: string | null;
  /** Run this argv instead of `cmd` through bash. */
  argv?: string[];
  /** Working directory inside (default /root). */
  cwd?: string;
  /** Run as this user (default root). */
  user?: { uid: number; gid: number; groups: number[] };
  pty?: { rows: number; cols: number; term?: string };
  env?: Record<string, string>;
}
export interface ForwardHeader {
  mode: 'forward';
  host: string;
  port: number;
}
/** Picks up a connection a remote-forwarding listener accepted. */
export interface AcceptHeader {
  mode: 'accept';
  id: string;
}
export interface AcceptedConnection {
  id: string;
  address: string;
  port: number;
}

function frame(type: string, payload: Buffer | string = Buffer.alloc(0)): Buffer {
  const p = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const h = Buffer.alloc(5);
  h.write(type, 0, 'latin1');
  h.writeUInt32BE(p.length, 1);
  return Buffer.concat([h, p]);
}

/** Splits the helper's byte stream into frames; after `y` (forward) the rest is raw. */
class Deframer {
  private buf: Buffer = Buffer.alloc(0);
  push(chunk: Buffer, onFrame: (type: string, payload: Buffer) => boolean | undefined): Buffer | null {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    while (this.buf.length >= 5) {
      const n = this.buf.readUInt32BE(1);
      if (this.buf.length < 5 + n) break;
      const type = this.buf.toString('latin1', 0, 1);
      const payload = this.buf.subarray(5, 5 + n);
      this.buf = this.buf.subarray(5 + n);
      // A handler answering true switches the stream to raw: what is left is returned as is.
      if (onFrame(type, payload)) return this.buf;
    }
    return null;
  }
}

/** Opens a connection to the helper: straight to its address here, or through the node holding it. */
export type Dial = () => Promise<Socket>;

export function openHelper(address: string, port: number, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: address, port, noDelay: true });
    const timer = setTimeout(() => s.destroy(new Error('helper connect timeout')), timeoutMs);
    s.once('connect', () => {
      clearTimeout(timer);
      s.off('error', reject);
      resolve(s);
    });
    s.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

/**
 * A command or shell inside the sandbox: started (its pid inside) or failed (why it could not start),
 * stdout/stderr, signal (what ended it, before exit), exit, close; write/end/resize/signal/close.
 */
export class HelperProcess extends EventEmitter<{
  started: [number];
  failed: [string];
  stdout: [Buffer];
  stderr: [Buffer];
  signal: [number];
  exit: [number];
  close: [];
}> {
  private exited = false;
  constructor(private readonly socket: Socket) {
    super();
    const d = new Deframer();
    socket.on('data', (c: Buffer) =>
      d.push(c, (t, p) => {
        if (t === 'o') this.emit('stdout', p);
        else if (t === 'x') this.emit('stderr', p);
        else if (t === 'p') this.emit('started', Number(p.toString()));
        else if (t === 'f') {
          this.exited = true;
          this.emit('failed', p.toString());
        } else if (t === 's') this.emit('signal', Number(p.toString()));
        else if (t === 'c') {
          this.exited = true;
          this.emit('exit', Number(p.toString()));
        }
        return false;
      }),
    );
    socket.on('error', () => socket.destroy());
    socket.on('close', () => {
      // The connection dropped without a status (sandbox stopped): report a failure.
      if (!this.exited) this.emit('exit', 255);
      this.emit('close');
    });
    // A connection through another node arrives paused (nothing is lost before the listener above).
    socket.resume();
  }
  write(data: Buffer): void {
    if (!this.socket.destroyed) this.socket.write(frame('i', data));
  }
  end(): void {
    if (!this.socket.destroyed) this.socket.write(frame('e'));
  }
  resize(rows: number, cols: number): void {
    if (!this.socket.destroyed) this.socket.write(frame('w', JSON.stringify({ rows, cols })));
  }
  /** Sends a signal (its number) to the command's process group. */
  signal(sig: number): void {
    if (!this.socket.destroyed) this.socket.write(frame('k', String(sig)));
  }
  /** Whether the helper reported the command's end (or that it could not start). */
  get ended(): boolean {
    return this.exited;
  }
  close(): void {
    this.socket.destroy();
  }
}

export async function runInSandbox(dial: Dial, token: string, h: RunHeader): Promise<HelperProcess> {
  const s = await dial();
  s.write(frame('h', JSON.stringify({ ...h, token })));
  return new HelperProcess(s);
}

/** A TCP connection opened from inside the sandbox to host:port (or one a listener accepted); raw bytes once it resolves. */
export async function forwardFromSandbox(dial: Dial, token: string, h: ForwardHeader | AcceptHeader): Promise<Socket> {
  const s = await dial();
  s.write(frame('h', JSON.stringify({ ...h, token })));
  return new Promise((resolve, reject) => {
    const d = new Deframer();
    const onData = (c: Buffer) => {
      const rest = d.push(c, (t, p) => {
        if (t === 'y') return true;
        s.destroy();
        reject(new Error(t === 'n' ? p.toString() : 'helper refused'));
        return false;
      });
      if (rest === null) return;
      s.off('data', onData);
      s.off('close', onClose);
      // Paused until the caller pipes it: a stream left flowing without a listener drops what the
      // other end sent first (with ssh -R the program inside often speaks before the channel opens).
      s.pause();
      if (rest.length) s.unshift(rest);
      resolve(s);
    };
    const onClose = () => reject(new Error('helper closed'));
    s.on('data', onData);
    s.resume();
    s.once('close', onClose);
    s.once('error', () => s.destroy());
  });
}

/** A port listening inside the sandbox (ssh -R): `connection` for each client it accepts. */
export class SandboxListener extends EventEmitter<{ connection: [AcceptedConnection]; close: [] }> {
  constructor(
    private readonly socket: Socket,
    readonly port: number,
  ) {
    super();
    socket.on('close', () => this.emit('close'));
  }
  close(): void {
    this.socket.destroy();
  }
}

/** Binds host:port inside the sandbox (port 0: any); resolves once it listens. */
export async function listenInSandbox(dial: Dial, token: string, bind: { host: string; port: number }): Promise<SandboxListener> {
  const s = await dial();
  s.write(frame('h', JSON.stringify({ mode: 'listen', ...bind, token })));
  return new Promise((resolve, reject) => {
    let listener: SandboxListener | null = null;
    const d = new Deframer();
    s.on('data', (c: Buffer) =>
      d.push(c, (t, p) => {
        if (t === 'y' && !listener) {
          listener = new SandboxListener(s, Number(p.toString()));
          resolve(listener);
        } else if (t === 'a' && listener) {
          listener.emit('connection', JSON.parse(p.toString()) as AcceptedConnection);
        } else if (!listener) {
          s.destroy();
          reject(new Error(t === 'n' ? p.toString() : 'helper refused'));
        }
        return false;
      }),
    );
    s.resume();
    s.once('close', () => reject(new Error('helper closed')));
    s.on('error', () => s.destroy());
  });
}
