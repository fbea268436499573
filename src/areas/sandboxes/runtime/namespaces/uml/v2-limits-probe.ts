// Run inside a User-mode Linux kernel booted with only the unified (v2) cgroup hierarchy (see
// uml.ts): nube's cgroup code on a real v2 kernel whose memory, cpu and pids controllers are free,
// which this project's machines cannot offer (theirs are bound to v1). Processes enter the sandbox's
// cgroup through the real `nube-helper cg`, as a sandbox's init does. (A whole sandbox cannot run in
// Debian's UML kernel: it has no nftables inet family, which the bridge's rules use.) Prints one line:
// `NUBE-UML-RESULT <json>` with what it saw; the test on the host asserts on it.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { detectCgroups } from '../cgroups.js';
import type { CgroupV2Host, SandboxCgroupV2 } from '../cgroups-v2.js';

const helper = process.env.NUBE_HELPER!;
const out: Record<string, unknown> = {};

/** `argv` inside the cgroup dir(s), through the helper, as the sandbox's init and /bg processes go. */
function inCgroup(dirs: string[], argv: string[], timeoutMs = 30_000) {
  const r = spawnSync(helper, ['cg', ...dirs, '--', ...argv], { timeout: timeoutMs, encoding: 'utf8' });
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

async function main() {
  out.kernel = (await readFile('/proc/sys/kernel/osrelease', 'utf8')).trim();
  const host = detectCgroups('nube') as CgroupV2Host;
  out.version = host.version;
  out.root = host.version === 2 ? host.root : null;
  await host.prepare();
  out.rootSubtree = (await readFile(`${host.root}/cgroup.subtree_control`, 'utf8')).trim();
  out.parentSubtree = (await readFile(`${host.parentDir}/cgroup.subtree_control`, 'utf8')).trim();
  const sb = host.sandbox('sbx-uml') as SandboxCgroupV2;
  await sb.create({ memoryMb: 64, cpus: 0.5, pids: 32 });
  const f = (name: string) => readFile(`${sb.dir}/${name}`, 'utf8').then((s) => s.trim(), () => null);
  out.files = { memoryMax: await f('memory.max'), swapMax: await f('memory.swap.max'), cpuMax: await f('cpu.max'), pidsMax: await f('pids.max') };

  // Memory: a 200 MiB allocation under a 64 MiB limit is OOM-killed; the kill is counted. UML runs
  // the guest in software: on a loaded 2-core host python3 alone took over 30 s to get there once.
  const hog = inCgroup(sb.dirs(), ['python3', '-c', 'a = bytearray(200 * 1024 * 1024); a[::4096] = b"x" * len(a[::4096]); print("survived")'], 150_000);
  out.memoryHog = { status: hog.status, signal: hog.signal, survived: hog.stdout.includes('survived') };

  // Pids: 100 sleeps under a limit of 32 are refused past it; the refusals are counted. The sleeps
  // outlast the loop (a slow guest once took longer than 3 s sleeps to start 32 of them; dash gives up
  // at the first refused fork), then are killed from the cgroup's own list.
  const bomb = inCgroup(sb.dirs(), ['sh', '-c', 'for i in $(seq 100); do sleep 600 </dev/null >/dev/null 2>&1 & done; echo started']);
  out.pidsBomb = { status: bomb.status, stderrForkFailures: /fork|Resource temporarily unavailable|Cannot/i.test(bomb.stderr) };
  for (let i = 0; i < 100; i++) {
    const pids = (await readFile(`${sb.dir}/cgroup.procs`, 'utf8')).split('\n').filter(Boolean);
    if (pids.length === 0) break;
    for (const pid of pids) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {} // gone in between
    }
    await new Promise((r) => setTimeout(r, 50));
  }

  // CPU: a busy second under half a core is throttled.
  const before = await f('cpu.stat');
  inCgroup(sb.dirs(), ['sh', '-c', 'end=$(( $(date +%s) + 2 )); while [ "$(date +%s)" -lt "$end" ]; do :; done']);
  const after = await f('cpu.stat');
  const field = (t: string | null, n: string) => Number(new RegExp(`^${n} (\\d+)$`, 'm').exec(t ?? '')?.[1] ?? 0);
  out.cpu = { throttledBefore: field(before, 'nr_throttled'), throttledAfter: field(after, 'nr_throttled') };
  out.stats = await sb.stats();

  // An exec cgroup beside a process in the sandbox's own cgroup: allowed, since the sandbox's cgroup
  // enables nothing for its children. The parent, which does, refuses a process (EBUSY).
  const init = spawn(helper, ['cg', ...sb.dirs(), '--', 'sleep', '60'], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 300));
  const { execCgroups } = sb.execJoin('xabc');
  await mkdir(execCgroups[0]!);
  const exec = inCgroup(execCgroups, ['sh', '-c', "grep '^0::' /proc/self/cgroup"]);
  out.execCgroup = exec.stdout.trim();
  out.parentRefuses = await writeFile(`${host.parentDir}/cgroup.procs`, String(process.pid)).then(
    () => 'accepted',
    (e: NodeJS.ErrnoException) => e.code,
  );

  // Freeze with a live process inside, thaw, then destroy (cgroup.kill) with it still there.
  await sb.freeze();
  out.frozen = /^frozen 1$/m.test(await readFile(`${sb.dir}/cgroup.events`, 'utf8'));
  await sb.thaw();
  out.thawed = /^frozen 0$/m.test(await readFile(`${sb.dir}/cgroup.events`, 'utf8'));
  await sb.destroy();
  await new Promise((r) => setTimeout(r, 200));
  out.destroyed = { dirGone: !existsSync(sb.dir), initKilled: init.exitCode !== null || init.signalCode !== null };
}

main().then(
  () => console.log(`NUBE-UML-RESULT ${JSON.stringify(out)}`),
  (e: unknown) => console.log(`NUBE-UML-RESULT ${JSON.stringify({ ...out, error: String((e as Error)?.stack ?? e) })}`),
);
