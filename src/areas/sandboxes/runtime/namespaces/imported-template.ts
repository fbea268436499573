// Templates nube does not build from a recipe: the templates area fills a root filesystem (an OCI
// image's layers, a Dockerfile's steps) and the driver adds what a sandbox needs of nube inside, the
// way its own templates have it: a first process that waits (`/.nube/pause`, static), and nube's static
// shell as `/bin/sh` when the image has none (distroless), so commands still run. Builds live beside
// the built-in ones (`<templates>/<name>/<build>/rootfs`, meta.json); `<name>/current` names the build
// sandboxes start from, so a rebuild never disturbs sandboxes on the old one.
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import {
  chmod,
  copyFile,
  lchown,
  lstat,
  mkdir,
  readFile,
  readdir,
  readlink,
  rename,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { dirname, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FillRootfs, ProgressFn, TemplateInfo } from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import { isAlive, run } from './proc.js';

/** Names of imported templates (the templates area's ids); built-in names never match. */
export const IMPORTED_NAME = /^tmpl_[0-9a-z]{6,60}$/;

export function isImported(name: string): boolean {
  return IMPORTED_NAME.test(name);
}

export interface ImportIds {
  uidBase: number;
  uidCount: number;
}

function currentFile(templatesDir: string, name: string): string {
  return `${templatesDir}/${name}/current`;
}

/** The build sandboxes of `name` start from, or null when it was never imported here. */
export function readImported(templatesDir: string, name: string): TemplateInfo | null {
  try {
    const build = readFileSync(currentFile(templatesDir, name), 'utf8').trim();
    return JSON.parse(readFileSync(`${templatesDir}/${name}/${build}/meta.json`, 'utf8')) as TemplateInfo;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

function sourcePath(rel: string): string {
  const here = fileURLToPath(new URL(rel, import.meta.url));
  if (existsSync(here)) return here;
  const fromDist = here.replace(`${'/dist/'}src/`, '/src/');
  if (existsSync(fromDist)) return fromDist;
  throw new Error(`${rel} not found near ${here}`);
}

/** Compiles a static program of nube's (/.nube/pause, /.nube/runas) once per source version into `binDir`. */
export async function ensureStatic(binDir: string, rel: string): Promise<string> {
  const src = sourcePath(rel);
  const hash = createHash('sha256')
    .update(await readFile(src))
    .digest('hex')
    .slice(0, 12);
  const out = `${binDir}/${posix.basename(rel, '.c')}-${hash}`;
  if (existsSync(out)) return out;
  await mkdir(binDir, { recursive: true });
  // Two builds of this process may compile it at once (templates build two at a time): tmp names apart.
  const tmp = `${out}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  await run('gcc', ['-O2', '-static', '-o', tmp, src]);
  await rename(tmp, out);
  return out;
}

/** `path` inside `root` with every symlink on the way resolved inside it too (as the sandbox sees it). */
export async function resolveInside(root: string, path: string): Promise<string | null> {
  let parts = path.split('/').filter(Boolean);
  let at = '';
  for (let hops = 0; parts.length; ) {
    const name = parts.shift()!;
    if (name === '.') continue;
    if (name === '..') {
      at = posix.dirname(at || '/') === '/' ? '' : posix.dirname(at);
      continue;
    }
    const st = await lstat(`${root}${at}/${name}`).catch(() => null);
    if (!st) return null;
    if (st.isSymbolicLink()) {
      if (++hops > 40) return null;
      const target = await readlink(`${root}${at}/${name}`);
      parts = [...target.split('/').filter(Boolean), ...parts];
      if (target.startsWith('/')) at = '';
      continue;
    }
    at = `${at}/${name}`;
  }
  return `${root}${at}`;
}

/**
 * Adds nube's parts to a filled root filesystem: /.nube/pause, /.nube/runas (commands as the
 * template's user), the static sh as /.nube/sh (and as /bin/sh when the image has no shell there),
 * and the mount points and dirs a sandbox expects.
 */
async function addNubeParts(
  rootfs: string,
  ids: ImportIds,
  bins: { pause: string; runas: string },
  staticShDir: string | null,
  onProgress: ProgressFn,
): Promise<void> {
  const own = (p: string) => lchown(p, ids.uidBase, ids.uidBase);
  for (const [dir, mode] of [
    ['/.nube', 0o755],
    ['/proc', 0o555],
    ['/dev', 0o755],
    ['/sys', 0o555],
    ['/tmp', 0o1777],
    ['/root', 0o700],
    ['/etc', 0o755],
  ] as const) {
    // Only where the image has nothing by that name (a symlink to elsewhere is the image's choice).
    if (await lstat(`${rootfs}${dir}`).catch(() => null)) continue;
    await mkdir(`${rootfs}${dir}`);
    await own(`${rootfs}${dir}`);
    await chmod(`${rootfs}${dir}`, mode);
  }
  for (const [name, from] of Object.entries(bins)) {
    await copyFile(from, `${rootfs}/.nube/${name}`);
    await own(`${rootfs}/.nube/${name}`);
    await chmod(`${rootfs}/.nube/${name}`, 0o755);
  }
  const haveStatic = staticShDir !== null && existsSync(`${staticShDir}/sh`);
  if (haveStatic) {
    await copyFile(`${staticShDir}/sh`, `${rootfs}/.nube/sh`);
    await own(`${rootfs}/.nube/sh`);
    await chmod(`${rootfs}/.nube/sh`, 0o755);
  }
  if (await resolveInside(rootfs, '/bin/sh')) return;
  if (!haveStatic) {
    throw new SandboxRuntimeError(
      'TemplateBuildFailed',
      "the image has no /bin/sh and nube's static shell is not installed on this host (scripts/install-static-sh.sh)",
    );
  }
  // /bin may be a symlink (usr-merged images): the link goes where the sandbox would look.
  const bin = (await resolveInside(rootfs, '/bin')) ?? `${rootfs}/bin`;
  if (!existsSync(bin)) {
    await mkdir(bin);
    await own(bin);
    await chmod(bin, 0o755);
  }
  await symlink('/.nube/sh', `${bin}/sh`);
  await own(`${bin}/sh`);
  onProgress("the image has no /bin/sh: nube's static shell is /bin/sh");
}

/**
 * Makes build `build` of imported template `name` (idempotent: an existing build is returned) and
 * makes it the current one. A failed fill leaves nothing on disk.
 */
export async function importTemplate(
  o: { templatesDir: string; binDir: string; staticShDir: string | null; ids: ImportIds },
  name: string,
  build: string,
  fill: FillRootfs,
  onProgress: ProgressFn = () => {},
): Promise<TemplateInfo> {
  if (!isImported(name) || !/^[0-9a-f]{8,64}$/.test(build))
    throw new SandboxRuntimeError('InvalidInput', `invalid imported template ${name}/${build}`);
  const dir = `${o.templatesDir}/${name}/${build}`;
  const setCurrent = async () => {
    const tmp = `${currentFile(o.templatesDir, name)}.${process.pid}.tmp`;
    await writeFile(tmp, build);
    await rename(tmp, currentFile(o.templatesDir, name));
  };
  await dropDeadBuilds(`${o.templatesDir}/${name}`);
  if (existsSync(`${dir}/meta.json`)) {
    await setCurrent();
    return JSON.parse(await readFile(`${dir}/meta.json`, 'utf8')) as TemplateInfo;
  }
  const started = Date.now();
  const tmp = `${dir}.building-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(`${tmp}/rootfs`, { recursive: true });
  let packages: string[] = [];
  try {
    const bins = {
      pause: await ensureStatic(o.binDir, './pause.c'),
      runas: await ensureStatic(o.binDir, '../runas.c'),
    };
    await lchown(`${tmp}/rootfs`, o.ids.uidBase, o.ids.uidBase);
    await chmod(`${tmp}/rootfs`, 0o755);
    packages = (await fill(`${tmp}/rootfs`, o.ids))?.packages ?? [];
    await addNubeParts(`${tmp}/rootfs`, o.ids, bins, o.staticShDir, onProgress);
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw e;
  }
  const info: TemplateInfo = {
    name,
    build,
    path: `${dir}/rootfs`,
    packages,
    builtAt: new Date().toISOString(),
    buildMs: Date.now() - started,
  };
  await writeFile(`${tmp}/meta.json`, JSON.stringify(info, null, 2));
  await mkdir(dirname(dir), { recursive: true });
  await rename(tmp, dir).catch(async (e: NodeJS.ErrnoException) => {
    // Another process made the same build meanwhile: theirs stands.
    await rm(tmp, { recursive: true, force: true });
    if (e.code !== 'ENOTEMPTY' && e.code !== 'EEXIST') throw e;
  });
  await setCurrent();
  return info;
}

/**
 * Gives a build imported before every import had /.nube/runas (IMPORT_VERSION 1) the program, so its
 * sandboxes run commands as the template's user without a rebuild. Called before a sandbox starts on it.
 */
export async function addRunasIfMissing(o: { binDir: string; ids: ImportIds }, info: TemplateInfo): Promise<void> {
  const target = `${info.path}/.nube/runas`;
  if (existsSync(target)) return;
  const from = await ensureStatic(o.binDir, '../runas.c');
  if (!existsSync(`${info.path}/.nube`)) {
    await mkdir(`${info.path}/.nube`);
    await lchown(`${info.path}/.nube`, o.ids.uidBase, o.ids.uidBase);
    await chmod(`${info.path}/.nube`, 0o755);
  }
  const tmp = `${target}.${process.pid}.tmp`;
  await copyFile(from, tmp);
  await lchown(tmp, o.ids.uidBase, o.ids.uidBase);
  await chmod(tmp, 0o755);
  await rename(tmp, target);
}

/**
 * Half-made builds (`<build>.building-<pid>`) of processes that are gone: a nube killed mid-import left
 * them, and its build job runs again in the next one (builds survive a restart).
 */
async function dropDeadBuilds(templateDir: string): Promise<void> {
  for (const e of await readdir(templateDir).catch(() => [] as string[])) {
    const m = /\.building-(\d+)$/.exec(e);
    if (m && Number(m[1]) !== process.pid && !isAlive(Number(m[1])))
      await rm(`${templateDir}/${e}`, { recursive: true, force: true });
  }
}

/** Removes every build of imported template `name` (the caller checked nothing stands on it). */
export async function removeImported(templatesDir: string, name: string): Promise<void> {
  if (!isImported(name)) throw new SandboxRuntimeError('InvalidInput', `${name} is not an imported template`);
  await rm(`${templatesDir}/${name}`, { recursive: true, force: true });
}
