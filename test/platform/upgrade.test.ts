// Issue 37 item 2: an upgrade from the last landed release. That release (scripts/previous-release) is
// checked out beside this tree and built; it runs on a data dir (and a PostgreSQL database) and is
// given one of each kind of resource; then it stops as a service manager stops it, this tree starts on
// the same data, and every resource must answer as before: keys, files, databases, webhooks, documents,
// a running sandbox with its process, a suspended one, a machine serving its app.
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeKept } from '../helpers/kept-resources.js';
import { type NubeProcess, nubeProcess, viaPortProxy } from '../helpers/nube-process.js';
import { DIALECTS } from '../helpers/pg.js';
import { type SourceServer, startSourceServer, tarGz } from '../machines/source-server.js';
import { SANDBOX_ENV, TEMPLATE_WAIT_MS, TEST_ROOT } from '../sandboxes/helpers.js';

const ROOT = process.cwd();
const PREVIOUS = readFileSync(`${ROOT}/scripts/previous-release`, 'utf8').split('\n')[0]!.trim();
const git = (args: string[], cwd = ROOT) => execFileSync('git', args, { cwd, encoding: 'utf8', stdio: 'pipe' });
/** A checkout without that commit (an export, a shallow clone) cannot run the previous release: said, and skipped. */
const HISTORY = (() => {
  try {
    git(['cat-file', '-e', `${PREVIOUS}^{commit}`]);
    return true;
  } catch {
    console.warn(`upgrade test skipped: the previous release ${PREVIOUS} (scripts/previous-release) is not in this checkout's git history`);
    return false;
  }
})();

const run = promisify(execFile);
let previous: string | undefined;
let preparing: Promise<string> | undefined;
/**
 * The previous release checked out (a detached worktree) and built, once for both stores. Never
 * synchronously: a minute of blocked event loop makes vitest's worker miss its own RPC deadline.
 */
function previousRelease(): Promise<string> {
  preparing ??= prepare();
  return preparing;
}

async function prepare(): Promise<string> {
  const dir = `${TEST_ROOT}/upgrade-previous-${process.pid}`;
  rmSync(dir, { recursive: true, force: true });
  try {
    await run('git', ['worktree', 'add', '--detach', dir, PREVIOUS], { cwd: ROOT });
  } catch (e) {
    throw new Error(`the previous release ${PREVIOUS} (scripts/previous-release) cannot be checked out here (a shallow clone?): ${String((e as { stderr?: string }).stderr ?? e)}`);
  }
  // Its dependencies: this tree's when the lock file is the same, else its own.
  const sameDeps = git(['diff', '--name-only', PREVIOUS, '--', 'package.json', 'package-lock.json']).trim() === '';
  if (sameDeps) symlinkSync(`${ROOT}/node_modules`, `${dir}/node_modules`);
  else await run('npm', ['ci', '--no-audit', '--no-fund'], { cwd: dir, maxBuffer: 64 * 2 ** 20 });
  await run(process.execPath, ['scripts/build.mjs'], { cwd: dir, maxBuffer: 64 * 2 ** 20 });
  previous = dir;
  return dir;
}

afterAll(() => {
  if (!previous) return;
  try {
    git(['worktree', 'remove', '--force', previous]);
  } catch {
    rmSync(previous, { recursive: true, force: true });
    git(['worktree', 'prune']);
  }
});

const app = tarGz({
  'nube.json': JSON.stringify({ build: 'echo built', start: 'exec python3 -m http.server "$PORT" --bind 0.0.0.0' }),
  'index.html': 'hello from before the upgrade',
});

