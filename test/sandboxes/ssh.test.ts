// SSH into sandboxes through nube's gateway, driven by the real OpenSSH client (ssh, sftp, scp):
// tickets, exec with exit status, a PTY shell, SFTP and scp both ways, local and remote (-R) port forwarding, ticket
// expiry and scope, ssh-disable closing live sessions, host key kept across a restart, rate-limited
// authentication failures.
import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SSH_AUTH_LIMITS } from '../../src/areas/sandboxes/networking/ssh-auth-limits.js';
import { freePort } from '../helpers/process.js';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube, until } from './helpers.js';

const tmp = mkdtempSync(join(tmpdir(), 'nube-ssh-'));
const askpass = join(tmp, 'askpass.sh');
writeFileSync(askpass, '#!/bin/sh\nprintf "%s\\n" "$NUBE_TEST_PW"\n');
chmodSync(askpass, 0o755);

interface Ticket {
  host: string;
  port: number;
  user: string;
  password: string;
  expiresAt: string;
  command: string;
}

const sshOpts = (knownHosts: string) => [
  '-o', 'StrictHostKeyChecking=no',
  '-o', `UserKnownHostsFile=${knownHosts}`,
  '-o', 'PreferredAuthentications=password',
  '-o', 'PubkeyAuthentication=no',
  '-o', 'NumberOfPasswordPrompts=1',
  '-o', 'ConnectTimeout=20',
  '-o', 'LogLevel=ERROR',
];

function spawnOpenSsh(bin: string, args: string[], password: string): ChildProcess {
  return spawn(bin, args, {
    env: { ...process.env, SSH_ASKPASS: askpass, SSH_ASKPASS_REQUIRE: 'force', DISPLAY: ':0', NUBE_TEST_PW: password },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
}

function runOpenSsh(bin: string, args: string[], password: string, input = ''): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const c = spawnOpenSsh(bin, args, password);
    let stdout = '';
    let stderr = '';
    c.stdout!.on('data', (d) => (stdout += d));
    c.stderr!.on('data', (d) => (stderr += d));
    c.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    c.stdin!.end(input);
  });
}

function httpGet(port: number): Promise<string> {
  return new Promise((resolve) => {
    const r = request({ host: '127.0.0.1', port, path: '/' }, (res) => {
      let b = '';
      res.on('data', (c) => (b += c));
      res.on('end', () => resolve(b));
    });
    r.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'ERROR'));
    r.end();
  });
}

