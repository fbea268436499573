// Which hierarchy a host gets, from its /proc/self/mountinfo (lines as the kernel writes them) and
// the controllers its v2 root offers (a directory shaped like the v2 root stands in for it).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { SandboxRuntimeError } from '../driver.js';
import { cgroupMounts, detectCgroups } from './cgroups.js';
import { CgroupV1Host } from './cgroups-v1.js';
import { CgroupV2Host } from './cgroups-v2.js';

const dir = mkdtempSync(`${tmpdir()}/nube-cgroups-`);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A v2 root offering these controllers. */
function v2Root(name: string, controllers: string): string {
  const root = `${dir}/${name}`;
  mkdirSync(root, { recursive: true });
  writeFileSync(`${root}/cgroup.controllers`, `${controllers}\n`);
  return root;
}

const line = (n: number, path: string, type: string, opts: string) =>
  `${n} 31 0:${n} / ${path} rw,nosuid,nodev,noexec,relatime shared:${n} - ${type} ${type} ${opts}`;

/** This project's machines: every controller in v1, v2 beside them with hugetlb only. */
function hybrid(unified: string): string {
  return [
    '23 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw',
    '31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755',
    ...['cpu', 'cpuacct', 'cpuset', 'memory', 'devices', 'freezer', 'blkio', 'pids'].map((c, i) =>
      line(32 + i, `/sys/fs/cgroup/${c}`, 'cgroup', `rw,${c}`),
    ),
    line(40, '/sys/fs/cgroup/systemd', 'cgroup', 'rw,name=systemd'),
    line(41, unified, 'cgroup2', 'rw'),
  ].join('\n');
}

describe('cgroup hierarchy detection', () => {
  it('a host with the v1 controllers (and v2 holding only hugetlb) uses v1, at their mount points', () => {
    const host = detectCgroups('nube', 'auto', hybrid(v2Root('hybrid', 'hugetlb')));
    expect(host).toBeInstanceOf(CgroupV1Host);
    expect((host as CgroupV1Host).mounts).toEqual({
      memory: '/sys/fs/cgroup/memory',
      cpu: '/sys/fs/cgroup/cpu',
      pids: '/sys/fs/cgroup/pids',
      freezer: '/sys/fs/cgroup/freezer',
    });
  });

  it("Debian 12's default, the unified hierarchy alone at /sys/fs/cgroup, uses v2", () => {
    const root = v2Root('unified', 'cpuset cpu io memory hugetlb pids rdma misc');
    const host = detectCgroups('nube', 'auto', line(30, root, 'cgroup2', 'rw,nsdelegate,memory_recursiveprot'));
    expect(host).toBeInstanceOf(CgroupV2Host);
    expect((host as CgroupV2Host).parentDir).toBe(`${root}/nube`);
  });

  it('co-mounted v1 controllers (cpu,cpuacct) are found by their options, not their directory name', () => {
    const text = [
      line(32, '/sys/fs/cgroup/cpu,cpuacct', 'cgroup', 'rw,cpu,cpuacct'),
      line(33, '/sys/fs/cgroup/memory', 'cgroup', 'rw,memory'),
      line(34, '/sys/fs/cgroup/pids', 'cgroup', 'rw,pids'),
      line(35, '/sys/fs/cgroup/freezer', 'cgroup', 'rw,freezer'),
    ].join('\n');
    expect((detectCgroups('nube', 'auto', text) as CgroupV1Host).mounts.cpu).toBe('/sys/fs/cgroup/cpu,cpuacct');
    expect(cgroupMounts(text).map((m) => m.type)).toEqual(['cgroup', 'cgroup', 'cgroup', 'cgroup']);
  });

  it('neither hierarchy complete: HostUnsupported naming what each offers and lacks', () => {
    const root = v2Root('poor', 'hugetlb');
    const text = [line(30, root, 'cgroup2', 'rw'), line(31, '/sys/fs/cgroup/memory', 'cgroup', 'rw,memory')].join('\n');
    let err: unknown;
    try {
      detectCgroups('nube', 'auto', text);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SandboxRuntimeError);
    expect(err).toMatchObject({ code: 'HostUnsupported' });
    const msg = (err as Error).message;
    expect(msg).toContain(`cgroup v2 at ${root} offers hugetlb (missing memory, cpu, pids)`);
    expect(msg).toContain('cgroup v1 has memory (missing cpu, pids, freezer)');
    // A v2 host booted without the memory controller, nothing in v1.
    const noMem = v2Root('nomem', 'cpu io pids');
    expect(() => detectCgroups('nube', 'auto', line(30, noMem, 'cgroup2', 'rw'))).toThrow(
      /offers cpu, io, pids \(missing memory\); no cgroup v1 controller is mounted/,
    );
  });

  it('NUBE_SANDBOX_CGROUPS=v1 or v2 takes that hierarchy or names what it lacks', () => {
    const hybridText = hybrid(v2Root('forced', 'hugetlb'));
    expect(detectCgroups('nube', 'v1', hybridText)).toBeInstanceOf(CgroupV1Host);
    expect(() => detectCgroups('nube', 'v2', hybridText)).toThrow(
      new RegExp(`in cgroup v2 \\(NUBE_SANDBOX_CGROUPS=v2\\): cgroup v2 at ${dir}/forced offers hugetlb \\(missing memory, cpu, pids\\)\\. `),
    );
    const full = line(30, v2Root('full', 'cpu memory pids'), 'cgroup2', 'rw');
    expect(detectCgroups('nube', 'v2', full)).toBeInstanceOf(CgroupV2Host);
    expect(() => detectCgroups('nube', 'v1', full)).toThrow(/\(NUBE_SANDBOX_CGROUPS=v1\): no cgroup v1 controller is mounted\./);
  });
});
