import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { lchown, chmod, lstat, mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import type { BuildProgress, ProgressFn, TemplateInfo } from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import { ProgressWriter, readProgress, SHIFT_STEP } from './build-progress.js';
import { GOOSE_FILE } from './host-tools.js';
import { withPidLock } from './pid-lock.js';
import { run } from './proc.js';
import { buildDerived, type DerivedRecipe } from './derived-template.js';

interface DebianRecipe {
  suite: string;
  variant: string;
  packages: string[];
}

type Recipe = DebianRecipe | DerivedRecipe;

const BASE_PACKAGES = [
  'python3',
  // python3 -m venv, for machines launched from a requirements.txt or pyproject.toml (pip comes with it).
  'python3-venv',
  'nodejs',
  'npm',
  'git',
  'curl',
  'ca-certificates',
  'build-essential',
  'procps',
  'iproute2',
  'patch',
  // E2B's sandboxes: `python` is python3, their `user` has passwordless sudo (the account is made
  // below), file metadata is kept in extended attributes (getfattr, setfattr).
  'python-is-python3',
  'sudo',
  'attr',
];

export const RECIPES: Record<string, Recipe> = {
  base: { suite: 'bookworm', variant: 'minbase', packages: BASE_PACKAGES },
  'code-interpreter': {
    suite: 'bookworm',
    variant: 'minbase',
    packages: [...BASE_PACKAGES, 'python3-ipykernel', 'python3-jupyter-client'],
  },
  // `base` plus the goose binary (the `goose` agent template): built in seconds from base's tree.
  goose: { from: 'base', hostFiles: [GOOSE_FILE] },
};

const E2B_USER_HOOK = [
  'chroot "$1" useradd --uid 1000 --user-group --create-home --home-dir /home/user --shell /bin/bash user',
  'echo "user ALL=(ALL:ALL) NOPASSWD: ALL" > "$1/etc/sudoers.d/user"',
  'chmod 0440 "$1/etc/sudoers.d/user"',
].join(' && ');

/** The build id: a template is rebuilt exactly when its recipe (or the uid shift) changes. */
export function recipeHash(name: string, uidBase: number): string {
  const recipe = RECIPES[name];
  if (!recipe) throw new SandboxRuntimeError('NotFound', `unknown template ${name}`);
  // A derived recipe is rebuilt when its parent's recipe changes too.
  const parent = 'from' in recipe ? recipeHash(recipe.from, uidBase) : undefined;
  // v: what every Debian build does besides the recipe (v2: /home/user, E2B's home, exists; v3: E2B's
  // `user` account, uid 1000, with passwordless sudo).
  const text = JSON.stringify({ name, recipe, uidBase, v: 3, ...(parent ? { parent } : {}) });
  return createHash('sha256').update(text).digest('hex').slice(0, 16);
}

/** Why `name` cannot be built here: a host file its recipe takes is missing (checksums are checked at build). */
export function templateUnavailable(name: string): string | null {
  const recipe = RECIPES[name];
  if (!recipe || !('from' in recipe)) return null;
  const missing = recipe.hostFiles.find((f) => !existsSync(f.from));
  return missing ? `template ${name} needs ${missing.from}, which is not on this host: install it with ${missing.installedBy}` : null;
}

export function templatePaths(templatesDir: string, name: string, build: string) {
  const dir = `${templatesDir}/${name}/${build}`;
  return { dir, rootfs: `${dir}/rootfs`, meta: `${dir}/meta.json`, lock: `${dir}.lock` };
}

export async function readTemplate(templatesDir: string, name: string, build: string) {
  const p = templatePaths(templatesDir, name, build);
  // Read on every create: a small file, synchronously (no thread-pool round trip).
  try {
    return JSON.parse(readFileSync(p.meta, 'utf8')) as TemplateInfo;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/** Where the process holding a build's lock says it is. */
export function readBuildProgress(templatesDir: string, name: string, build: string): Promise<BuildProgress | null> {
  return readProgress(`${templatePaths(templatesDir, name, build).lock}/progress.json`);
}

const WAIT_REPORT_MS = 10_000;

/**
 * A lock between processes (parallel test files, two nube instances): mkdir is atomic. While another
 * process holds it, `onWait` hears where that build is every 10 s.
 */
async function withLock<T>(lock: string, fn: () => Promise<T>, onWait?: ProgressFn): Promise<T> {
  let reported = 0;
  return withPidLock(lock, fn, {
    pollMs: 500,
    onWait: async (owner) => {
      if (!onWait || Date.now() - reported < WAIT_REPORT_MS) return;
      reported = Date.now();
      const p = await readProgress(`${lock}/progress.json`);
      const where = p ? `: ${p.step}, about ${p.percent} %` : '';
      onWait(`waiting for the build in process ${owner || '?'}${where}`, p ?? undefined);
    },
  });
}

/**
 * Shift every owner by uidBase so that root inside the sandbox's user namespace (uid 0 -> uidBase)
 * owns the system files. chown clears setuid/setgid bits, so the mode is put back afterwards.
 */
export async function shiftOwnership(root: string, uidBase: number): Promise<number> {
  let count = 0;
  const walk = async (path: string): Promise<void> => {
    const st = await lstat(path);
    await lchown(path, st.uid + uidBase, st.gid + uidBase);
    count++;
    if (!st.isSymbolicLink() && st.mode & 0o6000) await chmod(path, st.mode & 0o7777);
    if (st.isDirectory()) {
      const names = await readdir(path);
      for (let i = 0; i < names.length; i += 64) {
        await Promise.all(names.slice(i, i + 64).map((n) => walk(`${path}/${n}`)));
      }
    }
  };
  await walk(root);
  return count;
}

export async function buildTemplate(
  templatesDir: string,
  name: string,
  uidBase: number,
  onProgress: ProgressFn = () => {},
  opts: { force?: boolean; mirror?: string } = {},
): Promise<TemplateInfo> {
  const build = recipeHash(name, uidBase);
  const recipe = RECIPES[name]!;
  if ('from' in recipe) {
    // The parent first (outside this template's lock: it has its own).
    const parent = await buildTemplate(templatesDir, recipe.from, uidBase, onProgress, { mirror: opts.mirror });
    const p = templatePaths(templatesDir, name, build);
    await mkdir(`${templatesDir}/${name}`, { recursive: true });
    return withLock(p.lock, async () => {
      const cached = await readTemplate(templatesDir, name, build);
      if (cached && !opts.force) return cached;
      return buildDerived({ name, build, dir: p.dir, meta: p.meta, rootfs: p.rootfs }, recipe, parent, uidBase, onProgress);
    }, onProgress);
  }
  const p = templatePaths(templatesDir, name, build);
  await mkdir(`${templatesDir}/${name}`, { recursive: true });
  return withLock(p.lock, async () => {
    const cached = await readTemplate(templatesDir, name, build);
    if (cached && !opts.force) return cached;
    const started = Date.now();
    const progress = new ProgressWriter(`${p.lock}/progress.json`, name);
    const report = (line: string) => {
      progress.line(line);
      onProgress(line, progress.now());
    };
    const tmp = `${p.dir}.building`;
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp, { recursive: true });
    report(`building template ${name} (${build}): mmdebstrap ${recipe.suite} ${recipe.variant}`);
    const args = [
      `--variant=${recipe.variant}`,
      '--mode=root',
      `--include=${recipe.packages.join(',')}`,
      // Per-sandbox files (resolv.conf, hosts, hostname) are written into each upper dir instead.
      '--customize-hook=rm -f "$1/etc/resolv.conf" "$1/etc/hostname"',
      // E2B's account (src/compat/e2b runs its commands as it): `user`, uid 1000, home /home/user, bash,
      // passwordless sudo. nube's own API runs commands as root.
      `--customize-hook=${E2B_USER_HOOK}`,
      recipe.suite,
      `${tmp}/rootfs`,
    ];
    if (opts.mirror) args.push(opts.mirror);
    try {
      await run('mmdebstrap', args, { onLine: report });
      progress.step(SHIFT_STEP);
      report('shifting ownership into the sandbox uid range');
      const files = await shiftOwnership(`${tmp}/rootfs`, uidBase);
      report(`shifted ${files} files`);
    } catch (e) {
      await Promise.all([rm(tmp, { recursive: true, force: true }), progress.flushed()]);
      // mmdebstrap's own `E:` lines say why (an unreachable mirror, a missing package); the rest is noise.
      const text = (e as Error).message;
      const why = text.split('\n').filter((l) => l.startsWith('E: ')).slice(-4).join(' ');
      throw new SandboxRuntimeError('TemplateBuildFailed', `template ${name} could not be built: ${why || text.slice(-500)}`);
    }
    const info: TemplateInfo = {
      name,
      build,
      path: p.rootfs,
      packages: recipe.packages,
      builtAt: new Date().toISOString(),
      buildMs: Date.now() - started,
    };
    await writeFile(`${tmp}/meta.json`, JSON.stringify(info, null, 2));
    // A forced rebuild keeps the old tree aside: running sandboxes still have it mounted as a layer.
    if (existsSync(p.dir)) await rename(p.dir, `${p.dir}.replaced-${Date.now()}`);
    await rename(tmp, p.dir);
    await progress.flushed();
    onProgress(`template ${name} built in ${(info.buildMs / 1000).toFixed(1)} s`, { ...progress.now(), step: 'done', percent: 100 });
    return info;
  }, onProgress);
}
