// favordynmods (cgroup-tuning.ts): the driver turns it on, keeping the cgroup2 mount's other options,
// and with it a task joins a cgroup without waiting for an RCU grace period.
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { cgroup2Mount, remountArgs } from './cgroup-tuning.js';
import { detectCgroups } from './cgroups.js';
import { cleanup, percentile, testRuntime, uniqueId } from './test-env.js';

describe('cgroup favordynmods', () => {
  it('finds the cgroup2 mount and remounts it with its own options plus favordynmods', () => {
    const mounts = [
      'tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0',
      'cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0',
      'cgroup2 /sys/fs/cgroup/uni\\040fied cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0',
    ].join('\n');
    const m = cgroup2Mount(mounts);
    expect(m).toEqual({ path: '/sys/fs/cgroup/uni fied', options: ['rw', 'nosuid', 'nodev', 'noexec', 'relatime', 'nsdelegate', 'memory_recursiveprot'] });
    // A cgroup2 remount resets the flags it is not given: nsdelegate and memory_recursiveprot stay.
    expect(remountArgs(m!)).toEqual(['-o', 'remount,rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot,favordynmods', '/sys/fs/cgroup/uni fied']);
    expect(cgroup2Mount('cgroup /sys/fs/cgroup/pids cgroup rw,pids 0 0')).toBeNull();
  });

  const { runtime, dataDir } = testRuntime('cgroup-tuning');
  afterAll(() => cleanup(runtime, dataDir), 60_000);

  it('the driver turns it on when it starts; a task then joins a cgroup in well under a grace period', async () => {
    await runtime.checkHost();
    const before = cgroup2Mount(readFileSync('/proc/self/mounts', 'utf8'));
    if (!before) return; // a host without a cgroup2 mount: nothing to turn on (doctor warns)
    expect(runtime.cgroupTuning).toMatch(/^favordynmods (already on|turned on)/);
    expect(before.options).toContain('favordynmods');
    // Joins after a pause, as a sandbox start makes them: 7.6-16 ms each without it here, 0.4 ms with.
    const cg = detectCgroups('nube-test').sandbox(uniqueId('tune'));
    await cg.create({ memoryMb: 64, cpus: 1, pids: 16 });
    const times: number[] = [];
    try {
      for (let i = 0; i < 7; i++) {
        const child = spawn('sleep', ['5']);
        await new Promise((r) => setTimeout(r, 150));
        const t = performance.now();
        for (const dir of cg.dirs()) writeFileSync(`${dir}/cgroup.procs`, String(child.pid));
        times.push(performance.now() - t);
        child.kill('SIGKILL');
      }
    } finally {
      await cg.destroy();
    }
    expect(percentile(times, 50)).toBeLessThan(4);
  });
});
