// `nube backup` of the sandbox store (issue 37): every sandbox's directory (state, upper dir, logs),
// every snapshot (template snapshots, forks' layers), every volume and volume snapshot. While nube
// runs: each running sandbox is frozen (the cgroup freezer snapshots use) for as long as a reflink
// copy of the store's directories takes, so its files are one instant's; the copy is then archived
// with owners (numeric: the user namespace's ids), xattrs (overlay whiteouts, opaque dirs) and ACLs,
// and removed. A restore unpacks it into the store of the new data dir (made here when it has none),
// where the runtime's recover() finds the sandboxes: a running one is started again on its files (its
// processes are not copied), a suspended one stays suspended. Disk limits are applied again by each
// launch; a volume's limit, which lives in its XFS project or btrfs subvolume and not in an archive,
// is set again by `put` from the limits recorded at `take`. The template builds the sandboxes and
// snapshots stand on are archived too, and put back where the host has none (a new host).
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { detectCgroups } from './cgroups.js';
import { initAlive } from './launch.js';
import { run } from './proc.js';
import { Layout, loadAllRecords, loadAllSnapshots, type SandboxRecord } from './state.js';
import { mountOptions, openStore, type StoreOptions, storePaths } from './store.js';

/** The store's directories a backup holds (the rest of the store is made again: quotas, probes). */
const DIRS = ['sandboxes', 'snapshots', 'volumes', 'volume-snapshots'] as const;
const ARCHIVE = 'store.tar';
const TEMPLATES_ARCHIVE = 'templates.tar';
const TAR_FLAGS = ['--xattrs', '--xattrs-include=*', '--acls', '--numeric-owner', '--sparse'];

export interface StoreBackupOptions extends StoreOptions {
  dataDir: string;
  templatesDir: string;
  cgroupParent?: string;
  cgroupVersion?: 'auto' | 'v1' | 'v2';
}

/** Where the store's directories are now: its mounted image, else the data dir (native or copy). */
async function storeRoot(o: StoreBackupOptions): Promise<string | null> {
  const { image } = storePaths(o.dataDir);
  if (existsSync(image)) {
    // Not mounted (nube stopped, then the host rebooted): mounted as nube would at start.
    return (await openStore(o.dataDir, o)).root;
  }
  return DIRS.some((d) => existsSync(join(o.dataDir, d))) ? o.dataDir : null;
}

export async function takeStoreBackup(o: StoreBackupOptions, into: string, progress: (line: string) => void): Promise<void> {
  const root = await storeRoot(o);
  if (!root || (existsSync(storePaths(o.dataDir).image) && (await mountOptions(root)) === null)) {
    progress('no sandbox store');
    return;
  }
  const layout = new Layout(o.dataDir);
  layout.useStore(root);
  const records = await loadAllRecords(layout);
  // Running and not suspended with their memory (a frozen one is still already): frozen for the copy.
  const live: string[] = [];
  for (const r of records) if (r.init && !r.frozen && (await initAlive(r))) live.push(r.id);
  const cgroups = live.length ? detectCgroups(o.cgroupParent ?? 'nube', o.cgroupVersion) : null;
  const stage = join(root, `.backup-${randomBytes(6).toString('hex')}`);
  await mkdir(stage, { mode: 0o700 });
  try {
    const frozen: string[] = [];
    const started = Date.now();
    try {
      for (const id of live) {
        // One that stopped meanwhile has no cgroup to freeze: its files are still.
        if (await cgroups!.sandbox(id).freeze().then(() => true, () => false)) frozen.push(id);
      }
      for (const d of DIRS) {
        // Into btrfs subvolumes too (a sandbox's disk, a volume): reflinks cross them on one filesystem.
        if (existsSync(join(root, d))) await run('cp', ['-a', '--reflink=auto', join(root, d), join(stage, d)]);
      }
    } finally {
      for (const id of frozen) await cgroups!.sandbox(id).thaw();
    }
    progress(`${records.length} sandbox(es), ${frozen.length} frozen for ${Date.now() - started} ms while copied`);
    // Each volume's limit (bytes), set again at restore: it is not in the files.
    const volumes = existsSync(join(stage, 'volumes')) ? await readdir(join(stage, 'volumes')) : [];
    const limits: Record<string, number> = {};
    for (const v of volumes) limits[v] = await volumeLimit(root, join(root, 'volumes', v));
    await writeFile(join(stage, 'volume-limits.json'), JSON.stringify(limits));
    // Records name their lower dirs and volumes by absolute path: rewritten at restore.
    await writeFile(join(stage, 'paths.json'), JSON.stringify({ root, templatesDir: o.templatesDir }));
    await mkdir(into, { recursive: true });
    const present = [...DIRS.filter((d) => existsSync(join(stage, d))), 'volume-limits.json', 'paths.json'];
    await run('tar', ['-C', stage, ...TAR_FLAGS, '-cf', join(into, ARCHIVE), ...present]);
    progress(`${volumes.length} volume(s) archived with owners and xattrs`);
    // The template builds the sandboxes and snapshots stand on (their lowest layer): a restore onto a
    // new host has none, and a sandbox cannot start without its own (the recipe may build another).
    const builds = new Set([...records, ...(await loadAllSnapshots(layout))].map((r) => `${r.template}/${r.templateBuild}`));
    const kept = [...builds].filter((b) => existsSync(join(o.templatesDir, b, 'meta.json'))).sort();
    if (kept.length) {
      await run('tar', ['-C', o.templatesDir, ...TAR_FLAGS, '-cf', join(into, TEMPLATES_ARCHIVE), ...kept]);
      progress(`template builds ${kept.join(', ')} archived`);
    }
  } finally {
    await rm(stage, { recursive: true, force: true });
  }
}

