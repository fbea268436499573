import { createServer, type Server } from 'node:http';
import { lookup } from 'node:dns/promises';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanup, DRIVERS, TEST_BRIDGE, testRuntime, uniqueId } from './test-env.js';

describe.each(DRIVERS)('%s runtime: isolation', (driver) => {
  const { runtime, dataDir } = testRuntime('security', {}, driver);
  const id = uniqueId('sec');
  const HOST_IP = TEST_BRIDGE.cidr.split('/')[0];
  let server: Server;
  let port = 0;

  beforeAll(async () => {
    await runtime.ensureTemplate('base', (l) => console.log(l));
    await runtime.create({ id, limits: { memoryMb: 128, pids: 64, cpus: 0.5 } });
    // A service on the host's bridge address: the sandbox must not reach it.
    server = createServer((_req, res) => res.end('host secret'));
    await new Promise<void>((r) => server.listen(0, HOST_IP, () => r()));
    port = (server.address() as { port: number }).port;
  }, 900_000);
  afterAll(async () => {
    server?.close();
    await cleanup(runtime, dataDir);
  }, 60_000);

  it("keeps the host's files out of reach", async () => {
    const r = await runtime.exec(id, 'ls /work/main 2>&1; ls -A /root; cat /etc/shadow | head -1 | cut -d: -f1');
    expect(r.stdout).toContain('No such file or directory');
    expect(r.stdout).not.toContain('package.json');
    expect(r.stdout).not.toContain('.gitconfig');
    const hostShadow = await readFile('/etc/shadow', 'utf8');
    const inside = await runtime.exec(id, 'cat /etc/shadow');
    expect(inside.stdout).not.toBe(hostShadow);
    // pid 1 is the sandbox's own init: bwrap for namespaces, the exec agent (nube-agent) for gVisor.
    const init = driver === 'gvisor' ? '/.nube/nube-agent' : 'bwrap';
    expect((await runtime.exec(id, 'cat /proc/1/cmdline | tr "\\0" " "')).stdout).toContain(init);
    // Only the sandbox's own processes; on gVisor the agent's are apart: pid 1, the agent, the worker
    // serving this command and the parked one with its prepared command (all named nube-agent).
    const ps = (await runtime.exec(id, 'ps -e --no-headers -o comm=')).stdout.trim().split('\n');
    expect(ps.filter((c) => c !== 'nube-agent').length).toBeLessThanOrEqual(6);
    expect(ps.filter((c) => c === 'nube-agent').length).toBeLessThanOrEqual(driver === 'gvisor' ? 5 : 0);
  });

  it('cannot write outside its own tree or change the host', async () => {
    const swappiness = (await readFile('/proc/sys/vm/swappiness', 'utf8')).trim();
    const r = await runtime.exec(
      id,
      `hostname evil 2>&1; mount -t tmpfs none /mnt 2>&1; echo ${Number(swappiness) + 1} > /proc/sys/vm/swappiness 2>&1; ` +
        'unshare -U true 2>&1; touch /usr/bin/planted && echo planted-in-overlay',
    );
    expect(r.stdout).toContain('planted-in-overlay'); // root inside may change its own copy-on-write root
    expect(hostname()).not.toBe('evil');
    expect((await readFile('/proc/sys/vm/swappiness', 'utf8')).trim()).toBe(swappiness);
    expect(r.stdout).toMatch(/mount: .*(permission denied|not permitted)/i);
    expect(r.stdout).toMatch(/unshare.*not permitted/i);
    const tmpl = (await runtime.get(id))!;
    const { existsSync } = await import('node:fs');
    expect(existsSync(`${dataDir}/../templates/base/${tmpl.templateBuild}/rootfs/usr/bin/planted`)).toBe(false);
  });

  it('root inside is an unprivileged uid outside', async () => {
    await runtime.startBackground(id, 'exec sleep 300');
    await new Promise((r) => setTimeout(r, 100));
    const pid = await runtime.initPid(id);
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    expect(status).toMatch(/^Uid:\s+100000\s+100000\s+100000\s+100000$/m);
    expect(status).toMatch(/^Seccomp:\s+2$/m);
    const uidMap = await readFile(`/proc/${pid}/uid_map`, 'utf8');
    expect(uidMap.trim().split(/\s+/)).toEqual(['0', '100000', '65536']);
  });

  it("cannot reach the host's loopback services, the bridge address or private ranges", async () => {
    const probe = (target: string) =>
      runtime.exec(id, `curl -sS -m 3 -o /dev/null -w '%{http_code}' ${target} 2>&1; echo " rc=$?"`);
    const pg = await runtime.exec(id, 'timeout 3 bash -c "echo > /dev/tcp/127.0.0.1/5432" 2>&1; echo rc=$?');
    expect(pg.stdout).toMatch(/rc=1/);
    const bridge = await probe(`http://${HOST_IP}:${port}/`);
    // The status code curl reports (the port number in its error message may well contain 200).
    expect(bridge.stdout).not.toMatch(/^200 rc=/m);
    expect(bridge.stdout).not.toMatch(/rc=0$/m);
    const meta = await probe('http://169.254.169.254/');
    expect(meta.stdout).not.toMatch(/ rc=0/);
    // The host itself answers on that address (so the failure above is the policy, not a dead server).
    const res = await fetch(`http://${HOST_IP}:${port}/`);
    expect(await res.text()).toBe('host secret');
  });

  it('network policy: reaches the outside by default, deny by domain and allow apply live', async () => {
    const get = async () =>
      (await runtime.exec(id, "curl -sS -m 5 -o /dev/null -w '%{http_code}' http://deb.debian.org/debian/dists/bookworm/Release 2>&1")).stdout;
    // Where it should get through, up to five tries 3 s apart: in the full suite (only there, on two
    // machines, the gVisor variant) every lookup from inside failed for a while ("could not resolve
    // host") and worked again a minute later; the cause is not found yet, so a failure says what the
    // sandbox and the host saw then.
    const get200 = async () => {
      let code = '';
      for (let i = 0; i < 5 && code !== '200'; i++) {
        if (i > 0) await new Promise((r) => setTimeout(r, 3000));
        code = await get();
      }
      if (code === '200') return code;
      const inside = await runtime.exec(id, 'cat /etc/resolv.conf; getent ahosts deb.debian.org || echo "getent: $?"; ip route 2>&1 | head -3', { timeoutMs: 20_000 });
      const host = await lookup('deb.debian.org').then((a) => a.address, (e: Error) => e.message);
      const policy = await runtime.describeNetworkPolicy(id).catch((e: Error) => e.message);
      return `${code}\ninside: ${inside.stdout}${inside.stderr}\nhost resolves deb.debian.org: ${host}\npolicy: ${policy}`;
    };
    expect(await get200()).toBe('200');
    await runtime.setNetworkPolicy(id, { deny: ['deb.debian.org'] });
    expect(await runtime.describeNetworkPolicy(id)).toMatch(/203\.0\.113\.80/);
    expect(await get()).not.toBe('200');
    await runtime.setNetworkPolicy(id, { deny: ['0.0.0.0/0'], allow: ['deb.debian.org'] });
    expect(await get200()).toBe('200');
    await runtime.setNetworkPolicy(id, { deny: ['0.0.0.0/0'] });
    expect(await get()).not.toBe('200');
    await runtime.setNetworkPolicy(id, {});
    expect(await get200()).toBe('200');
    await expect(runtime.setNetworkPolicy(id, { allow: ['not a domain!'] })).rejects.toMatchObject({
      code: 'InvalidInput',
    });
  }, 180_000);

  it('a fork bomb stops at the pids limit, a memory hog at the memory limit; others unharmed', async () => {
    const other = uniqueId('oth');
    await runtime.create({ id: other });
    const before = await runtime.initPid(id);
    await runtime.exec(id, 'echo kept > /root/kept');
    const bomb = await runtime.exec(id, 'bomb() { bomb | bomb & }; bomb; sleep 2; echo done', { timeoutMs: 8000 });
    // The bomb ends: its exec returns (deadline 8 s, then the group and the exec cgroup are killed). The
    // bound only says "it did not hang": it took 28 s under gVisor on a machine slow at creating processes.
    expect(bomb.durationMs).toBeLessThan(120_000);
    if (driver === 'namespaces') {
      const stats = await runtime.cgroupStats(id);
      expect(stats.pids).toBeLessThanOrEqual(64);
    }
    expect((await runtime.exec(other, 'echo alive')).stdout).toBe('alive\n');
    await runtime.exec(id, 'true'); // the exec's own cgroup was swept: the sandbox works again
    if (driver === 'gvisor') {
      // gVisor (Debian's runsc) has no pids controller: past the host cgroup's thread cap either the
      // sentry ends (a thread it needed was refused; the next call starts the sandbox again on its
      // files) or it refuses the bomb's forks and lives on (a stub process it needed was refused).
      // Which comes first is a race: both were seen on one machine, with the dynamic and the static sh
      // (docs/decisions.md). Either way the bomb is gone, the sandbox answers, its files are kept.
      const after = await runtime.initPid(id);
      expect(after).toBeTruthy();
      if (after === before) expect(Number((await runtime.exec(id, 'ps -e --no-headers | wc -l')).stdout)).toBeLessThan(10);
      expect((await runtime.exec(id, 'cat /root/kept')).stdout).toBe('kept\n');
    }
    const hog = await runtime.exec(id, "python3 -c \"b = bytearray(512 * 1024 * 1024); print('allocated')\"");
    expect(hog.stdout).not.toContain('allocated');
    expect(hog.exitCode).not.toBe(0);
    if (driver === 'namespaces') expect((await runtime.cgroupStats(id)).oomKills).toBeGreaterThan(0);
    else expect(hog.stderr).toContain('the sandbox ended during this command');
    expect((await runtime.exec(other, 'echo still alive')).stdout).toBe('still alive\n');
    expect((await runtime.exec(id, 'echo recovered')).stdout).toBe('recovered\n');
    await runtime.destroy(other);
  }, 300_000);
});
