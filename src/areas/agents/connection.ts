// nube's ACP client side of one agent: a TCP connection to the agent program inside the sandbox (its
// bridge address, reachable only from the host), the token line, then ACP over ndjson with the official
// SDK. session/update notifications are routed to the turn that waits on that session; permission
// requests are answered by nube's policy (the first "allow" option: every tool acts only inside the
// agent's own sandbox).
import { connect, type Socket } from 'node:net';
import * as acp from '@agentclientprotocol/sdk';

export const AGENT_PORT = 7700;
const INITIALIZE_MS = 30_000;

export type UpdateListener = (u: acp.SessionUpdate) => void;

export class AgentLink {
  private readonly listeners = new Map<string, UpdateListener>();
  /** ACP sessions opened or loaded on this connection: only others need a session/load. */
  private readonly attached = new Set<string>();
  private closedFlag = false;

  private constructor(
    private readonly socket: Socket,
    private readonly conn: acp.ClientConnection,
  ) {
    conn.closed.then(
      () => this.markClosed(),
      () => this.markClosed(),
    );
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  private markClosed() {
    this.closedFlag = true;
    this.onClose?.();
  }

  onClose?: () => void;

  /** Opens the socket (retrying while the program starts, up to `waitMs`), sends the token, initializes. */
  static async open(address: string, token: string, waitMs: number, gateway?: string): Promise<AgentLink> {
    const socket = await connectWithRetry(address, AGENT_PORT, waitMs);
    socket.setNoDelay(true);
    // The gateway's URL in the first line (where it listens now: its port can change across restarts of
    // nube): nube's control data never travels as ACP, where a client's messages could carry it too.
    socket.write(`${JSON.stringify({ nube: token, gateway })}\n`);
    const readable = new ReadableStream<Uint8Array>({
      start(c) {
        socket.on('data', (d: Buffer) => c.enqueue(new Uint8Array(d)));
        socket.on('end', () => c.close());
        socket.on('error', (e) => c.error(e));
      },
    });
    const writable = new WritableStream<Uint8Array>({
      write: (chunk) => new Promise<void>((res, rej) => socket.write(chunk, (e) => (e ? rej(e) : res()))),
      close: () => void socket.end(),
    });
    let link: AgentLink | undefined;
    const app = acp
      .client({ name: 'nube' })
      .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
        const allow = params.options.find((o) => o.kind === 'allow_once' || o.kind === 'allow_always');
        return allow ? { outcome: { outcome: 'selected', optionId: allow.optionId } } : { outcome: { outcome: 'cancelled' } };
      })
      .onNotification(acp.methods.client.session.update, ({ params }) => {
        link?.listeners.get(params.sessionId)?.(params.update);
      });
    const conn = app.connect(acp.ndJsonStream(writable, readable));
    socket.on('close', () => conn.close());
    link = new AgentLink(socket, conn);
    let timer: NodeJS.Timeout | undefined;
    try {
      // An agent that accepted the connection but never answers initialize fails the link (and the
      // build says why) instead of holding it forever.
      const silent = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the agent did not answer initialize within ${INITIALIZE_MS / 1000} s`)), INITIALIZE_MS);
      });
      await Promise.race([
        conn.agent.request(acp.methods.agent.initialize, {
          protocolVersion: acp.PROTOCOL_VERSION,
          clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
          clientInfo: { name: 'nube', version: '1' },
        }),
        silent,
      ]);
    } catch (e) {
      link.close();
      throw e;
    } finally {
      clearTimeout(timer);
    }
    return link;
  }

  async newSession(cwd: string, mcpServers: acp.McpServer[]): Promise<string> {
    const id = (await this.conn.agent.request(acp.methods.agent.session.new, { cwd, mcpServers })).sessionId;
    this.attached.add(id);
    return id;
  }

  /** Re-attaches a session after a reconnect; false when the agent no longer has it. */
  async loadSession(sessionId: string, cwd: string, mcpServers: acp.McpServer[]): Promise<boolean> {
    if (this.attached.has(sessionId)) return true;
    this.listeners.set(sessionId, () => {}); // the replayed history is already in nube's transcript
    try {
      await this.conn.agent.request(acp.methods.agent.session.load, { sessionId, cwd, mcpServers });
      this.attached.add(sessionId);
      return true;
    } catch {
      return false;
    } finally {
      this.listeners.delete(sessionId);
    }
  }

  async prompt(sessionId: string, text: string, onUpdate: UpdateListener): Promise<acp.PromptResponse> {
    this.listeners.set(sessionId, onUpdate);
    try {
      return await this.conn.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text }] });
    } finally {
      this.listeners.delete(sessionId);
    }
  }

  async cancel(sessionId: string): Promise<void> {
    await this.conn.agent.notify(acp.methods.agent.session.cancel, { sessionId });
  }

  close(): void {
    this.conn.close();
    this.socket.destroy();
  }
}

export function connectWithRetry(host: string, port: number, waitMs: number): Promise<Socket> {
  const until = Date.now() + waitMs;
  return new Promise((resolve, reject) => {
    const attempt = () => {
      const s = connect({ host, port });
      // A SYN nobody answers (the sandbox's network still coming up) must not wait for TCP's own timeout.
      s.setTimeout(1_000, () => s.destroy(new Error('connect timed out')));
      s.once('connect', () => {
        s.setTimeout(0);
        s.removeAllListeners('error');
        resolve(s);
      });
      s.once('error', (e) => {
        s.destroy();
        if (Date.now() > until) reject(new Error(`the agent at ${host}:${port} did not answer: ${e.message}`));
        else setTimeout(attempt, 25);
      });
    };
    attempt();
  });
}
