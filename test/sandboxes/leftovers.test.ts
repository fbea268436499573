// Issue 28 item 7: what a stopped nube leaves on the host. nube started on its own data dir (its own
// bridge and cgroup parent, so other test files' nubes share nothing with it), a running and a
// suspended sandbox, nube stopped: doctor lists the store mount, run dir, bridge, nft table, cgroups and
// leases with who needs them; `nube cleanup` (the CLI, as an operator runs it) refuses while nube runs
// and while the sandbox runs, `--force` kills it and removes the rest, and doctor then lists nothing.
// Started again on the unmounted store, nube keeps both sandboxes' records: the running one is
// started again on its files, the suspended one resumes. On SQLite and PostgreSQL.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { leftoversCheck } from '../../src/areas/sandboxes/leftovers.js';
import { cleanLeftovers } from '../../src/areas/sandboxes/runtime/namespaces/leftovers.js';
import { mountOptions, storePaths } from '../../src/areas/sandboxes/runtime/namespaces/store.js';
import { runtimeDataDir } from '../../src/areas/sandboxes/runtime-dir.js';
import type { Config } from '../../src/platform/config-shape.js';
import { createTempDatabase, DIALECTS } from '../helpers/pg.js';
import { newOwnerKey } from '../helpers/server.js';
import { type SandboxNube, SANDBOX_ENV, TEMPLATE_WAIT_MS, TEST_ROOT, createRunning, startSandboxNube, stopSandboxNube } from './helpers.js';

const run = promisify(execFile);
const BRIDGE = { name: 'nubel0', cidr: '10.86.0.1/16' };
const CGROUP = 'nube-leftovers-test';

/** `nube cleanup` in a child process with this nube's configuration; never throws on exit 1. */
async function cli(env: Record<string, string>, ...args: string[]): Promise<{ code: number; out: string }> {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('NUBE_') && k !== 'DATABASE_URL' && k !== 'REDIS_URL'),
  );
  try {
    const { stdout } = await run('npx', ['tsx', 'src/main.ts', 'cleanup', ...args], { env: { ...clean, ...env }, cwd: process.cwd() });
    return { code: 0, out: stdout };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, out: `${err.stdout}${err.stderr}` };
  }
}

const texts = async (config: Config) => (await leftoversCheck(config)).map((r) => `${r.status} ${r.found}`);

