// Where the ms of an exec `true` go, for bench/sandboxes: the same request to the spawner
// (nube-helper serve) with and without the parts the runtime adds: joining the sandbox's cgroups
// (memory, cpu, freezer on v1; each join is a cgroup migration, which waits for an RCU grace period
// on this kernel), the exec's own pids cgroup (mkdir, join, sweep, rmdir), `sh -c`. The API's part is
// the API row minus `runtime: exec true`.
import type { SandboxCgroup } from '../../src/areas/sandboxes/runtime/namespaces/cgroups.js';
import type { NamespacesRuntime } from '../../src/areas/sandboxes/runtime/namespaces/runtime.js';
import type { SpawnRequest, Spawner } from '../../src/areas/sandboxes/runtime/namespaces/spawner.js';

interface Internals {
  spawner: Spawner;
  running(id: string): Promise<{ init: { innerPid: number } }>;
  cg(id: string): SandboxCgroup;
}

export async function execProfile(rt: NamespacesRuntime, id: string, n: number): Promise<Record<string, number[]>> {
  const inner = rt as unknown as Internals;
  const rec = await inner.running(id);
  const cg = inner.cg(id);
  const base = { target: rec.init.innerPid, cwd: '/', env: { PATH: '/usr/bin:/bin' }, argv: ['/bin/true'] };
  const run = async (req: SpawnRequest) => {
    const t = performance.now();
    await inner.spawner.run(req, { stdout() {}, stderr() {} });
    return performance.now() - t;
  };
  const out: Record<string, number[]> = { none: [], joins: [], execCgroup: [], shell: [] };
  // Interleaved, so load from elsewhere falls on every variant alike.
  for (let i = 0; i < n; i++) {
    out.none!.push(await run({ ...base, cgroups: [], execCgroups: [] }));
    out.joins!.push(await run({ ...base, cgroups: cg.execJoin('p').cgroups, execCgroups: [] }));
    out.execCgroup!.push(await run({ ...base, ...cg.execJoin(`p${i}`) }));
    out.shell!.push(await run({ ...base, ...cg.execJoin(`q${i}`), argv: ['/bin/sh', '-c', 'true'] }));
  }
  return out;
}
