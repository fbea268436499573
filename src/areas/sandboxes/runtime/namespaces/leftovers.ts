// What a stopped nube leaves on the host, and removing it (issue 28 item 7). nube leaves its store
// mounted, its bridge, nft table, cgroup parent and run dir in place when it stops, on purpose:
// sandboxes outlive it, and the next start finds them. `nube doctor` lists these parts with who still
// needs each; `nube cleanup` removes those nobody needs. Read-only until `clean` is called, and never
// creates anything (no runtime is started: its start would make the very parts this removes).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { CgroupHost } from './cgroup-host.js';
import { killAll, readPids, removeTree } from './cgroup-fs.js';
import type { CgroupV1Host } from './cgroups-v1.js';
import type { CgroupV2Host } from './cgroups-v2.js';
import { detectCgroups } from './cgroups.js';
import { type HostUser, liveHostUsers } from './host-users.js';
import { initAlive, stopInit, unmountRootfs } from './launch.js';
import { type BridgeConfig, BridgeNetwork } from './network.js';
import { run } from './proc.js';
import { DEFAULT_RUN_ROOT, Layout, loadAllRecords, type SandboxRecord } from './state.js';
import { closeStore, mountOptions, storePaths } from './store.js';

export interface LeftoverOptions {
  /** The driver's data dir (`$NUBE_DATA_DIR/sandbox-runtime`). */
  dataDir: string;
  runRoot?: string;
  bridge: BridgeConfig;
  cgroupParent: string;
  cgroupVersion?: 'auto' | 'v1' | 'v2';
  /** Where the address leases live (tests); default /run/nube-net. */
  leaseRoot?: string;
}

export type LeftoverKind = 'store' | 'sandbox' | 'leases' | 'run-dir' | 'bridge' | 'nft-table' | 'cgroups';

export interface Leftover {
  kind: LeftoverKind;
  /** What it is, one line. */
  what: string;
  /** Who still needs it (`sandbox sb-x`, `nube 1234 on /data/sandbox-runtime`); empty: nobody. */
  neededBy: string[];
}

export interface LeftoverScan {
  /** nube processes running on this data dir now. */
  nubes: HostUser[];
  /** This data dir's sandboxes whose processes still run (they outlived nube). */
  alive: string[];
  items: Leftover[];
}

const LEASE_ROOT = '/run/nube-net';

interface Found {
  scan: LeftoverScan;
  records: SandboxRecord[];
  layout: Layout;
  network: BridgeNetwork;
  cgroups: CgroupHost | null;
  users: HostUser[];
  /** Lease indexes of this data dir, with the sandbox id each is for. */
  leases: { idx: number; id: string }[];
  storeMounted: boolean;
}

const pidsOf = (us: HostUser[]) => us.map((u) => `nube ${u.pid} on ${u.dataDir}`);

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** Where nube's parent cgroup is in each hierarchy (one for v2, one per controller for v1). */
function parentDirs(host: CgroupHost): string[] {
  if (host.version === 2) return [(host as CgroupV2Host).parentDir];
  const h = host as CgroupV1Host;
  return [...new Set([...Object.values(h.mounts), ...(h.cpuacct ? [h.cpuacct] : [])])].map((m) => `${m}/${h.parent}`);
}

async function mountsUnder(dir: string): Promise<string[]> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  return text
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((p) => p.startsWith(`${dir}/`));
}

