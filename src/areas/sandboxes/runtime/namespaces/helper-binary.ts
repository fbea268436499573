import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, appendFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { run } from './proc.js';

export interface HelperPaths {
  helper: string;
  seccompBpf: string;
}

function sourcePath(): string {
  const here = fileURLToPath(new URL('./helper/nube-helper.c', import.meta.url));
  if (existsSync(here)) return here;
  // Compiled to dist/: tsc does not copy the C file, so fall back to the source tree.
  const fromDist = here.replace(`${'/dist/'}src/`, '/src/');
  if (existsSync(fromDist)) return fromDist;
  throw new Error(`nube-helper.c not found near ${here}`);
}

/** Compile the helper once per source version into $DATA/bin and export the seccomp BPF beside it. */
export async function ensureHelper(dataDir: string): Promise<HelperPaths> {
  const src = sourcePath();
  // nube-helper.c includes launch.c (which includes disk.c), resident.c and the static sh's wait-mode header: all five make the binary.
  const parts = [src, src.replace(/nube-helper\.c$/, 'launch.c'), src.replace(/nube-helper\.c$/, 'disk.c'), src.replace(/nube-helper\.c$/, 'resident.c'), src.replace(/namespaces\/helper\/nube-helper\.c$/, 'static-sh-wait.h')];
  const hash = createHash('sha256');
  for (const text of await Promise.all(parts.map((p) => readFile(p)))) hash.update(text);
  const hash12 = hash.digest('hex').slice(0, 12);
  const dir = `${dataDir}/bin`;
  const helper = `${dir}/nube-helper-${hash12}`;
  const seccompBpf = `${dir}/seccomp-${hash12}.bpf`;
  if (existsSync(helper) && existsSync(seccompBpf)) return { helper, seccompBpf };
  await mkdir(dir, { recursive: true });
  const tmp = `${helper}.${process.pid}.tmp`;
  await run('gcc', ['-O2', '-Wall', '-o', tmp, src, '-lseccomp']);
  await rename(tmp, helper);
  await run(helper, ['bpf', `${seccompBpf}.${process.pid}.tmp`]);
  await rename(`${seccompBpf}.${process.pid}.tmp`, seccompBpf);
  return { helper, seccompBpf };
}

/** newuidmap/newgidmap (used by `unshare --map-users`) only grant ranges listed for root here. */
export async function ensureSubordinateIds(base: number, count: number): Promise<void> {
  for (const file of ['/etc/subuid', '/etc/subgid']) {
    const text = existsSync(file) ? await readFile(file, 'utf8') : '';
    const has = text.split('\n').some((line) => {
      const [user, start, n] = line.split(':');
      return user === 'root' && Number(start) <= base && Number(start) + Number(n) >= base + count;
    });
    if (!has) await appendFile(file, `${text && !text.endsWith('\n') ? '\n' : ''}root:${base}:${count}\n`);
  }
}
