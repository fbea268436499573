// Issue 28 item 3: a launch cut by nube's own stop (SIGTERM: the shutdown ends the build's exec) left the
// machine `failed` for good ("nube-helper serve ended the exec without a status"), while kill -9 at the
// same point recovered. nube runs as a child process with real sandboxes; each round stops it in the
// middle of a launch's build, starts it again on the same data and store, and the launch must finish
// as if nothing happened: `running`, its release published, the app served, no error kept.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type NubeProcess, nubeProcess, viaPortProxy } from '../helpers/nube-process.js';
import { DIALECTS } from '../helpers/pg.js';
import { SANDBOX_ENV, TEMPLATE_WAIT_MS, TEST_ROOT } from '../sandboxes/helpers.js';
import { type SourceServer, startSourceServer, tarGz } from './source-server.js';

/** A build long enough to be cut (the stop's grace is shorter), then an app that answers its version. */
const app = (version: string) =>
  tarGz({
    'nube.json': JSON.stringify({ build: `echo building ${version}; sleep 6; echo built ${version}`, start: `exec python3 -m http.server "$PORT" --bind 0.0.0.0` }),
    'index.html': `hello ${version}`,
  });

describe.each(DIALECTS)('%s: a launch survives SIGTERM and kill -9 of nube', (dialect) => {
  let n: NubeProcess;
  let src: SourceServer;
  let machineId = '';
  let sandboxId = '';

  beforeAll(async () => {
    src = await startSourceServer();
    src.put('/v1.tar.gz', app('v1'));
    src.put('/v2.tar.gz', app('v2'));
    n = await nubeProcess(dialect, `${TEST_ROOT}/machines-kill-${dialect}-${process.pid}`, {
      ...SANDBOX_ENV,
      NUBE_OUTBOUND_ALLOW: '127.0.0.1/32',
      // The stop waits this long for running jobs, then cuts them: shorter than the build.
      NUBE_SHUTDOWN_GRACE_MS: '1000',
    });
    await n.start();
  }, TEMPLATE_WAIT_MS);
  afterAll(async () => {
    if (n && !n.running) await n.start().catch(() => {});
    if (machineId) await n.call('DELETE', `/machines/${machineId}`).catch(() => {});
    await n?.close();
    await src?.close();
  }, 180_000);

  /** Starts a launch (its request is cut with nube) and waits until its build runs. */
  async function launchUntilBuilding(body: Record<string, unknown>): Promise<void> {
    void n.call('POST', '/machines/launch', body).catch(() => {});
    const end = Date.now() + 300_000;
    for (;;) {
      const ms = (await n.call('GET', '/machines')).body.machines as { id: string; sandboxId: string; phase: string | null }[];
      const m = ms.find((x) => x.phase === 'building');
      if (m) {
        machineId = m.id;
        sandboxId = m.sandboxId;
        // Into the build's sleep: the exec is running when the signal comes.
        await new Promise((r) => setTimeout(r, 1500));
        return;
      }
      if (Date.now() > end) throw new Error(`no launch reached its build: ${JSON.stringify(ms)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON
  async function settled(ms: number): Promise<any> {
    const end = Date.now() + ms;
    for (;;) {
      const g = (await n.call('GET', `/machines/${machineId}`)).body;
      if (g.phase === null && g.status !== 'building' && g.status !== 'provisioning') return g;
      if (Date.now() > end) throw new Error(`the launch did not finish: ${JSON.stringify(g)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  it('SIGTERM mid-build: the launch runs again after the restart and the machine runs, not `failed`', async () => {
    await launchUntilBuilding({ archiveUrl: `${src.base}/v1.tar.gz`, name: 'sigterm' });
    await n.stop('SIGTERM');
    await n.start();
    const g = await settled(240_000);
    expect(g, JSON.stringify(g)).toMatchObject({ status: 'running', phase: null, lastError: null });
    expect(g.currentReleaseId).not.toBeNull();
    const rel = (await n.call('GET', `/machines/${machineId}/releases`)).body.releases;
    expect(rel.map((r: { source: string }) => r.source)).toEqual(['recovery']);
    expect(await viaPortProxy(n, g.url)).toBe('hello v1');
    // The build's log shows it ran again to the end.
    const logs = (await n.call('GET', `/machines/${machineId}/logs?grep=[build]&lines=100`)).body.lines.join('\n');
    expect(logs).toContain('[build] built v1');
  }, 600_000);

  it('kill -9 mid-build of a redeploy: resumed at once on restart (not after the job lease), serving the new version', async () => {
    await launchUntilBuilding({ sandboxId, archiveUrl: `${src.base}/v2.tar.gz` });
    await n.stop('SIGKILL');
    await n.start();
    const t0 = Date.now();
    const g = await settled(240_000);
    // The launch job's lease is 60 s: waiting it out would take longer than the build (6 s) plus a start.
    expect(Date.now() - t0).toBeLessThan(45_000);
    expect(g, JSON.stringify(g)).toMatchObject({ status: 'running', phase: null, lastError: null });
    expect(await viaPortProxy(n, g.url)).toBe('hello v2');
    const rel = (await n.call('GET', `/machines/${machineId}/releases`)).body.releases;
    expect(rel.map((r: { source: string }) => r.source)).toEqual(['launch', 'recovery']);
  }, 600_000);

  it('SIGTERM while the app runs and no job is in flight: the machine keeps serving and stays `running`', async () => {
    await n.stop('SIGTERM');
    await n.start();
    const g = (await n.call('GET', `/machines/${machineId}`)).body;
    expect(g).toMatchObject({ status: 'running', lastError: null });
    expect(await viaPortProxy(n, g.url)).toBe('hello v2');
  }, 600_000);
});
