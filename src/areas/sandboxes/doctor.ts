// `nube doctor` checks for sandboxes: what the configured driver needs of the host, and the state of
// the built-in templates. Read-only: nothing here creates a bridge, a cgroup or a template.
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import type { Config } from '../../platform/config-shape.js';
import { type CheckResult, type DoctorCheck, errorText, fail, ok, warn } from '../../platform/doctor.js';
import { oldRunsc, runscBuild } from './runtime/gvisor/runsc.js';
import { STATIC_SH_DIR } from './runtime/static-sh.js';
import { detectCgroups } from './runtime/namespaces/cgroups.js';
import { cgroup2Mount } from './runtime/namespaces/cgroup-tuning.js';
import { GVISOR_PACKAGES, HOST_PACKAGES, missingPackages } from './runtime/namespaces/host-deps.js';
import { BridgeNetwork, hostAddresses } from './runtime/namespaces/network.js';
import { isAlive, run } from './runtime/namespaces/proc.js';
import { RECIPES } from './runtime/namespaces/templates.js';
import type { SandboxRuntime } from './runtime/driver.js';
import { poolStatusFile } from './runtime-dir.js';
import { storeCheck } from './store-doctor.js';
import { leftoversCheck } from './leftovers.js';
import type { PoolStatus } from './warm-pool.js';

/** `runtime` makes the configured driver (index.ts's makeRuntime), only to read template state. */
export function sandboxChecks(config: Config, runtime: () => SandboxRuntime): DoctorCheck[] {
  const c = config.sandboxes;
  return [
    { name: 'sandboxes: user', run: rootUser },
    { name: 'sandboxes: packages', run: () => packages(c.driver) },
    { name: 'sandboxes: user namespaces', run: userNamespaces },
    { name: 'sandboxes: cgroups', run: () => cgroups(c) },
    { name: 'sandboxes: cgroup migrations', run: () => migrations(c) },
    { name: 'sandboxes: nftables', run: nftables },
    { name: 'sandboxes: bridge subnet', run: () => bridgeSubnet(c.bridge) },
    { name: 'sandboxes: templates', run: () => templates(config.sandboxes.templatesDir, runtime()) },
    { name: 'sandboxes: warm pool', run: () => warmPool(config) },
    { name: 'sandboxes: store', run: () => storeCheck(config) },
    { name: 'sandboxes: leftovers', run: () => leftoversCheck(config) },
  ];
}

function rootUser(): CheckResult {
  const uid = process.getuid?.() ?? -1;
  return uid === 0
    ? ok('running as root')
    : fail(`running as uid ${uid}`, 'run nube as root: sandboxes need user namespaces, cgroups and nftables');
}

async function packages(driver: Config['sandboxes']['driver']): Promise<CheckResult> {
  const wanted = driver === 'gvisor' ? [...HOST_PACKAGES, ...GVISOR_PACKAGES] : HOST_PACKAGES;
  const missing = await missingPackages(wanted).catch((e: unknown) => {
    throw new Error(`dpkg-query failed (is this Debian?): ${errorText(e)}`);
  });
  const script = driver === 'gvisor' ? 'sh scripts/install-host-deps.sh --gvisor' : 'sh scripts/install-host-deps.sh';
  if (missing.length === 0 && driver === 'gvisor') {
    const version = (await run('runsc', ['--version'], { allowFailure: true }).catch(() => null))?.stdout.split('\n')[0] ?? '';
    if (oldRunsc(runscBuild(version))) {
      return warn(`${version}: commands need a preloaded statx fix, file paths a realpath pass, and run slower than with 0.0~20240729 (bookworm-backports)`, script);
    }
  }
  if (missing.length === 0 && !existsSync(`${STATIC_SH_DIR}/sh`)) {
    const cost = driver === 'gvisor' ? '~25% of an exec `true`' : '~10% of an exec `true`';
    return warn(`the static sh is not built (${STATIC_SH_DIR}/sh): every \`sh -c\` loads the sandbox's dynamic dash, ${cost} slower`, 'sh scripts/install-static-sh.sh');
  }
  if (missing.length === 0) return ok(`the ${driver} driver's ${wanted.length} Debian packages are installed`);
  return fail(`missing Debian packages: ${missing.join(' ')}`, `apt-get install -y --no-install-recommends ${missing.join(' ')} (or: ${script})`);
}