describe.each(DRIVERS)('%s: SSH gateway', (driver) => {
  let t: SandboxNube;
  let id: string;
  let other: string;
  let known: string;
  const ssh = (tk: Ticket, cmd: string[], input?: string, user = tk.user, extra: string[] = []) =>
    runOpenSsh('ssh', [...sshOpts(known), '-p', String(tk.port), ...extra, `${user}@${tk.host}`, ...cmd], tk.password, input);
  const enable = async (sid = id) => {
    const r = await t.call('POST', `/sandboxes/${sid}/ssh-enable`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  };
  const ticket = async (sid = id): Promise<Ticket> => {
    const r = await t.call('POST', `/sandboxes/${sid}/ssh-ticket`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    return r.body;
  };

  beforeAll(async () => {
    known = join(tmp, `known-${driver}`);
    t = await startSandboxNube('ssh', { NUBE_SANDBOX_DRIVER: driver, NUBE_SSH_PORT: '0' });
    id = (await t.call('POST', '/sandboxes', { timeoutSeconds: 900 })).body.id;
    other = (await t.call('POST', '/sandboxes', { timeoutSeconds: 900 })).body.id;
    await until(() => t.call('GET', `/sandboxes/${other}`), (r) => r.body.status === 'running', 60_000);
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    if (t) await stopSandboxNube(t);
  }, 120_000);

  it('ssh-ticket needs ssh-enable; a ticket says how to connect', async () => {
    const before = await t.call('POST', `/sandboxes/${id}/ssh-ticket`);
    expect(before.status).toBe(409);
    expect(before.body.code).toBe('SshNotEnabled');
    const e = await t.call('POST', `/sandboxes/${id}/ssh-enable`);
    expect(e.status, JSON.stringify(e.body)).toBe(200);
    expect(e.body).toMatchObject({ ok: true, enabled: true, user: id });
    const tk = await ticket();
    // The raw ports' host: on a loopback nube an address of its own, never the console's (127.0.0.1).
    expect(tk).toMatchObject({ host: '127.0.0.2', user: id, port: e.body.port });
    expect(tk.password.length).toBeGreaterThanOrEqual(32);
    expect(Date.parse(tk.expiresAt)).toBeGreaterThan(Date.now());
    expect(tk.command).toBe(`ssh -p ${tk.port} ${id}@127.0.0.2`);
    const intruder = await t.nube.services.account.createAccount({ name: `x-${driver}`, plan: 'tera' });
    const h = { authorization: `Bearer ${intruder.secret}` };
    for (const a of ['ssh-enable', 'ssh-disable', 'ssh-ticket']) {
      expect((await t.call('POST', `/sandboxes/${id}/${a}`, undefined, h)).status, a).toBe(404);
    }
  });

  it('exec: output, stderr and the exit status of a command inside', async () => {
    const tk = await ticket();
    const r = await ssh(tk, ['echo out; echo err >&2; hostname; exit 3']);
    expect(r.code, r.stderr).toBe(3);
    expect(r.stdout).toBe(`out\n${id.replace('_', '-')}\n`);
    expect(r.stderr).toContain('err');
  }, 120_000);

  it('a PTY shell: tty is a terminal, input is typed into it', async () => {
    const tk = await ticket();
    const r = await ssh(tk, ['-tt'], 'tty; echo $((6*7)); exit\n', tk.user);
    expect(r.stdout).toMatch(/\/dev\/pts\/\d+/);
    expect(r.stdout).toContain('42');
    const size = await ssh(tk, ['stty size'], undefined, tk.user, ['-tt']);
    expect(size.stdout.trim()).toMatch(/^\d+ \d+$/);
  }, 120_000);

  it('sftp and scp copy files both ways', async () => {
    await enable();
    const tk = await ticket();
    const local = join(tmp, `up-${driver}.bin`);
    const data = Buffer.alloc(300_000, 7);
    data.write('nube sftp');
    writeFileSync(local, data);
    // Commands on stdin, not `-b` (batch mode turns password authentication off).
    const s = await runOpenSsh(
      'sftp',
      [...sshOpts(known), '-P', String(tk.port), `${tk.user}@${tk.host}`],
      tk.password,
      `put ${local} /root/up.bin\nget /root/up.bin ${local}.back\n`,
    );
    expect(s.code, s.stderr).toBe(0);
    expect(readFileSync(`${local}.back`).equals(data)).toBe(true);
    const inside = await t.call('POST', `/sandboxes/${id}/exec`, { command: 'sha256sum /root/up.bin | cut -c1-16; head -c 9 /root/up.bin' });
    expect(inside.body.stdout).toContain('nube sftp');
    const up = await runOpenSsh('scp', [...sshOpts(known), '-P', String(tk.port), local, `${tk.user}@${tk.host}:/root/scp.bin`], tk.password);
    expect(up.code, up.stderr).toBe(0);
    const down = await runOpenSsh('scp', [...sshOpts(known), '-P', String(tk.port), `${tk.user}@${tk.host}:/root/scp.bin`, `${local}.scp`], tk.password);
    expect(down.code, down.stderr).toBe(0);
    expect(readFileSync(`${local}.scp`).equals(data)).toBe(true);
  }, 180_000);

  it('local port forwarding reaches a server listening on localhost inside', async () => {
    await t.call('POST', `/sandboxes/${id}/files/write`, { path: '/root/www/index.html', content: 'forwarded' });
    await t.call('POST', `/sandboxes/${id}/bg`, { command: 'exec python3 -m http.server 8081 --bind 127.0.0.1', cwd: '/root/www' });
    const tk = await ticket();
    // A free port, not a fixed one: another test file's server or connection may hold any given port.
    const localPort = await freePort();
    const fwd = spawnOpenSsh(
      'ssh',
      [...sshOpts(known), '-p', String(tk.port), '-N', '-L', `${localPort}:127.0.0.1:8081`, `${tk.user}@${tk.host}`],
      tk.password,
    );
    try {
      const body = await until(() => httpGet(localPort), (b) => b === 'forwarded', 30_000);
      expect(body).toBe('forwarded');
    } finally {
      fwd.kill();
    }
  }, 120_000);

  it('remote forwarding (ssh -R): a port inside the sandbox reaches a server on the client side', async () => {
    // The "client machine" side: a server only the ssh client can reach (loopback of the test host).
    const server = createServer((s) => s.once('data', (d) => s.end(`from-the-client:${d}`)));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const clientPort = (server.address() as { port: number }).port;
    const inside = 9090 + (driver === 'gvisor' ? 1 : 0);
    const probe = [
      'import socket, time',
      'for i in range(100):',
      '    try:',
      `        s = socket.create_connection(("127.0.0.1", ${inside}), 2); break`,
      '    except OSError: time.sleep(0.1)',
      'else: print("REFUSED"); raise SystemExit(0)',
      's.settimeout(30); s.sendall(b"hi"); print(s.recv(100).decode())',
    ].join('\n');
    try {
      const tk = await ticket();
      const r = await ssh(tk, [`python3 -c '${probe}'`], undefined, tk.user, [
        '-o',
        'ExitOnForwardFailure=yes',
        '-R',
        `127.0.0.1:${inside}:127.0.0.1:${clientPort}`,
      ]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout.trim()).toBe('from-the-client:hi');
      // The port listened inside the sandbox, not on nube's host; it closed with the connection.
      expect(await httpGet(inside)).toBe('ECONNREFUSED');
      const after = await ssh(await ticket(), [
        `python3 -c 'import socket\ntry: socket.create_connection(("127.0.0.1", ${inside}), 2); print("OPEN")\nexcept OSError: print("CLOSED")'`,
      ]);
      expect(after.stdout.trim()).toBe('CLOSED');
    } finally {
      server.close();
    }
  }, 120_000);

  it('a ticket opens only its sandbox and expires', async () => {
    const tk = await ticket();
    await enable(other);
    const wrong = await ssh(tk, ['true'], undefined, other);
    expect(wrong.code).toBe(255);
    const ok = await ssh(tk, ['echo yes']);
    expect(ok.stdout).toBe('yes\n');
    await t.nube.services.sandboxes.ssh.repo.db.updateTable('sandbox_ssh_tickets').set({ expires_at: Date.now() - 1 }).execute();
    const late = await ssh(tk, ['true']);
    expect(late.code).toBe(255);
  }, 120_000);

  it('ssh-disable revokes tickets and closes live sessions', async () => {
    const tk = await ticket();
    const live = spawnOpenSsh('ssh', [...sshOpts(known), '-p', String(tk.port), `${tk.user}@${tk.host}`, 'echo started; sleep 120'], tk.password);
    let out = '';
    live.stdout!.on('data', (d) => (out += d));
    const ended = new Promise<number>((r) => live.on('close', (c) => r(c ?? -1)));
    await until(async () => out, (o) => o.includes('started'), 30_000);
    const d = await t.call('POST', `/sandboxes/${id}/ssh-disable`);
    expect(d.body).toMatchObject({ ok: true, enabled: false, closedSessions: 1 });
    const code = await Promise.race([ended, new Promise<number>((r) => setTimeout(() => r(-2), 15_000))]);
    expect(code).not.toBe(-2);
    expect((await ssh(tk, ['true'])).code).toBe(255);
    expect((await t.call('POST', `/sandboxes/${id}/ssh-ticket`)).status).toBe(409);
  }, 120_000);

  it('the host key is the same after a restart of nube; sessions work again', async () => {
    await enable();
    const before = readFileSync(known, 'utf8').trim().split(/\s+/).slice(-1)[0];
    await t.nube.close();
    const t2 = await startSandboxNube('ssh', { NUBE_SANDBOX_DRIVER: driver, NUBE_SSH_PORT: '0', NUBE_OWNER_KEY: t.ownerKey }, t.dataDir);
    Object.assign(t, { ...t2 });
    const tk = await ticket();
    // A new port (0 = any): the known_hosts entry for the new port must match the same key.
    rmSync(known, { force: true });
    const r = await ssh(tk, ['echo back']);
    expect(r.stdout).toBe('back\n');
    expect(readFileSync(known, 'utf8').trim().split(/\s+/).slice(-1)[0]).toBe(before);
  }, 180_000);

  it('failed logins stop that client on that sandbox at once, and no one else (issue 27 item 10)', async () => {
    const tk = await ticket();
    await enable(other);
    const tkOther = await ticket(other);
    // Two clients behind one NAT share an address: 127.0.0.5 here (the gateway sees it as the client's).
    const nat = ['-b', '127.0.0.5'];
    for (let i = 0; i <= SSH_AUTH_LIMITS.target.points; i++) {
      expect((await ssh({ ...tk, password: `wrong${i}` }, ['true'], undefined, tk.user, nat)).code).toBe(255);
    }
    // Past the limit even the right ticket is refused there for a while, and at once.
    const started = Date.now();
    const r = await ssh(tk, ['echo no'], undefined, tk.user, nat);
    expect(r.code).toBe(255);
    expect(r.stdout).toBe('');
    expect(Date.now() - started).toBeLessThan(5000);
    // The neighbour behind the same address, on its own sandbox, is not locked out; nor is this
    // sandbox's user at another address.
    expect((await ssh(tkOther, ['echo neighbour'], undefined, other, nat)).stdout).toBe('neighbour\n');
    expect((await ssh(tk, ['echo elsewhere'], undefined, tk.user, ['-b', '127.0.0.6'])).stdout).toBe('elsewhere\n');
  }, 180_000);
});
