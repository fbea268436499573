// Security through the API: another owner's sandbox is absent on every route; from inside, the host's
// files are out of reach; plan limits on session length.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, startSandboxNube, stopSandboxNube } from './helpers.js';

let t: SandboxNube;
let id: string;
let other: Record<string, string>;

describe.each(DRIVERS)('%s: sandboxes isolation through the API', (driver) => {
  beforeAll(async () => {
    t = await startSandboxNube('isolation', { NUBE_SANDBOX_DRIVER: driver });
    const c = await t.call('POST', '/sandboxes', { timeoutSeconds: 300 });
    expect(c.status).toBe(200);
    id = c.body.id;
    const acct = await t.nube.services.account.createAccount({ name: 'intruder', plan: 'byte' });
    other = { authorization: `Bearer ${acct.secret}` };
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it("another owner's sandbox is 404 on every route and never listed", async () => {
    const s = `/sandboxes/${id}`;
    const calls: [string, string, unknown?][] = [
      ['GET', s],
      ['DELETE', s],
      ['POST', `${s}/exec`, { command: 'true' }],
      ['POST', `${s}/run-code`, { code: 'print(1)' }],
      ['GET', `${s}/bg`],
      ['POST', `${s}/bg`, { command: 'true' }],
      ['GET', `${s}/bg/bg_00`],
      ['DELETE', `${s}/bg/bg_00`],
      ['POST', `${s}/files/read`, { path: '/etc/hostname' }],
      ['GET', `${s}/files/list?path=/`],
      ...['extend', 'suspend', 'resume', 'snapshot', 'fork', 'logs', 'runtime', 'kernel-restart', 'expose-raw', 'ssh-enable'].map(
        (a): [string, string, unknown?] => ['POST', `${s}/${a}`, a === 'expose-raw' ? { port: 1 } : undefined],
      ),
      ['POST', `${s}/expose`, { port: 80 }],
      ['POST', `${s}/template-snapshot`, { key: 'k', hash: 'h' }],
      ['POST', `${s}/network-policy`, { internet: true }],
      ['POST', `${s}/apply-patch`, { patch: 'x' }],
      ['POST', `${s}/run-cell`, { code: '1' }],
      ['POST', `${s}/idle`, { suspendOnIdle: false }],
      ['POST', `${s}/bootstrap`, { script: 'true' }],
    ];
    for (const [method, path, body] of calls) {
      const r = await t.call(method, path, body, other);
      expect(r.status, `${method} ${path}`).toBe(404);
    }
    expect((await t.call('GET', '/sandboxes', undefined, other)).body.sandboxes).toEqual([]);
    // Still there and untouched for its owner.
    expect((await t.call('GET', s)).body.status).toBe('running');
  });

  it("another owner's derived template is 404", async () => {
    const d = await t.call('POST', `/sandboxes/${id}/template-snapshot`, { key: 'iso', hash: 'h1' });
    expect(d.status).toBe(200);
    expect((await t.call('GET', `/template-snapshots/${d.body.id}`, undefined, other)).status).toBe(404);
    expect((await t.call('DELETE', `/template-snapshots/${d.body.id}`, undefined, other)).status).toBe(404);
    expect((await t.call('GET', '/template-snapshots?key=iso&hash=h1', undefined, other)).status).toBe(404);
    const c = await t.call('POST', '/sandboxes', { templateKey: 'iso', templateHash: 'h1' }, other);
    expect(c.body.code).toBe('DerivedTemplateNotProvisioned');
    expect((await t.call('DELETE', `/template-snapshots/${d.body.id}`)).body).toEqual({ ok: true });
  });

  it("exec cannot read the host's files", async () => {
    const e = await t.call('POST', `/sandboxes/${id}/exec`, {
      command: 'cat /etc/shadow | grep -c "^root:"; ls /work/main 2>&1; ls /root/.. | head -3; cat /proc/1/cmdline | tr "\\0" " "',
    });
    expect(e.status).toBe(200);
    // The sandbox's own /etc/shadow (Debian's) is what it sees, never the host's; /work does not exist.
    const host = await import('node:fs').then((fs) => fs.readFileSync('/etc/shadow', 'utf8'));
    expect(e.body.stdout).not.toContain(host.split('\n')[0]);
    expect(e.body.stdout).toContain('No such file or directory');
    expect(e.body.stdout).not.toContain('package.json');
    // pid 1 is the sandbox's own init: bwrap's `sleep infinity` for namespaces, nube's exec agent for gVisor.
    expect(e.body.stdout).toContain(driver === 'gvisor' ? '/.nube/nube-agent' : 'sleep infinity');
    const r = await t.call('POST', `/sandboxes/${id}/files/read`, { path: '/work/main/package.json' });
    expect(r.status).toBe(404);
    const up = await t.call('POST', `/sandboxes/${id}/files/read`, { path: '../../../../work/main/package.json' });
    expect(up.status).toBe(404);
  });

  it('root inside is not root outside: writing /proc/sys or mounting fails', async () => {
    const e = await t.call('POST', `/sandboxes/${id}/exec`, {
      command: 'echo 1 > /proc/sys/kernel/sysrq 2>/dev/null && echo wrote || echo denied; mount -t tmpfs x /mnt 2>/dev/null && echo mounted || echo denied',
    });
    expect(e.body.stdout).toBe('denied\ndenied\n');
  });

  it('session length is capped by the plan (402), bad input is 400', async () => {
    const tooLong = await t.call('POST', '/sandboxes', { timeoutSeconds: 3601 }, other);
    expect(tooLong.status).toBe(402);
    expect(tooLong.body.code).toBe('SessionTooLong');
    expect((await t.call('POST', '/sandboxes', { timeoutSeconds: 0 })).status).toBe(400);
    expect((await t.call('POST', '/sandboxes', { timeoutSeconds: 1.5 })).status).toBe(400);
    expect((await t.call('POST', '/sandboxes', { template: 'nope' })).status).toBe(400);
    expect((await t.call('POST', '/sandboxes', { templateKey: 'a' })).status).toBe(400);
    expect((await t.call('POST', `/sandboxes/${id}/extend`, { extendSeconds: 3600 }, other)).status).toBe(404);
  });
});
