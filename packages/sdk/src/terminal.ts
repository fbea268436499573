// sandboxes.terminal: a shell with a PTY inside a sandbox, over a WebSocket (see the operation's
// description for the protocol). Browsers use their WebSocket and the console's session cookie (with its CSRF token as a subprotocol); Node
// passes a WebSocket class that takes headers (the `ws` package) so the API key travels as a header.

/** The part of a WebSocket class the terminal uses (the browser's, or `ws`'s). */
export interface WebSocketLike {
  binaryType: string;
  readyState: number;
  send(data: string | ArrayBufferLike | Uint8Array): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: string, listener: (ev: { data?: unknown; code?: number; reason?: string }) => void): void;
}
export type WebSocketClass = new (url: string, protocols?: string[], options?: { headers: Record<string, string> }) => WebSocketLike;

export interface TerminalOptions {
  rows?: number;
  cols?: number;
  term?: string;
  /** A WebSocket class; default the global one. In Node, `ws`'s (`import WebSocket from 'ws'`). */
  WebSocket?: WebSocketClass;
  /**
   * WebSocket subprotocols to offer. A browser's WebSocket cannot set headers, so the console passes its
   * session's CSRF token as `nube-csrf.<token>`.
   */
  protocols?: string[];
}

const encoder = new TextEncoder();

/** An open terminal: write keystrokes, resize, read output, learn the shell's exit status. */
export class Terminal {
  private readonly dataListeners: ((chunk: Uint8Array) => void)[] = [];
  private readonly exitListeners: ((code: number | null) => void)[] = [];
  private exited = false;
  /** Resolves once the socket is open (rejects if it could not open). */
  readonly ready: Promise<void>;

  constructor(readonly socket: WebSocketLike) {
    socket.binaryType = 'arraybuffer';
    this.ready = new Promise((resolve, reject) => {
      socket.addEventListener('open', () => resolve());
      socket.addEventListener('error', () => reject(new Error('the terminal WebSocket could not be opened')));
    });
    socket.addEventListener('message', (ev) => {
      const d = ev.data;
      if (typeof d === 'string') {
        const msg = JSON.parse(d) as { type: string; code?: number };
        if (msg.type === 'exit') this.finish(msg.code ?? null);
        return;
      }
      const bytes = d instanceof ArrayBuffer ? new Uint8Array(d) : (d as Uint8Array);
      for (const l of this.dataListeners) l(bytes);
    });
    socket.addEventListener('close', () => this.finish(null));
  }

  private finish(code: number | null): void {
    if (this.exited) return;
    this.exited = true;
    for (const l of this.exitListeners) l(code);
  }

  /** Output of the PTY, as bytes (UTF-8 text from most programs). */
  onData(listener: (chunk: Uint8Array) => void): void {
    this.dataListeners.push(listener);
  }

  /** The shell's exit status, or null when the connection closed without one. */
  onExit(listener: (code: number | null) => void): void {
    this.exitListeners.push(listener);
  }

  write(data: string | Uint8Array): void {
    this.socket.send(typeof data === 'string' ? encoder.encode(data) : data);
  }

  resize(rows: number, cols: number): void {
    this.socket.send(JSON.stringify({ type: 'resize', rows, cols }));
  }

  close(): void {
    this.socket.close(1000);
  }
}

export function openTerminal(
  baseUrl: string,
  apiKey: string | undefined,
  sandboxId: string,
  options: TerminalOptions = {},
): Terminal {
  const Ctor = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketClass }).WebSocket;
  if (!Ctor) throw new TypeError('no WebSocket available: pass options.WebSocket (in Node, the `ws` package)');
  const q = new URLSearchParams();
  if (options.rows) q.set('rows', String(options.rows));
  if (options.cols) q.set('cols', String(options.cols));
  if (options.term) q.set('term', options.term);
  const base = new URL(`${baseUrl.replace(/\/+$/, '')}/api/v2/sandboxes/${encodeURIComponent(sandboxId)}/terminal`);
  base.protocol = base.protocol === 'https:' ? 'wss:' : 'ws:';
  const qs = q.toString();
  const url = base.toString() + (qs ? `?${qs}` : '');
  const protocols = options.protocols ?? [];
  const socket = apiKey ? new Ctor(url, protocols, { headers: { authorization: `Bearer ${apiKey}` } }) : new Ctor(url, protocols);
  return new Terminal(socket);
}