async function find(o: LeftoverOptions): Promise<Found> {
  const dataDir = resolve(o.dataDir);
  const runRoot = o.runRoot ?? DEFAULT_RUN_ROOT;
  const layout = new Layout(dataDir, runRoot);
  const { image, mount } = storePaths(dataDir);
  const storeOpts = await mountOptions(mount);
  // Sandboxes live in the store when there is an image (unreadable while it is unmounted: then none of
  // them can run either), else in the data dir itself.
  if (existsSync(image)) layout.useStore(mount);
  const records = existsSync(image) && !storeOpts ? [] : await loadAllRecords(layout);
  const aliveSet = new Set<string>();
  for (const r of records) if (await initAlive(r)) aliveSet.add(r.id);
  const alive = [...aliveSet];
  const users = await liveHostUsers(runRoot);
  const nubes = users.filter((u) => u.dataDir === dataDir);
  const onThisDir = [...alive.map((id) => `sandbox ${id}`), ...pidsOf(nubes)];
  const items: Leftover[] = [];

  if (storeOpts) {
    const source = (await readFile('/proc/self/mountinfo', 'utf8'))
      .split('\n')
      .map((l) => l.split(' '))
      .find((f) => f[4] === mount);
    const dev = source ? source[source.indexOf('-') + 2] : '?';
    items.push({ kind: 'store', what: `sandbox store ${image} loop-mounted at ${mount} (${dev})`, neededBy: onThisDir });
  }

  const network = new BridgeNetwork(o.bridge, null);
  const leaseDir = `${o.leaseRoot ?? LEASE_ROOT}/${o.bridge.name}`;
  const leases: { idx: number; id: string }[] = [];
  for (const n of listDir(leaseDir)) {
    if (!/^\d+$/.test(n)) continue;
    const owner = (() => {
      try {
        return readFileSync(`${leaseDir}/${n}/owner`, 'utf8');
      } catch {
        return '';
      }
    })();
    if (owner.startsWith(`${dataDir}:`)) leases.push({ idx: Number(n), id: owner.slice(dataDir.length + 1) });
  }

  let cgroups: CgroupHost | null = null;
  try {
    cgroups = detectCgroups(o.cgroupParent, o.cgroupVersion);
  } catch {
    cgroups = null;
  }

  // A sandbox whose processes are gone but whose host parts are still there (killed, or the host
  // parts of one nube stopped in the middle of a stop): its files stay, nube starts it again.
  const netnsDir = listDir('/run/netns');
  const mountPoints = new Set((await readFile('/proc/self/mountinfo', 'utf8')).split('\n').map((l) => l.split(' ')[4]));
  for (const r of records) {
    if (aliveSet.has(r.id)) continue;
    const p = layout.sandbox(r.id);
    const parts: string[] = [];
    if (mountPoints.has(p.merged) || mountPoints.has(p.legacyMerged)) parts.push('its overlay mount');
    if (netnsDir.includes(`nb-${r.id}`)) parts.push(`netns nb-${r.id}`);
    if (existsSync(`/sys/class/net/${network.names(r.leaseIdx).veth}`)) parts.push(`veth ${network.names(r.leaseIdx).veth}`);
    if (cgroups?.sandbox(r.id).dirs().some((d) => existsSync(d))) parts.push('its cgroups');
    if (parts.length) {
      items.push({
        kind: 'sandbox',
        what: `sandbox ${r.id} (${r.state}, its processes are gone): ${parts.join(', ')}`,
        neededBy: pidsOf(nubes),
      });
    }
  }

  const deadLeases = leases.filter((l) => !aliveSet.has(l.id));
  if (deadLeases.length) {
    items.push({
      kind: 'leases',
      what: `${deadLeases.length} address lease(s) of this data dir's stopped sandboxes in ${leaseDir} (nube takes them again when it starts)`,
      neededBy: pidsOf(nubes),
    });
  }

  if (existsSync(layout.runDir)) {
    items.push({
      kind: 'run-dir',
      what: `run dir ${layout.runDir} (mount points of this data dir's sandboxes; ${listDir(layout.runDir).length} entr${listDir(layout.runDir).length === 1 ? 'y' : 'ies'})`,
      neededBy: onThisDir,
    });
  }

  // Shared by every nube on the host configured with the same bridge: needed while any of them runs
  // or any sandbox (of any data dir) is plugged into it.
  const bridgeUsers = pidsOf(users.filter((u) => u.bridge === o.bridge.name));
  const plugged = listDir(`/sys/class/net/${o.bridge.name}/brif`).map((i) => `interface ${i} (a running sandbox's)`);
  if (existsSync(`/sys/class/net/${o.bridge.name}`)) {
    items.push({ kind: 'bridge', what: `bridge ${o.bridge.name} (${network.subnet})`, neededBy: [...bridgeUsers, ...plugged] });
  }
  if ((await run('nft', ['list', 'table', 'inet', network.table], { allowFailure: true }).catch(() => ({ code: 1 }))).code === 0) {
    items.push({
      kind: 'nft-table',
      what: `nft table inet ${network.table} (NAT, policies and raw ports of bridge ${o.bridge.name})`,
      neededBy: [...bridgeUsers, ...plugged],
    });
  }

  if (cgroups) {
    const dirs = parentDirs(cgroups).filter((d) => existsSync(d));
    if (dirs.length) {
      const children = new Set(dirs.flatMap((d) => readdirSync(d, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name)));
      const busy: string[] = [];
      for (const c of children) {
        const procs = (await Promise.all(cgroups.sandbox(c).dirs().map((d) => treeHasProcs(d)))).some(Boolean);
        if (procs) busy.push(`sandbox ${c}`);
      }
      const parentUsers = pidsOf(users.filter((u) => u.cgroupParent === o.cgroupParent));
      items.push({
        kind: 'cgroups',
        what: `cgroup parent ${o.cgroupParent} (v${cgroups.version}: ${dirs.join(', ')}) with ${children.size} sandbox cgroup(s), ${children.size - busy.length} empty`,
        neededBy: [...new Set([...busy, ...parentUsers])],
      });
    }
  }

  return { scan: { nubes, alive, items }, records, layout, network, cgroups, users, leases, storeMounted: !!storeOpts };
}

async function treeHasProcs(dir: string): Promise<boolean> {
  if (!existsSync(dir)) return false;
  if ((await readPids(dir)).length) return true;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory() && (await treeHasProcs(`${dir}/${e.name}`))) return true;
  }
  return false;
}