describe.skipIf(!HISTORY).each(DIALECTS)('%s: an upgrade from the previous release keeps every resource', (dialect) => {
  let n: NubeProcess;
  let src: SourceServer;

  beforeAll(async () => {
    const dir = await previousRelease();
    expect(existsSync(`${dir}/dist/src/main.js`)).toBe(true);
    src = await startSourceServer();
    src.put('/app.tar.gz', app);
    n = await nubeProcess(dialect, `${TEST_ROOT}/upgrade-${dialect}-${process.pid}`, { ...SANDBOX_ENV, NUBE_OUTBOUND_ALLOW: '127.0.0.1/32' });
    await n.start(dir);
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await n?.close();
    await src?.close();
  }, 180_000);

  // Not retried: a second try would find this tree's nube already on the data, not the previous one.
  it('keys, files, databases, webhooks, documents, sandboxes (running and suspended) and a machine', { retry: 0, timeout: 900_000 }, async () => {
    // One of each, made by the previous release.
    const { key, created, db, hook, doc } = await makeKept(n, 'before-upgrade', `${src.base}/hook`);
    const running = await n.call('POST', '/sandboxes', { timeoutSeconds: 3600 });
    expect(running.status, JSON.stringify(running.body)).toBe(200);
    const rid = running.body.id;
    await n.call('POST', `/sandboxes/${rid}/files/write`, { path: '/root/kept.txt', content: 'running' });
    const bg = await n.call('POST', `/sandboxes/${rid}/bg`, { command: 'exec sleep 3600' });
    expect(bg.status, JSON.stringify(bg.body)).toBe(200);
    const paused = await n.call('POST', '/sandboxes', { timeoutSeconds: 3600 });
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    const pid = paused.body.id;
    await n.call('POST', `/sandboxes/${pid}/files/write`, { path: '/root/kept.txt', content: 'suspended' });
    expect((await n.call('POST', `/sandboxes/${pid}/suspend`)).status).toBe(200);
    const launch = await n.call('POST', '/machines/launch', { archiveUrl: `${src.base}/app.tar.gz`, name: 'kept' });
    expect(launch.status, JSON.stringify(launch.body)).toBeLessThan(300);
    const machineId = launch.body.machineId;
    const machine = await settled(n, machineId);
    expect(machine, JSON.stringify(machine)).toMatchObject({ status: 'running' });
    expect(await viaPortProxy(n, machine.url)).toBe('hello from before the upgrade');

    // The upgrade: stopped as systemd stops it, this tree started on the same data.
    await n.stop('SIGTERM');
    await n.start();

    expect((await n.call('GET', '/account', undefined, key.body.secret)).status).toBe(200);
    const file = await n.call('GET', `/files/${created.body.file.id}`);
    expect(file.body.status).toBe('DONE');
    expect(await (await fetch(file.body.readUrl)).text()).toBe('kept');
    const rows = await n.call('POST', `/databases/${db.body.id}/query`, { sql: 'select v from t' });
    expect(rows.status, JSON.stringify(rows.body)).toBe(200);
    expect(JSON.stringify(rows.body.rows)).toContain('before');
    expect((await n.call('GET', `/webhooks/${hook.body.id}`)).status).toBe(200);
    expect((await n.call('GET', `/documents/${doc.body.document?.id ?? doc.body.id}`)).status).toBe(200);
    // The running sandbox kept running through the upgrade: the same process, the same files.
    expect((await n.call('GET', `/sandboxes/${rid}`)).body.status).toBe('running');
    const bgAfter = await n.call('GET', `/sandboxes/${rid}/bg/${bg.body.execId}`);
    expect(bgAfter.body.state, JSON.stringify(bgAfter.body)).toBe('running');
    const readAfter = await n.call('POST', `/sandboxes/${rid}/files/read`, { path: '/root/kept.txt' });
    expect(readAfter.body.content, JSON.stringify(readAfter.body)).toBe('running');
    expect((await n.call('GET', `/sandboxes/${pid}`)).body.status).toBe('suspended');
    expect((await n.call('POST', `/sandboxes/${pid}/resume`)).status).toBe(200);
    expect((await n.call('POST', `/sandboxes/${pid}/files/read`, { path: '/root/kept.txt' })).body.content).toBe('suspended');
    const after = (await n.call('GET', `/machines/${machineId}`)).body;
    expect(after).toMatchObject({ status: 'running' });
    expect(await viaPortProxy(n, after.url)).toBe('hello from before the upgrade');
    for (const id of [rid, pid]) await n.call('DELETE', `/sandboxes/${id}`);
    await n.call('DELETE', `/machines/${machineId}`);
  });
});

// biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
async function settled(n: NubeProcess, id: string): Promise<any> {
  const end = Date.now() + 300_000;
  for (;;) {
    const g = (await n.call('GET', `/machines/${id}`)).body;
    if (g.phase === null && g.status !== 'building' && g.status !== 'provisioning') return g;
    if (Date.now() > end) throw new Error(`the launch did not finish: ${JSON.stringify(g)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
