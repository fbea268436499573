// A template's user beyond exec: the terminal and an SSH session (OpenSSH's client through nube's
// gateway) run as the template's user in its home, like exec; and a template imported
// before every import had nube's /.nube/runas gets it when a sandbox starts on it. The image: busybox
// with user `app`, plus this host's bash and python3 (the terminal's helper is a python3 script).
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVERS, type SandboxNube, startSandboxNube, stopSandboxNube, TEST_ROOT, until } from '../sandboxes/helpers.js';
import {
  busyboxLayer,
  dropTemplates,
  hostFile,
  pushImage,
  type RunningRegistry,
  startRegistry,
  type TarEntry,
  tarOf,
  waitBuilt,
} from './registry.js';

/** bash and python3 of this host with their libraries and python's standard library (no tests, no caches). */
function bashAndPython(): TarEntry[] {
  const python = realpathSync('/usr/bin/python3');
  const out = new Map<string, TarEntry>();
  out.set('usr/bin/bash', hostFile('/usr/bin/bash', 'usr/bin/bash'));
  out.set('usr/bin/python3', hostFile(python, 'usr/bin/python3'));
  for (const p of ['/usr/bin/bash', python])
    for (const m of execFileSync('ldd', [p], { encoding: 'utf8' }).matchAll(/(\/\S+\.so[.\d]*)/g)) {
      const into = m[1]!.slice(1);
      out.set(into, hostFile(realpathSync(m[1]!), into));
    }
  const lib = `/usr/lib/${basename(python)}`;
  const skip = new Set(['test', 'tests', '__pycache__', 'site-packages', 'dist-packages', 'idlelib', 'tkinter', 'ensurepip', 'lib2to3', 'pydoc_data']);
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      if (skip.has(name)) continue;
      const path = `${dir}/${name}`;
      const st = lstatSync(path);
      if (st.isDirectory()) walk(path);
      else if (st.isFile()) out.set(path.slice(1), { name: path.slice(1), content: readFileSync(path), mode: st.mode & 0o777 });
    }
  };
  walk(lib);
  return [...out.values()];
}

describe.each(DRIVERS)("%s: terminal sessions as the template's user", (driver) => {
  let reg: RunningRegistry;
  let t: SandboxNube;

  beforeAll(async () => {
    reg = await startRegistry();
    pushImage(
      reg.host,
      'test/bb-py',
      'v1',
      [
        { tar: await busyboxLayer(), compression: 'gzip' },
        { tar: await tarOf([{ name: 'bin/bash', type: 'symlink', linkname: '/usr/bin/bash' }, ...bashAndPython()]), compression: 'gzip' },
      ],
      { Env: ['PATH=/usr/bin:/bin'] },
    );
    t = await startSandboxNube('tplsessions', { NUBE_SANDBOX_DRIVER: driver, NUBE_TEMPLATE_REGISTRY_ALLOW: reg.origin }, undefined, {
      templates: [],
    });
  }, 600_000);

  afterAll(async () => {
    for (const s of (await t?.call('GET', '/sandboxes'))?.body?.sandboxes ?? []) await t.call('DELETE', `/sandboxes/${s.id}`);
    await dropTemplates(t);
    if (t) await stopSandboxNube(t);
    reg?.stop();
  }, 120_000);

  it("the terminal and SSH run as the template's user in its home; an import without /.nube/runas gets it at the sandbox's start", async () => {
    const c = await t.call('POST', '/templates', { name: 'py-app', fromImage: `${reg.host}/test/bb-py:v1`, user: 'app' });
    expect(c.status, JSON.stringify(c.body)).toBe(200);
    const b = await waitBuilt(t, c.body.id);
    expect(b.status, JSON.stringify(b)).toBe('ready');
    // As a template imported before runas was part of every import.
    const build = readFileSync(`${TEST_ROOT}/templates/${c.body.id}/current`, 'utf8').trim();
    const runas = `${TEST_ROOT}/templates/${c.body.id}/${build}/rootfs/.nube/runas`;
    rmSync(runas);

    const s = await t.call('POST', '/sandboxes', { template: 'py-app' });
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    const id = s.body.id;
    expect(existsSync(runas)).toBe(true);
    const r = await t.call('POST', `/sandboxes/${id}/exec`, { command: 'id -u; pwd' });
    expect(r.body).toMatchObject({ stdout: '1000\n/home/app\n', exitCode: 0 });

    const ws = new WebSocket(`${t.baseUrl.replace('http', 'ws')}/api/v2/sandboxes/${id}/terminal?rows=30&cols=100`, { headers: t.auth });
    let text = '';
    const exit = new Promise<{ type: string; code: number }>((resolve, reject) => {
      ws.on('message', (d: Buffer, binary: boolean) => {
        if (binary) text += d.toString();
        else resolve(JSON.parse(d.toString()));
      });
      ws.on('error', reject);
    });
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    ws.send(Buffer.from('echo "who=$(id -u):$(id -g) at=$(pwd) home=$HOME user=$USER"\r'));
    const seen = await until(async () => text, (x) => /who=\d+:\d+ at=\S+ home=\S+ user=\S+\r\n/.test(x), 60_000);
    expect(seen).toMatch(/who=1000:1000 at=\/home\/app home=\/home\/app user=app\r\n/);
    ws.send(Buffer.from('exit 4\r'));
    expect(await exit).toEqual({ type: 'exit', code: 4 });
    ws.close();

    // An SSH session through the gateway (OpenSSH's client, the ticket's password given by askpass).
    expect((await t.call('POST', `/sandboxes/${id}/ssh-enable`)).status).toBe(200);
    const tk = (await t.call('POST', `/sandboxes/${id}/ssh-ticket`)).body;
    const dir = mkdtempSync(join(tmpdir(), 'nube-tplssh-'));
    writeFileSync(`${dir}/askpass`, '#!/bin/sh\nprintf "%s\\n" "$NUBE_TEST_PW"\n', { mode: 0o755 });
    const opts = ['StrictHostKeyChecking=no', `UserKnownHostsFile=${dir}/known`, 'PreferredAuthentications=password', 'LogLevel=ERROR'];
    const r2 = await promisify(execFile)(
      'ssh',
      [...opts.flatMap((o) => ['-o', o]), '-p', String(tk.port), `${tk.user}@${tk.host}`, 'echo "$(id -u) $(pwd) $HOME"'],
      { env: { ...process.env, SSH_ASKPASS: `${dir}/askpass`, SSH_ASKPASS_REQUIRE: 'force', DISPLAY: ':0', NUBE_TEST_PW: tk.password } },
    );
    expect(r2.stdout).toBe('1000 /home/app /home/app\n');
    rmSync(dir, { recursive: true, force: true });
    expect((await t.call('DELETE', `/sandboxes/${id}`)).status).toBe(200);
  }, 600_000);
});