/** What a stopped nube left on the host for this data dir and configuration, with who needs each part. */
export async function findLeftovers(o: LeftoverOptions): Promise<LeftoverScan> {
  return (await find(o)).scan;
}

export interface CleanupResult {
  /** Why nothing was removed (nube runs on the data dir, or sandboxes live and no force); null: it ran. */
  refused: string | null;
  /** Sandboxes whose processes were killed (force). */
  killed: string[];
  removed: string[];
  /** Left in place because another nube or a sandbox still needs it, with which. */
  kept: string[];
  /** Removing these failed, with why. */
  failed: string[];
}

/**
 * Removes what nobody needs. Refuses while nube runs on the data dir, or while this data dir's
 * sandboxes run (unless `force`: their processes are killed; their files and records stay, and nube
 * starts them again on its next start, as after a reboot). Parts shared with other nubes (bridge,
 * nft table, cgroup parent) stay while one of them runs or a sandbox uses them.
 */
export async function cleanLeftovers(o: LeftoverOptions, opts: { force?: boolean } = {}): Promise<CleanupResult> {
  let f = await find(o);
  const out: CleanupResult = { refused: null, killed: [], removed: [], kept: [], failed: [] };
  if (f.scan.nubes.length) {
    out.refused = `nube runs on ${resolve(o.dataDir)} (${f.scan.nubes.map((u) => `pid ${u.pid}`).join(', ')}): stop it first`;
    return out;
  }
  if (f.scan.alive.length && !opts.force) {
    out.refused = `sandboxes of ${resolve(o.dataDir)} still run: ${f.scan.alive.join(', ')} (nube cleanup --force kills them; their files stay and nube starts them again)`;
    return out;
  }
  const ctx = { layout: f.layout } as Parameters<typeof unmountRootfs>[0];
  for (const r of f.records) {
    const wasAlive = f.scan.alive.includes(r.id);
    if (wasAlive) await stopInit(r);
    const cg = f.cgroups?.sandbox(r.id);
    const hadParts = f.scan.items.some((i) => i.kind === 'sandbox' && i.what.startsWith(`sandbox ${r.id} `));
    if (!wasAlive && !hadParts) continue;
    try {
      if (cg) {
        await killAll(cg.dirs().filter((d) => existsSync(d)));
        await cg.destroy();
      }
      await f.network.detach(`nb-${r.id}`, r.leaseIdx);
      await unmountRootfs(ctx, r.id);
      if (wasAlive) out.killed.push(r.id);
      else out.removed.push(`host parts of stopped sandbox ${r.id}`);
    } catch (e) {
      out.failed.push(`sandbox ${r.id}: ${(e as Error).message}`);
    }
  }
  // Looked at again: what the sandboxes held is gone now.
  f = await find(o);
  const leaseRoot = o.leaseRoot ?? LEASE_ROOT;
  for (const item of f.scan.items) {
    if (item.neededBy.length) {
      out.kept.push(`${item.what}: needed by ${item.neededBy.join(', ')}`);
      continue;
    }
    try {
      await removeItem(item, f, leaseRoot, o);
      out.removed.push(item.what);
    } catch (e) {
      out.failed.push(`${item.what}: ${(e as Error).message.trim().slice(0, 300)}`);
    }
  }
  return out;
}

async function removeItem(item: Leftover, f: Found, leaseRoot: string, o: LeftoverOptions): Promise<void> {
  const leaseDir = `${leaseRoot}/${o.bridge.name}`;
  switch (item.kind) {
    case 'sandbox':
      // Left after the pass above only when removing failed; said there.
      throw new Error('could not be removed');
    case 'store':
      await closeStore(o.dataDir);
      if (await mountOptions(storePaths(o.dataDir).mount)) throw new Error('still mounted after umount');
      return;
    case 'leases':
      for (const l of f.leases) await rm(`${leaseDir}/${l.idx}`, { recursive: true, force: true });
      return;
    case 'run-dir': {
      // Never through a mount: removing it would remove the sandbox's files.
      const inside = await mountsUnder(f.layout.runDir);
      if (inside.length) throw new Error(`mounts are still under it: ${inside.join(', ')}`);
      await rm(f.layout.runDir, { recursive: true, force: true });
      return;
    }
    case 'bridge':
      await run('ip', ['link', 'del', o.bridge.name]);
      // The lease dir goes with it once no data dir has a lease there.
      if (listDir(leaseDir).every((n) => !/^\d+$/.test(n))) await rm(leaseDir, { recursive: true, force: true });
      return;
    case 'nft-table':
      await run('nft', ['delete', 'table', 'inet', f.network.table]);
      return;
    case 'cgroups':
      if (!f.cgroups) return;
      for (const d of parentDirs(f.cgroups)) await removeTree(d);
      return;
  }
}