describe.each(DIALECTS)('%s: leftovers of a stopped nube', (dialect) => {
  let attempt = 0;
  let dataDir = '';
  let pg: { url: string; drop(): Promise<void> } | undefined;
  let env: Record<string, string>;
  let t: SandboxNube | undefined;

  afterAll(async () => {
    if (t) await stopSandboxNube(t);
    await cleanLeftovers({ dataDir: `${dataDir}/sandbox-runtime`, bridge: BRIDGE, cgroupParent: CGROUP }, { force: true });
    await pg?.drop();
  }, 120_000);

  it('doctor lists them, cleanup removes them, a restart keeps the sandboxes', async () => {
    // A retry starts afresh (vitest retries a failed test here).
    dataDir = `${TEST_ROOT}/leftovers-${dialect}-${process.pid}-${attempt++}`;
    pg = dialect === 'postgres' ? await createTempDatabase('leftovers') : undefined;
    env = {
      NUBE_SANDBOX_BRIDGE: `${BRIDGE.name}:${BRIDGE.cidr}`,
      NUBE_SANDBOX_CGROUP: CGROUP,
      NUBE_OWNER_KEY: newOwnerKey(),
      ...(pg ? { DATABASE_URL: pg.url } : {}),
    };
    t = await startSandboxNube(`leftovers-${dialect}`, env, dataDir);
    const config = t.nube.deps.config;
    const runDir = `${config.dataDir}/sandbox-runtime`;
    const cliEnv = { ...SANDBOX_ENV, NUBE_SANDBOX_STORE: 'auto', ...env, NUBE_DATA_DIR: dataDir, NUBE_LOG_LEVEL: 'silent' };
    const live = await createRunning(t);
    // The driver's id (what the host's parts are named by).
    const liveRt = live.id.replace(/_/g, '-');
    expect((await t.call('POST', `/sandboxes/${live.id}/exec`, { command: 'echo kept > /root/mark' })).body.exitCode).toBe(0);
    const sleeper = await createRunning(t);
    expect((await t.call('POST', `/sandboxes/${sleeper.id}/suspend`)).status).toBe(200);

    // While nube runs: its own, and cleanup refuses.
    expect((await texts(config))[0]).toMatch(/^ok nube \d+ runs on this data dir/);
    const busy = await cli(cliEnv);
    expect(busy.code).toBe(1);
    expect(busy.out).toMatch(/nothing removed: nube runs on .*sandbox-runtime \(pid \d+\): stop it first/);

    await t.close();
    t = undefined;

    // Stopped: each part with what it is and who needs it.
    const left = await texts(config);
    const line = (re: RegExp) => left.find((l) => re.test(l)) ?? `none matching ${re} in:\n${left.join('\n')}`;
    expect(line(/sandbox store/)).toMatch(new RegExp(`^ok left by a stopped nube: sandbox store .*store.img loop-mounted at .*/store \\(/dev/loop\\d+\\); needed by sandbox ${liveRt}$`));
    expect(line(/run dir/)).toMatch(new RegExp(`^ok .*run dir /run/nube/[0-9a-f]{16} .*needed by sandbox ${liveRt}`));
    expect(line(/bridge nubel0/)).toMatch(/^ok .*bridge nubel0 \(10\.86\.0\.0\/16\); needed by interface nbv.* \(a running sandbox's\)/);
    expect(line(/nft table/)).toMatch(/^ok .*nft table inet nube_nubel0 .*needed by interface nbv/);
    expect(line(/cgroup parent/)).toMatch(new RegExp(`^ok .*cgroup parent ${CGROUP} .*needed by sandbox ${liveRt}`));
    // The suspended sandbox's address lease is kept for it; nothing else of it is on the host.
    expect(line(/address lease/)).toMatch(/^warn .*1 address lease\(s\) of this data dir's stopped sandboxes .*no sandbox needs it/);

    const refused = await cli(cliEnv);
    expect(refused.code).toBe(1);
    expect(refused.out).toContain(`nothing removed: sandboxes of ${runDir} still run: ${liveRt} (nube cleanup --force kills them`);
    expect(await mountOptions(storePaths(runDir).mount)).not.toBeNull();

    const forced = await cli(cliEnv, '--force');
    expect(forced.out).toContain(`killed   sandbox ${liveRt}`);
    for (const what of ['sandbox store', 'run dir', 'bridge nubel0', 'nft table inet nube_nubel0', `cgroup parent ${CGROUP}`, 'address lease']) {
      expect(forced.out).toMatch(new RegExp(`^removed  .*${what.replace(/[()/]/g, '\\$&')}`, 'm'));
    }
    expect(forced.code, forced.out).toBe(0);
    expect(await texts(config)).toEqual(['ok a stopped nube left nothing on this host']);
    // On the host itself.
    expect(await mountOptions(storePaths(runDir).mount)).toBeNull();
    expect(existsSync('/sys/class/net/nubel0')).toBe(false);
    expect((await run('nft', ['list', 'tables'])).stdout).not.toContain('nube_nubel0');
    expect((await run('sh', ['-c', `ls -d /sys/fs/cgroup/*/${CGROUP} /sys/fs/cgroup/${CGROUP} 2>/dev/null || true`])).stdout).toBe('');
    // The image (the sandboxes' files) stays.
    expect(existsSync(storePaths(runDir).image)).toBe(true);

    // Started again on the unmounted store: both records stay; the killed one runs again on its files.
    t = await startSandboxNube(`leftovers-${dialect}`, env, dataDir);
    const list = (await t.call('GET', '/sandboxes')).body.sandboxes as { id: string; status: string }[];
    expect(list.map((s) => `${s.id} ${s.status}`).sort()).toEqual([`${live.id} running`, `${sleeper.id} suspended`].sort());
    const mark = await t.call('POST', `/sandboxes/${live.id}/exec`, { command: 'cat /root/mark' });
    expect(mark.body.stdout).toBe('kept\n');
    expect((await t.call('POST', `/sandboxes/${sleeper.id}/resume`)).status).toBe(200);
    expect((await t.call('POST', `/sandboxes/${sleeper.id}/exec`, { command: 'true' })).body.exitCode).toBe(0);
    expect(runtimeDataDir(t.nube.deps.config)).toBe(runDir);
  }, TEMPLATE_WAIT_MS);
});
