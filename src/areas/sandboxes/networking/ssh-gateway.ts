// The SSH gateway: one listening port for every sandbox (ssh2's server). The user name is the sandbox
// id, a ticket from ssh-ticket is the password. Sessions get a shell or a command (with a PTY when
// the client asks), the sftp subsystem, and direct-tcpip forwarding, all inside the sandbox through
// its helper, and remote forwarding (ssh -R): a port listening inside the sandbox whose connections
// come back to the client over the SSH connection. Repeated authentication failures are refused for a
// while, at once and per client, target and ticket (ssh-auth-limits.ts).
import ssh2 from 'ssh2';
import type { Connection, ServerChannel, Session } from 'ssh2';
import { createServer, type Server as TcpServer, type Socket } from 'node:net';
import type { PlatformDeps } from '../../deps.js';
import type { HelperProcess, RunHeader, SandboxListener } from './ssh-helper-client.js';
import { SshAuthLimits } from './ssh-auth-limits.js';
import { SFTP_SERVER_PATH } from './ssh-helper-script.js';

/** What the gateway needs of SSH access (declared here, so the gateway does not import it). */
export interface SshBackend {
  readonly core: { readonly deps: Pick<PlatformDeps, 'config' | 'log' | 'rateLimiter' | 'secretBox'> };
  readonly repo: {
    hostKey(name: string): Promise<string | null | undefined>;
    putHostKey(name: string, sealed: string): Promise<string>;
  };
  authenticate(user: string, password: string): Promise<boolean>;
  /** A session (shell, exec, sftp) as the sandbox's template user. */
  runAsTemplateUser(sandboxId: string, h: RunHeader): Promise<HelperProcess>;
  forward(sandboxId: string, host: string, port: number): Promise<Socket>;
  listen(sandboxId: string, host: string, port: number): Promise<SandboxListener>;
  accept(sandboxId: string, id: string): Promise<Socket>;
}

/** Remote forwards one SSH connection may hold at once. */
export const REMOTE_FORWARDS_PER_CONNECTION = 16;

const HOST_KEY = 'ed25519';

export class SshGateway {
  private server: TcpServer | null = null;
  private starting: Promise<void> | null = null;
  port = 0;
  private readonly live = new Map<string, Set<Connection>>();
  /** Every open connection, authenticated or not: closing the gateway ends them all. */
  private readonly sockets = new Set<Socket>();
  private readonly limits: SshAuthLimits;

  constructor(private readonly access: SshBackend) {
    this.limits = new SshAuthLimits(access.core.deps.rateLimiter);
  }

  private get deps() {
    return this.access.core.deps;
  }

  /** Listens once (idempotent); the host key is made on first use and kept sealed in the store. */
  start(): Promise<void> {
    this.starting ??= this.listen().catch((e: unknown) => {
      this.starting = null;
      throw e;
    });
    return this.starting;
  }

  private async hostKey(): Promise<string> {
    const box = this.deps.secretBox;
    const had = await this.access.repo.hostKey(HOST_KEY);
    if (had) return box.open(had);
    const fresh = ssh2.utils.generateKeyPairSync('ed25519').private;
    return box.open(await this.access.repo.putHostKey(HOST_KEY, box.seal(fresh)));
  }

  private async listen(): Promise<void> {
    const ssh = new ssh2.Server({ hostKeys: [await this.hostKey()], ident: 'nube' }, (c, info) => this.client(c, info.ip));
    // Our own listener, so an address past its budget is cut before any key exchange: refused at once,
    // at no cost (a line before the SSH version is allowed, and clients show or ignore it).
    const server = createServer((sock) => {
      sock.on('error', () => sock.destroy());
      const wait = this.limits.addressWait(sock.remoteAddress ?? '');
      if (wait > 0) {
        sock.end(`nube: too many failed logins from this address; try again in ${wait} s\r\n`, () => sock.destroy());
        return;
      }
      this.sockets.add(sock);
      sock.once('close', () => this.sockets.delete(sock));
      ssh.injectSocket(sock);
    });
    const { sshPort } = this.deps.config.sandboxes;
    const { bind } = this.deps.config.sandboxes.raw;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(sshPort, bind, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (e: Error) => this.deps.log.warn({ err: e }, 'ssh gateway error'));
    this.port = (server.address() as { port: number }).port;
    this.server = server;
    this.deps.log.info({ port: this.port }, 'ssh gateway listening');
  }

  /** Ends every connection to this sandbox; how many there were. */
  closeSessions(sandboxId: string): number {
    const set = this.live.get(sandboxId);
    if (!set) return 0;
    for (const c of set) c.end();
    this.live.delete(sandboxId);
    return set.size;
  }