/** A volume directory's byte limit: its XFS project's hard block limit, or its btrfs qgroup's. */
async function volumeLimit(root: string, dir: string): Promise<number> {
  const lsattr = await run('lsattr', ['-dp', dir], { allowFailure: true });
  const project = Number(lsattr.stdout.trim().split(/\s+/)[0]);
  if (Number.isInteger(project) && project > 0) {
    const r = await run('xfs_quota', ['-x', '-c', `quota -p -N -b ${project}`, root], { allowFailure: true });
    // `<dev> <used> <soft> <hard> ...` in KiB.
    const hard = Number(r.stdout.trim().split(/\s+/)[3]);
    if (hard > 0) return hard * 1024;
  }
  // A subvolume's qgroup is 0/<its id>: `qgroupid rfer excl max_rfer max_excl`.
  const sub = await run('btrfs', ['subvolume', 'show', dir], { allowFailure: true }).catch(() => null);
  const id = sub?.stdout.match(/Subvolume ID:\s*(\d+)/)?.[1];
  if (!id) return 0;
  const q = await run('btrfs', ['qgroup', 'show', '-re', '--raw', dir], { allowFailure: true }).catch(() => null);
  const line = q?.stdout.split('\n').find((l) => l.trim().startsWith(`0/${id} `))?.trim().split(/\s+/);
  const max = Number(line?.[3]);
  return max > 0 ? max : 0;
}

/** Template builds this host does not have yet (a templates dir shared with other nubes may). */
async function putTemplates(templatesDir: string, archive: string, progress: (line: string) => void): Promise<void> {
  await mkdir(templatesDir, { recursive: true });
  const stage = join(templatesDir, `.restore-${randomBytes(6).toString('hex')}`);
  await mkdir(stage, { mode: 0o700 });
  try {
    await run('tar', ['-C', stage, ...TAR_FLAGS, '--same-owner', '-p', '-xf', archive]);
    const put: string[] = [];
    for (const name of await readdir(stage))
      for (const build of await readdir(join(stage, name))) {
        const to = join(templatesDir, name, build);
        if (existsSync(join(to, 'meta.json'))) continue;
        await mkdir(join(templatesDir, name), { recursive: true });
        await rm(to, { recursive: true, force: true }); // a build that never finished
        await run('mv', [join(stage, name, build), to]);
        put.push(`${name}/${build}`);
      }
    progress(`template builds: ${put.length ? put.join(', ') : 'all on this host already'}`);
  } finally {
    await rm(stage, { recursive: true, force: true });
  }
}