async function userNamespaces(): Promise<CheckResult> {
  const max = Number((await readFile('/proc/sys/user/max_user_namespaces', 'utf8').catch(() => '')).trim());
  if (max === 0) {
    return fail(
      'user namespaces are disabled (user.max_user_namespaces = 0)',
      'sysctl -w user.max_user_namespaces=15000, and put it in /etc/sysctl.d/ to keep it after a reboot',
    );
  }
  // The real thing: a user namespace with a uid map, as the driver makes one.
  const probe = await run('unshare', ['--user', '--map-root-user', 'true'], { allowFailure: true }).catch((e: unknown) => ({
    code: -1,
    stderr: errorText(e),
  }));
  if (probe.code !== 0) {
    return fail(`creating a user namespace failed: ${probe.stderr.trim() || `exit ${probe.code}`}`, 'allow user namespaces for root (kernel, sysctl, or the container this runs in)');
  }
  return ok(`user namespaces work (max ${Number.isFinite(max) ? max : 'unknown'})`);
}

/** The one detection the runtime uses (cgroups.ts): which hierarchy sandboxes would run on, or why none. */
function cgroups(c: Config['sandboxes']): CheckResult {
  try {
    const host = detectCgroups(c.cgroupParent, c.cgroups);
    return ok(`cgroup v${host.version} has the memory, cpu and pids controllers and a freezer`);
  } catch (e) {
    return fail(
      errorText(e),
      'boot with the unified hierarchy holding memory, cpu and pids (systemd\'s default), or mount the v1 memory, cpu, pids and freezer controllers; NUBE_SANDBOX_CGROUPS picks one',
    );
  }
}

/** Whether cgroup migrations are fast (cgroup-tuning.ts: the driver turns favordynmods on when it starts). */
async function migrations(c: Config['sandboxes']): Promise<CheckResult> {
  const m = cgroup2Mount(await readFile('/proc/self/mounts', 'utf8').catch(() => ''));
  if (m?.options.includes('favordynmods')) return ok(`favordynmods is on (${m.path}): a task joins a cgroup in well under a millisecond`);
  const slow = 'each task joining a cgroup waits for an RCU grace period (measured 7.6-16 ms per sandbox start)';
  if (!m) return warn(`no cgroup2 mount: ${slow}`, 'mount cgroup2 (e.g. at /sys/fs/cgroup/unified) so nube can turn favordynmods on');
  if (!c.favorDynmods) return warn(`favordynmods is off (${m.path}) and NUBE_SANDBOX_FAVOR_DYNMODS=false: ${slow}`, `mount -o remount,${m.options.join(',')},favordynmods ${m.path}`);
  return ok(`favordynmods is off (${m.path}); nube turns it on when the sandbox driver starts (Linux 6.0+)`);
}

async function nftables(): Promise<CheckResult> {
  const r = await run('nft', ['list', 'tables'], { allowFailure: true }).catch(() => null);
  if (!r) return fail('nft is not installed', 'apt-get install -y nftables');
  if (r.code !== 0) return fail(`nft cannot list tables: ${r.stderr.trim()}`, 'load the nf_tables kernel module (modprobe nf_tables) and run nube as root');
  return ok('nftables answers');
}

