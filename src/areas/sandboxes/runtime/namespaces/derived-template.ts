// A template made from another one plus files the host provides (host-tools.ts): the parent's root
// filesystem hard-linked (seconds, no space: both are read-only lower layers, never written in place),
// then each file copied in after its sha256 is checked. All sandboxes of the template share the result
// as their lowest layer, so a large program (goose, 301 MB) is on disk once, not once per sandbox.
import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { chown, copyFile, chmod, mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { ProgressFn, TemplateInfo } from '../driver.js';
import { SandboxRuntimeError } from '../driver.js';
import type { HostFile } from './host-tools.js';
import { run } from './proc.js';

export interface DerivedRecipe {
  /** The template whose root filesystem this one starts from. */
  from: string;
  hostFiles: HostFile[];
}

async function sha256(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('hex');
}

/** Checks the host's files: the reason a build cannot start, or null. */
export async function hostFilesProblem(files: HostFile[]): Promise<string | null> {
  for (const f of files) {
    if (!existsSync(f.from)) return `${f.from} is not on this host; install it with ${f.installedBy}`;
    const sum = await sha256(f.from);
    if (sum !== f.sha256) return `${f.from} has sha256 ${sum}, expected ${f.sha256}; install it again with ${f.installedBy}`;
  }
  return null;
}

export async function buildDerived(
  t: { name: string; build: string; dir: string; meta: string; rootfs: string },
  recipe: DerivedRecipe,
  parent: TemplateInfo,
  uidBase: number,
  onProgress: ProgressFn,
): Promise<TemplateInfo> {
  const started = Date.now();
  const problem = await hostFilesProblem(recipe.hostFiles);
  if (problem) throw new SandboxRuntimeError('TemplateBuildFailed', `template ${t.name} could not be built: ${problem}`);
  const tmp = `${t.dir}.building`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  onProgress(`building template ${t.name} (${t.build}) from ${parent.name} (${parent.build})`);
  try {
    await run('cp', ['-al', parent.path, `${tmp}/rootfs`]);
    for (const f of recipe.hostFiles) {
      const to = `${tmp}/rootfs${f.to}`;
      await mkdir(dirname(to), { recursive: true });
      await copyFile(f.from, to);
      // Owned by root inside the sandbox (uid 0 there is uidBase here); readable and runnable by all.
      await chown(to, uidBase, uidBase);
      await chmod(to, 0o755);
      onProgress(`copied ${f.from} to ${f.to}`);
    }
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw new SandboxRuntimeError('TemplateBuildFailed', `template ${t.name} could not be built: ${(e as Error).message.slice(-500)}`);
  }
  const info: TemplateInfo = {
    name: t.name,
    build: t.build,
    path: t.rootfs,
    packages: parent.packages,
    builtAt: new Date().toISOString(),
    buildMs: Date.now() - started,
  };
  await writeFile(`${tmp}/meta.json`, JSON.stringify(info, null, 2));
  if (existsSync(t.dir)) await rename(t.dir, `${t.dir}.replaced-${Date.now()}`);
  await rename(tmp, t.dir);
  onProgress(`template ${t.name} built in ${(info.buildMs / 1000).toFixed(1)} s`);
  return info;
}