/** Replaces a plain directory by a btrfs subvolume with the same content (read-only: a snapshot). */
async function asSubvolume(dir: string, readOnly: boolean): Promise<void> {
  const aside = `${dir}.restoring`;
  await run('mv', [dir, aside]);
  await run('btrfs', ['-q', 'subvolume', 'create', dir]);
  await run('cp', ['-a', '--reflink=auto', `${aside}/.`, `${dir}/`]);
  await rm(aside, { recursive: true, force: true });
  if (readOnly) await run('btrfs', ['property', 'set', '-ts', dir, 'ro', 'true']);
}

/**
 * Puts the store's directories back into the new data dir's store (its image made and mounted here,
 * as the runtime's start would). `limit(volume, bytes)` makes a volume's directory with its quota.
 */
export async function putStoreBackup(
  o: StoreBackupOptions,
  from: string,
  limit: (volume: string, bytes: number) => Promise<void>,
  progress: (line: string) => void,
): Promise<void> {
  if (!existsSync(join(from, ARCHIVE))) return;
  await mkdir(o.dataDir, { recursive: true });
  if (existsSync(join(from, TEMPLATES_ARCHIVE))) await putTemplates(o.templatesDir, join(from, TEMPLATES_ARCHIVE), progress);
  const store = await openStore(o.dataDir, o);
  progress(`store: ${store.kind} at ${store.root}`);
  const stage = join(store.root, `.restore-${randomBytes(6).toString('hex')}`);
  await mkdir(stage, { mode: 0o700 });
  try {
    await run('tar', ['-C', stage, ...TAR_FLAGS, '--same-owner', '-p', '-xf', join(from, ARCHIVE)]);
    const limits = JSON.parse(await readFile(join(stage, 'volume-limits.json'), 'utf8')) as Record<string, number>;
    const was = JSON.parse(await readFile(join(stage, 'paths.json'), 'utf8')) as { root: string; templatesDir: string };
    const moved = (p: string) =>
      p.startsWith(`${was.root}/`) ? store.root + p.slice(was.root.length)
      : p.startsWith(`${was.templatesDir}/`) ? o.templatesDir + p.slice(was.templatesDir.length)
      : p;
    const btrfs = store.quota === 'btrfs-qgroup';
    for (const id of existsSync(join(stage, 'sandboxes')) ? await readdir(join(stage, 'sandboxes')) : []) {
      const state = join(stage, 'sandboxes', id, 'state.json');
      if (!existsSync(state)) continue;
      const rec = JSON.parse(await readFile(state, 'utf8')) as SandboxRecord;
      rec.lowerDirs = rec.lowerDirs.map(moved);
      rec.mounts = rec.mounts?.map((m) => ({ ...m, source: moved(m.source) }));
      await writeFile(state, JSON.stringify(rec, null, 2));
      // On btrfs a sandbox's disk is a subvolume (its qgroup is its limit): made again, then filled.
      if (btrfs && existsSync(join(stage, 'sandboxes', id, 'disk'))) await asSubvolume(join(stage, 'sandboxes', id, 'disk'), false);
    }
    if (btrfs && existsSync(join(stage, 'volume-snapshots')))
      for (const v of await readdir(join(stage, 'volume-snapshots'))) await asSubvolume(join(stage, 'volume-snapshots', v), true);
    for (const d of DIRS) {
      if (!existsSync(join(stage, d))) continue;
      if (d !== 'volumes') {
        await run('mv', [join(stage, d), join(store.root, d)]);
        continue;
      }
      // Each volume into a directory with its quota first, as the volume store makes one.
      await mkdir(join(store.root, d), { recursive: true, mode: 0o711 });
      for (const v of await readdir(join(stage, d))) {
        const dir = join(store.root, d, v);
        if (store.quota && limits[v]) await limit(v, limits[v]!);
        else await mkdir(dir);
        await run('cp', ['-a', '--reflink=auto', `${join(stage, d, v)}/.`, `${dir}/`]);
      }
    }
    const n = existsSync(join(store.root, 'sandboxes')) ? (await readdir(join(store.root, 'sandboxes'))).length : 0;
    progress(`${n} sandbox(es) and ${Object.keys(limits).length} volume(s) put back: nube starts the running ones again on their files`);
  } finally {
    await rm(stage, { recursive: true, force: true });
  }
}