async function bridgeSubnet(bridge: Config['sandboxes']['bridge']): Promise<CheckResult> {
  const net = new BridgeNetwork(bridge, null);
  const addrs = await hostAddresses();
  const [clash] = net.conflicts(addrs);
  const setting = `NUBE_SANDBOX_BRIDGE=${bridge.name}:${bridge.cidr}`;
  if (!clash) {
    const up = addrs.some((a) => a.ifname === bridge.name);
    return ok(`${setting}: ${net.subnet} is free${up ? ` (${bridge.name} is up)` : `; ${bridge.name} is created with the first sandbox`}`);
  }
  const free = freeSubnet(bridge.name, addrs);
  return fail(
    `${setting}: ${net.subnet} overlaps ${clash.ifname}'s ${clash.local}/${clash.prefixlen}`,
    free ? `set NUBE_SANDBOX_BRIDGE=${bridge.name}:${free} (free on this host)` : 'set NUBE_SANDBOX_BRIDGE to a subnet no interface uses',
  );
}

/** A 10.x.0.0/16 no interface of this host overlaps, starting from nube's default. */
function freeSubnet(name: string, addrs: Awaited<ReturnType<typeof hostAddresses>>): string | undefined {
  for (let x = 77; x < 256; x++) {
    const cidr = `10.${x}.0.1/16`;
    if (new BridgeNetwork({ name, cidr }, null).conflicts(addrs).length === 0) return cidr;
  }
  return undefined;
}

async function templates(templatesDir: string, runtime: SandboxRuntime): Promise<CheckResult[]> {
  try {
    const out: CheckResult[] = [];
    for (const name of Object.keys(RECIPES)) {
      const t = await runtime.findTemplate(name);
      const building = await builder(templatesDir, name);
      if (t) out.push(ok(`${name}: built (build ${t.build}, ${t.builtAt}, took ${Math.round(t.buildMs / 1000)} s)`));
      else if (building) out.push(ok(`${name}: being built now by process ${building}`));
      else if (name === 'base') {
        out.push(
          warn(
            `${name}: not built; the first sandbox waits minutes while it builds`,
            `npm run nube -- templates build ${name} (or start with NUBE_SANDBOX_PREBUILD=${name})`,
          ),
        );
      } else out.push(ok(`${name}: not built (built when a sandbox first asks for it: npm run nube -- templates build ${name})`));
    }
    return out;
  } finally {
    await runtime.close();
  }
}

/** The live process holding a build lock of this template, if any (`<build>.lock/pid`, see templates.ts). */
async function builder(templatesDir: string, name: string): Promise<number | undefined> {
  const dir = `${templatesDir}/${name}`;
  if (!existsSync(dir)) return undefined;
  for (const e of await readdir(dir)) {
    if (!e.endsWith('.lock')) continue;
    const pid = Number(await readFile(`${dir}/${e}/pid`, 'utf8').catch(() => '0'));
    if (pid && isAlive(pid)) return pid;
  }
  return undefined;
}

/** What the running nube's warm pool holds (it writes its state next to the driver's); read-only. */
async function warmPool(config: Config): Promise<CheckResult> {
  const p = config.sandboxes.pool;
  const setting = `NUBE_SANDBOX_POOL=${p.size} (up to ${p.max} per template, ${p.memoryPercent}% of available memory)`;
  if (p.size === 0) return ok(`${setting}: off; every create starts a sandbox`);
  const text = await readFile(poolStatusFile(config), 'utf8').catch(() => null);
  const s = text ? (JSON.parse(text) as Partial<PoolStatus> & { stopped?: string }) : null;
  if (!s || s.stopped || !s.pid || !isAlive(s.pid)) {
    return ok(`${setting}: no nube running with a pool now (it fills with the first create of a template)`);
  }
  const keys = (s.keys ?? []).map((k) => `${k.key} ${k.ready}/${k.target} ready (${k.hits} hits, ${k.misses} misses)`);
  const held = (s.keys ?? []).reduce((n, k) => n + k.ready, 0);
  const line = `${setting}: nube ${s.pid} (${s.driver}) holds ${held} pooled sandbox(es), memory allows ${s.memoryCap}; ${keys.join('; ') || 'no template used yet'}`;
  if (s.memoryCap !== undefined && s.memoryCap < p.size) {
    return warn(line, 'the memory cap is below the pool size: free memory or raise NUBE_SANDBOX_POOL_MEMORY_PERCENT');
  }
  return ok(line);
}
