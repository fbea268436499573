// Issue 37 item 1, the sandbox store: a running sandbox with a file, a suspended one, a template
// snapshot, a volume with a file, a machine launched from an archive and an agent are backed up with `nube
// backup` while nube runs; then nube stops, its sandboxes and data dir are gone, `nube restore` puts
// everything into a new data dir, and after the start each answers as before: the running sandbox was
// started again on its files, the suspended one resumes with its files, the template snapshot makes
// sandboxes, the volume holds its file within its limit, the machine serves its app, the agent answers;
// the restore has an empty templates dir, as a new host, so the template build comes from the backup. SQLite only: the
// metadata store's two dialects are the other drill's (backup.test.ts).
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Layout } from '../../src/areas/sandboxes/runtime/namespaces/state.js';
import { closeStore } from '../../src/areas/sandboxes/runtime/namespaces/store.js';
import { sseMessage, textOf } from '../agents/helpers.js';
import { type LlmStub, startLlmStub } from '../helpers/llm-stub.js';
import { startSourceServer, type SourceServer, tarGz } from '../machines/source-server.js';
import { type NubeProcess, nubeProcess, viaPortProxy } from '../helpers/nube-process.js';
import { nubeEntry } from '../helpers/process.js';
import { SANDBOX_ENV, TEMPLATE_WAIT_MS, TEST_ROOT, until } from '../sandboxes/helpers.js';

const run = promisify(execFile);
const ENV: Record<string, string> = {
  ...SANDBOX_ENV,
  // Volumes need disk quotas: the store image.
  NUBE_SANDBOX_STORE: 'auto',
  NUBE_SANDBOX_BRIDGE: 'nubebk0:10.152.0.1/16',
  NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
};

async function cli(env: Record<string, string>, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, [...nubeEntry(), ...args], {
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', NUBE_LOG_LEVEL: 'silent', ...ENV, ...env } as NodeJS.ProcessEnv,
      maxBuffer: 16 * 2 ** 20,
    });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: x.code ?? -1, stdout: x.stdout ?? '', stderr: x.stderr ?? '' };
  }
}

/** Unmounts a data dir's sandbox store and removes it with its run dir. */
async function dropDataDir(dataDir: string): Promise<void> {
  const runDir = new Layout(`${dataDir}/sandbox-runtime`).runDir;
  // Overlays a nube that failed to start left behind.
  for (const l of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const at = l.split(' ')[4];
    if (at?.startsWith(`${runDir}/`)) await run('umount', ['-l', at]).catch(() => {});
  }
  await closeStore(`${dataDir}/sandbox-runtime`);
  rmSync(runDir, { recursive: true, force: true });
  rmSync(dataDir, { recursive: true, force: true });
}

const app = tarGz({
  'nube.json': JSON.stringify({ build: 'echo built', start: 'exec python3 -m http.server "$PORT" --bind 0.0.0.0' }),
  'index.html': 'hello from before the backup',
});

// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
async function settled(n: NubeProcess, id: string, key?: string): Promise<any> {
  const end = Date.now() + 300_000;
  for (;;) {
    const g = (await n.call('GET', `/machines/${id}`, undefined, key)).body;
    if (g.phase === null && g.status !== 'building' && g.status !== 'provisioning') return g;
    if (Date.now() > end) throw new Error(`the launch did not finish: ${JSON.stringify(g)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('backup and restore of the sandbox store: sandboxes, snapshots, volumes, a machine, an agent', () => {
  const root = `${TEST_ROOT}/backup-sandboxes-${process.pid}`;
  let n: NubeProcess;
  let restored: NubeProcess | undefined;
  let src: SourceServer;
  let stub: LlmStub;

  beforeAll(async () => {
    rmSync(root, { recursive: true, force: true });
    stub = await startLlmStub();
    Object.assign(ENV, { NUBE_LLM_BASE_URL: stub.url, NUBE_LLM_API_KEY: 'sk-operator', NUBE_LLM_MODEL: 'stub-model', NUBE_LLM_GATEWAY_PORT: '0' });
    src = await startSourceServer();
    src.put('/app.tar.gz', app);
    n = await nubeProcess('sqlite', `${root}/data`, ENV);
    await n.start();
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    for (const x of [restored, n]) {
      if (!x) continue;
      const key = n.ownerKey;
      if (x.running) {
        for (const m of (await x.call('GET', '/machines', undefined, key)).body?.items ?? []) await x.call('DELETE', `/machines/${m.id}`, undefined, key);
        for (const a of (await x.call('GET', '/agents', undefined, key)).body?.agents ?? []) await x.call('DELETE', `/agents/${a.id}`, undefined, key);
        for (const s of (await x.call('GET', '/sandboxes', undefined, key)).body?.sandboxes ?? []) await x.call('DELETE', `/sandboxes/${s.id}`, undefined, key);
        await x.stop('SIGTERM');
      }
      await dropDataDir(x.dataDir);
      await x.close();
    }
    await src?.close();
    await stub?.close();
    rmSync(root, { recursive: true, force: true });
  }, 300_000);

  it('each answers as before after a restore onto an empty data dir', { retry: 0, timeout: TEMPLATE_WAIT_MS + 900_000 }, async () => {
    const exec = async (id: string, command: string, x: NubeProcess = n) => {
      const r = await x.call('POST', `/sandboxes/${id}/exec`, { command, timeoutSeconds: 120 }, n.ownerKey);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      return r.body;
    };
    const running = await n.call('POST', '/sandboxes', { timeoutSeconds: 3600 });
    expect(running.status, JSON.stringify(running.body)).toBe(200);
    const rid = running.body.id;
    await n.call('POST', `/sandboxes/${rid}/files/write`, { path: '/root/kept.txt', content: 'running' });
    const derived = await n.call('POST', `/sandboxes/${rid}/template-snapshot`, { key: 'kept', hash: 'v1' });
    expect(derived.status, JSON.stringify(derived.body)).toBe(200);
    // Written after the template snapshot: in the sandbox's backup, not in the snapshot's.
    await n.call('POST', `/sandboxes/${rid}/files/write`, { path: '/root/later.txt', content: 'later' });
    const paused = await n.call('POST', '/sandboxes', { timeoutSeconds: 3600 });
    const pid = paused.body.id;
    await n.call('POST', `/sandboxes/${pid}/files/write`, { path: '/root/kept.txt', content: 'suspended' });
    expect((await n.call('POST', `/sandboxes/${pid}/suspend`)).status).toBe(200);
    const vol = await n.call('POST', '/volumes', { name: 'kept', sizeGB: 1 });
    expect(vol.status, JSON.stringify(vol.body)).toBe(201);
    const withVol = await n.call('POST', '/sandboxes', { volumes: [{ volumeId: vol.body.id, path: '/data' }] });
    expect(withVol.status, JSON.stringify(withVol.body)).toBe(200);
    await exec(withVol.body.id, 'echo volume > /data/kept.txt && chown 1000:1000 /data/kept.txt && sync');
    const launch = await n.call('POST', '/machines/launch', { archiveUrl: `${src.base}/app.tar.gz`, name: 'kept' });
    expect(launch.status, JSON.stringify(launch.body)).toBeLessThan(300);
    const machineId = launch.body.machineId;
    const machine = await settled(n, machineId);
    expect(machine, JSON.stringify(machine)).toMatchObject({ status: 'running' });
    expect(await viaPortProxy(n, machine.url)).toBe('hello from before the backup');

    const agent = await n.call('POST', '/agents', { template: 'acp', env: {} });
    expect(agent.status, JSON.stringify(agent.body)).toBe(200);
    const agentRunning = await until(() => n.call('GET', `/agents/${agent.body.id}`), (v) => v.body?.status === 'running' || v.body?.status === 'lost', 600_000);
    expect(agentRunning.body.status, JSON.stringify(agentRunning.body)).toBe('running');
    stub.push({ content: 'before the backup' });
    expect(textOf((await sseMessage(n.base, n.ownerKey, agent.body.id, 'hello')).events)).toBe('before the backup');

    const backupDir = `${root}/backup`;
    const b = await cli({ NUBE_DATA_DIR: n.dataDir }, 'backup', '--to', backupDir);
    expect(b.code, b.stderr).toBe(0);
    console.log(b.stdout);
    // Every running sandbox (the machine's too) frozen for the copy; the suspended one is still already.
    expect(b.stdout).toMatch(/sandbox-store: 5 sandbox\(es\), 4 frozen for \d+ ms while copied/);
    expect(b.stdout).toContain('sandbox-store: 1 volume(s) archived with owners and xattrs');
    expect(b.stdout).toMatch(/sandbox-store: template builds base\/[0-9a-f]+.* archived/);
    // The sandboxes run on, thawed.
    expect((await exec(rid, 'cat /root/kept.txt')).stdout).toBe('running');

    // The host is lost: every sandbox gone with nube, the data dir too.
    await n.call('DELETE', `/machines/${machineId}`);
    await n.call('DELETE', `/agents/${agent.body.id}`);
    for (const id of [rid, pid, withVol.body.id]) await n.call('DELETE', `/sandboxes/${id}`);
    await n.stop('SIGTERM');
    await dropDataDir(n.dataDir);

    const target = `${root}/restored`;
    const manifest = JSON.parse((await run('cat', [`${backupDir}/manifest.json`])).stdout);
    // A new host has no template builds either: the ones the sandboxes stand on come from the backup.
    const renv = { NUBE_DATA_DIR: target, NUBE_NODE_ID: manifest.node, NUBE_TEMPLATES_DIR: `${root}/templates` };
    const r = await cli(renv, 'restore', '--from', backupDir);
    expect(r.code, r.stderr).toBe(0);
    console.log(r.stdout);
    expect(r.stdout).toMatch(/sandbox-store: 5 sandbox\(es\) and 1 volume\(s\) put back/);
    expect(r.stdout).toMatch(/sandbox-store: template builds: base\/[0-9a-f]+/);
    expect(existsSync(`${root}/templates/base`)).toBe(true);

    restored = await nubeProcess('sqlite', target, { ...ENV, ...renv, NUBE_OWNER_KEY: n.ownerKey });
    await restored.start();
    const x = restored;
    const call = (method: string, path: string, body?: unknown) => x.call(method, path, body, n.ownerKey);

    // The running sandbox was started again on its files (its processes were not copied).
    const g = await until(() => call('GET', `/sandboxes/${rid}`), (v) => v.body?.status !== 'starting', 120_000);
    expect(g.body.status, JSON.stringify(g.body)).toBe('running');
    expect((await exec(rid, 'cat /root/kept.txt /root/later.txt', x)).stdout).toBe('runninglater');
    // The suspended one is suspended, and resumes with its files.
    expect((await call('GET', `/sandboxes/${pid}`)).body.status).toBe('suspended');
    expect((await call('POST', `/sandboxes/${pid}/resume`)).status).toBe(200);
    expect((await exec(pid, 'cat /root/kept.txt', x)).stdout).toBe('suspended');
    // The template snapshot makes sandboxes with its files (and not what was written after it).
    expect((await call('GET', `/template-snapshots/${derived.body.id}`)).status).toBe(200);
    const child = await call('POST', '/sandboxes', { templateKey: 'kept', templateHash: 'v1', timeoutSeconds: 120 });
    expect(child.status, JSON.stringify(child.body)).toBe(200);
    expect((await exec(child.body.id, 'cat /root/kept.txt; test -e /root/later.txt || echo absent', x)).stdout).toBe('runningabsent\n');
    // The volume: its file with its owner, in a volume limited as before.
    expect((await call('GET', `/volumes/${vol.body.id}`)).body.status).toBe('ready');
    // (Through the sandbox that wrote it: restored with it, it holds the volume for writing.)
    expect((await exec(withVol.body.id, 'cat /data/kept.txt; stat -c %u /data/kept.txt', x)).stdout).toBe('volume\n1000\n');
    const vdir = `${target}/sandbox-runtime/store/volumes/${vol.body.id}`;
    const sub = await run('btrfs', ['subvolume', 'show', vdir]).catch(() => null);
    if (sub) {
      // A btrfs store: the volume is a subvolume again, its qgroup limited to its size.
      const sid = sub.stdout.match(/Subvolume ID:\s*(\d+)/)![1];
      const q = await run('btrfs', ['qgroup', 'show', '-re', '--raw', vdir]);
      const line = q.stdout.split('\n').find((l) => l.trim().startsWith(`0/${sid} `))!.trim().split(/\s+/);
      expect(Number(line[3])).toBe(1024 ** 3);
    } else {
      // An XFS store: `df` inside shows the project's limit.
      expect((await exec(withVol.body.id, 'df -k /data | tail -1', x)).stdout).toMatch(/^\S+\s+1048576\s/);
    }
    // The machine serves its app again: its sandbox started again, its supervisor started the app.
    const m = await until(
      async () => viaPortProxy(x, (await call('GET', `/machines/${machineId}`)).body.url).catch((e: Error) => e.message),
      (v) => v === 'hello from before the backup',
      180_000,
    );
    expect(m).toBe('hello from before the backup');
    expect((await call('GET', `/machines/${machineId}`)).body.status).toBe('running');
    // The agent's box was started again: it answers a message.
    await until(() => call('GET', `/agents/${agent.body.id}`), (v) => v.body?.status === 'running', 120_000);
    stub.push({ content: 'after the restore' });
    expect(textOf((await sseMessage(x.base, n.ownerKey, agent.body.id, 'again')).events)).toBe('after the restore');
    expect(existsSync(`${target}/sandbox-runtime/store.img`)).toBe(true);
    expect(readdirSync(backupDir)).toContain('sandbox-store');
  });
});