  private client(c: Connection, ip: string): void {
    let sandboxId: string | null = null;
    c.on('error', (e: Error) => {
      this.deps.log.debug({ err: e }, 'ssh connection error');
      c.end();
    });
    c.on('authentication', (ctx) => {
      if (ctx.method !== 'password') return ctx.reject(['password']);
      const user = ctx.username;
      const { password } = ctx;
      // Past a budget: refused now, unchecked, and the connection ends (no retries on it).
      if (this.limits.attemptWait(ip, user, password) > 0) {
        ctx.reject([], false);
        c.end();
        return;
      }
      this.access.authenticate(user, password).then(
        async (ok) => {
          if (ok) {
            sandboxId = user;
            return ctx.accept();
          }
          await this.limits.failed(ip, user, password);
          ctx.reject(['password']);
        },
        () => ctx.reject(['password']),
      );
    });
    c.on('ready', () => {
      const id = sandboxId!;
      const set = this.live.get(id) ?? new Set<Connection>();
      this.live.set(id, set);
      set.add(c);
      c.on('close', () => {
        set.delete(c);
        if (set.size === 0 && this.live.get(id) === set) this.live.delete(id);
      });
      c.on('session', (accept) => this.session(accept(), id));
      c.on('tcpip', (accept, reject, info) => {
        this.access.forward(id, info.destIP, info.destPort).then(
          (sock) => {
            const ch = accept();
            ch.pipe(sock).pipe(ch);
            sock.on('error', () => ch.close());
            ch.on('close', () => sock.destroy());
          },
          () => reject(),
        );
      });
      this.remoteForwards(c, id);
    });
  }

  /** ssh -R: the port listens inside the sandbox (never on nube's host); each connection comes back. */
  private remoteForwards(c: Connection, id: string): void {
    const listeners = new Map<string, SandboxListener>();
    c.on('close', () => {
      for (const l of listeners.values()) l.close();
      listeners.clear();
    });
    c.on('request', (accept, reject, name, info) => {
      if (name === 'cancel-tcpip-forward') {
        const key = `${info.bindAddr}:${info.bindPort}`;
        listeners.get(key)?.close();
        listeners.delete(key);
        return accept?.();
      }
      if (name !== 'tcpip-forward' || listeners.size >= REMOTE_FORWARDS_PER_CONNECTION) return reject?.();
      this.access.listen(id, info.bindAddr, info.bindPort).then(
        (l) => {
          listeners.set(`${info.bindAddr}:${l.port}`, l);
          l.on('connection', (conn) => this.remoteConnection(c, id, info.bindAddr, l.port, conn));
          accept?.(l.port);
        },
        (e: unknown) => {
          this.deps.log.debug({ err: e, sandbox: id }, 'ssh: remote forward refused');
          reject?.();
        },
      );
    });
  }

  private remoteConnection(c: Connection, id: string, bindAddr: string, port: number, conn: { id: string; address: string; port: number }): void {
    this.access.accept(id, conn.id).then(
      (sock) => {
        c.forwardOut(bindAddr, port, conn.address, conn.port, (err, ch) => {
          if (err) return sock.destroy();
          ch.pipe(sock).pipe(ch);
          sock.on('error', () => ch.close());
          ch.on('close', () => sock.destroy());
        });
      },
      (e: unknown) => this.deps.log.debug({ err: e, sandbox: id }, 'ssh: remote forward connection lost'),
    );
  }

  private session(s: Session, id: string): void {
    let pty: RunHeader['pty'];
    const env: Record<string, string> = {};
    let resize: ((rows: number, cols: number) => void) | null = null;
    s.on('pty', (accept, _reject, info) => {
      pty = { rows: info.rows, cols: info.cols, term: info.term };
      accept?.();
    });
    s.on('window-change', (accept, _reject, info) => {
      resize?.(info.rows, info.cols);
      accept?.();
    });
    s.on('env', (accept, _reject, info) => {
      if (/^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(info.key) && Object.keys(env).length < 64) env[info.key] = info.val;
      accept?.();
    });
    const run = (ch: ServerChannel, cmd: string | null, withPty: boolean) => {
      this.access.runAsTemplateUser(id, { mode: 'run', cmd, env, ...(withPty && pty ? { pty } : {}) }).then(
        (proc) => {
          resize = (rows, cols) => proc.resize(rows, cols);
          proc.on('stdout', (d) => ch.write(d));
          proc.on('stderr', (d) => ch.stderr.write(d));
          proc.on('exit', (code) => {
            ch.exit(code);
            ch.end();
          });
          ch.on('data', (d: Buffer) => proc.write(d));
          // 'end', not 'eof': the client's EOF may have come while the helper was connecting, and
          // 'end' follows the data buffered meanwhile.
          ch.on('end', () => proc.end());
          ch.on('close', () => proc.close());
        },
        (e: unknown) => {
          this.deps.log.warn({ err: e, sandbox: id }, 'ssh: could not start in sandbox');
          ch.stderr.write('nube: the sandbox is not available\r\n');
          ch.exit(255);
          ch.end();
        },
      );
    };
    s.on('shell', (accept) => run(accept(), null, true));
    s.on('exec', (accept, _reject, info) => run(accept(), info.command, true));
    s.on('subsystem', (accept, reject, info) => {
      if (info.name !== 'sftp') return reject();
      run(accept(), `exec ${SFTP_SERVER_PATH}`, false);
    });
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = null;
    this.starting = null;
    if (!server) return;
    for (const id of [...this.live.keys()]) this.closeSessions(id);
    const closed = new Promise<void>((r) => server.close(() => r()));
    for (const sock of this.sockets) sock.destroy();
    await closed;
  }
}
