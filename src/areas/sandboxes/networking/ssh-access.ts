// ssh-enable / ssh-disable / ssh-ticket, and what the gateway asks: is this ticket good for this
// sandbox, and a process or a forwarded connection inside it (through the in-sandbox helper, started
// on demand: after a resume or a restart of the sandbox it is simply started again).
import { readFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import type { Principal } from '../../../platform/auth.js';
import { hmacHex, sha256Hex } from '../../../platform/crypto.js';
import { errors } from '../../../platform/errors.js';
import { newId, randomToken } from '../../../platform/ids.js';
import type { SandboxRow } from '../repo.js';
import { userEnv } from '../run-as.js';
import { cwdOf, userOf } from '../workload.js';
import { KeyedLock } from '../runtime/keyed-lock.js';
import type { SandboxesCore } from '../service.js';
import {
  type Dial,
  forwardFromSandbox,
  type HelperProcess,
  listenInSandbox,
  openHelper,
  type RunHeader,
  runInSandbox,
  type SandboxListener,
} from './ssh-helper-client.js';
import { HELPER_TUNNEL_PATH } from './ssh-tunnel.js';
import { SFTP_SERVER_PATH, SSH_HELPER_PATH, SSH_HELPER_PORT, SSH_HELPER_SCRIPT } from './ssh-helper-script.js';
import { SshGateway } from './ssh-gateway.js';
import { SshRepo } from './ssh-repo.js';

/** How long a ticket opens sessions (a session already open outlives it). */
export const TICKET_TTL_S = 600;
/** Debian's openssh-sftp-server, copied into the sandbox for the sftp subsystem (and scp). */
const HOST_SFTP_SERVER = '/usr/lib/openssh/sftp-server';
const HELPER_START_MS = 10_000;

const refused = (e: unknown) => ['ECONNREFUSED', 'EHOSTUNREACH'].includes((e as NodeJS.ErrnoException).code ?? '');

export class SshAccess {
  readonly repo: SshRepo;
  readonly gateway: SshGateway;
  private readonly lock = new KeyedLock();

  constructor(readonly core: SandboxesCore) {
    this.repo = new SshRepo(core.repo.db);
    this.gateway = new SshGateway(this);
    core.destroyHooks.push(async (row) => {
      await this.repo.disable(row.id);
      this.gateway.closeSessions(row.id);
    });
  }

  private endpoint() {
    return { host: this.core.deps.config.sandboxes.raw.host, port: this.gateway.port };
  }

  async enable(p: Principal, id: string) {
    const r = await this.core.usable(p, id);
    await this.core.clocks.touch(r);
    await this.gateway.start();
    await this.repo.enable(id, p.ownerId);
    await this.core.event(id, 'ssh-enabled');
    return { ok: true, enabled: true, ...this.endpoint(), user: id };
  }

  /** Off: tickets revoked, live sessions closed. */
  async disable(p: Principal, id: string) {
    await this.core.own(p, id);
    await this.repo.disable(id);
    const closed = this.gateway.closeSessions(id);
    await this.core.event(id, 'ssh-disabled', { closedSessions: closed });
    return { ok: true, enabled: false, closedSessions: closed };
  }

  async ticket(p: Principal, id: string) {
    const r = await this.core.usable(p, id);
    if (!(await this.repo.enabled(id))) throw errors.conflict('SSH is off for this sandbox: call ssh-enable first', 'SshNotEnabled');
    await this.core.clocks.touch(r);
    await this.gateway.start();
    const secret = randomToken(32);
    const now = Date.now();
    const expiresAt = now + TICKET_TTL_S * 1000;
    await this.repo.addTicket({ id: newId('sst'), sandbox_id: id, secret_hash: sha256Hex(secret), expires_at: expiresAt, created_at: now });
    const { host, port } = this.endpoint();
    return {
      host,
      port,
      user: id,
      password: secret,
      expiresAt: new Date(expiresAt).toISOString(),
      command: `ssh -p ${port} ${id}@${host}`,
    };
  }

  /** The gateway's question: does this password open this sandbox now? */
  async authenticate(user: string, password: string): Promise<boolean> {
    if (!/^sbx_[a-z0-9]{1,40}$/.test(user) || password.length > 200) return false;
    if (!(await this.repo.enabled(user))) return false;
    return this.repo.validTicket(user, sha256Hex(password), Date.now());
  }

  /** Restart the gateway at nube's start when some sandbox has SSH on. */
  async restore(): Promise<void> {
    if (await this.repo.anyEnabled()) await this.gateway.start();
  }

  private token(sandboxId: string): string {
    return hmacHex(this.core.deps.config.secret, `ssh-helper:${sandboxId}`);
  }

  /** The running sandbox's address (waking it: an SSH session is activity). */
  private async address(sandboxId: string): Promise<{ row: SandboxRow; address: string }> {
    let row = await this.core.repo.get(sandboxId);
    if (!row) throw new Error('sandbox is gone');
    row = await this.core.ensureRunning(row);
    await this.core.clocks.touch(row);
    return { row, address: await this.core.runtime.addressOf(row.runtime_id) };
  }

  /**
   * Connects to the helper, starting it when nothing listens (first use, after a resume). A sandbox on
   * another node is reached through a tunnel to that node, which does the same there.
   */
  private async withHelper<T>(sandboxId: string, fn: (dial: Dial, token: string) => Promise<T>): Promise<T> {
    const token = this.token(sandboxId);
    const held = await this.core.repo.get(sandboxId);
    if (!held) throw new Error('sandbox is gone');
    const other = await this.core.deps.nodes.route(held.node_id, 'sandbox');
    if (other) return fn(() => this.core.deps.forwarder.tunnel(other, `${HELPER_TUNNEL_PATH}${sandboxId}`), token);
    const { row, address } = await this.address(sandboxId);
    const dial = () => openHelper(address, SSH_HELPER_PORT, 5000);
    try {
      return await fn(dial, token);
    } catch (e) {
      if (!refused(e)) throw e;
    }
    await this.lock.run(sandboxId, () => this.startHelper(row, address, token));
    const end = Date.now() + HELPER_START_MS;
    for (;;) {
      try {
        return await fn(dial, token);
      } catch (e) {
        if (!refused(e) || Date.now() > end) throw e;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }

  private async startHelper(row: SandboxRow, address: string, token: string): Promise<void> {
    // Another session may have started it meanwhile.
    const up = await runInSandbox(() => openHelper(address, SSH_HELPER_PORT, 5000), token, { mode: 'run', cmd: 'true' }).then(
      (p) => {
        p.close();
        return true;
      },
      () => false,
    );
    if (up) return;
    const rt = this.core.runtime;
    await rt.mkdir(row.runtime_id, '/usr/local/lib/nube');
    await rt.writeFile(row.runtime_id, SSH_HELPER_PATH, Buffer.from(SSH_HELPER_SCRIPT));
    const sftp = await readFile(HOST_SFTP_SERVER).catch(() => null);
    if (sftp) {
      await rt.writeFile(row.runtime_id, SFTP_SERVER_PATH, sftp);
      await rt.exec(row.runtime_id, `chmod 755 ${SFTP_SERVER_PATH}`);
    }
    await rt.startBackground(row.runtime_id, `exec python3 ${SSH_HELPER_PATH}`, {
      env: { NUBE_SSH_TOKEN: token, NUBE_SSH_PORT: String(SSH_HELPER_PORT) },
    });
  }

  run(sandboxId: string, h: RunHeader): Promise<HelperProcess> {
    return this.withHelper(sandboxId, (dial, token) => runInSandbox(dial, token, h));
  }

  /**
   * A terminal or SSH session: as the sandbox's template user (its `user`, or its image's USER) with
   * that user's HOME, USER and LOGNAME, in the template's working dir or the user's home, as exec runs
   * commands. Root's session where the template names no user.
   */
  async runAsTemplateUser(sandboxId: string, h: RunHeader): Promise<HelperProcess> {
    const row = await this.core.repo.get(sandboxId);
    const here = row && (row.node_id === null || row.node_id === this.core.placement.here);
    // (A sandbox on another node: its node resolves nothing here; the session is relayed as asked.)
    const u = here ? await this.core.users.resolve(row.runtime_id, undefined, userOf(row)) : null;
    if (!u || !row) return this.run(sandboxId, h);
    return this.run(sandboxId, {
      ...h,
      user: { uid: u.uid, gid: u.gid, groups: u.groups },
      cwd: h.cwd ?? cwdOf(row) ?? u.home,
      env: { ...userEnv(u), ...h.env },
    });
  }

  forward(sandboxId: string, host: string, port: number) {
    return this.withHelper(sandboxId, (dial, token) => forwardFromSandbox(dial, token, { mode: 'forward', host, port }));
  }

  /** Remote forwarding: a port listening inside the sandbox. */
  listen(sandboxId: string, host: string, port: number): Promise<SandboxListener> {
    return this.withHelper(sandboxId, (dial, token) => listenInSandbox(dial, token, { host, port }));
  }

  /** One connection a listener accepted, as a socket. */
  accept(sandboxId: string, id: string): Promise<Socket> {
    return this.withHelper(sandboxId, (dial, token) => forwardFromSandbox(dial, token, { mode: 'accept', id }));
  }

  /**
   * The node end of another node's tunnel: a raw connection to this node's sandbox's helper. Refused
   * for a sandbox held elsewhere (a tunnel is never relayed on).
   */
  async dialHere(sandboxId: string): Promise<Socket> {
    const row = await this.core.repo.get(sandboxId);
    if (!row || (row.node_id !== null && row.node_id !== this.core.placement.here)) throw new Error('no such sandbox on this node');
    // After ssh-disable here, another node's open sessions get no new channel.
    if (!(await this.repo.enabled(sandboxId))) throw new Error('SSH is off for this sandbox');
    return this.withHelper(sandboxId, (dial) => dial());
  }

  async close(): Promise<void> {
    await this.gateway.close();
  }
}
