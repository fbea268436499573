// The steps of a Dockerfile that change files, each run in a build sandbox started on its parent
// layer (the FROM image imported as the template's root filesystem, then the snapshots of the steps
// before), its changes kept as a snapshot: the next layer. A step's layer is cached by (parent
// layer, the instruction with the environment, working dir and user it runs with, the ARG values in
// scope, the digest of the context files it reads), so an edit to the last line rebuilds only that step.
import { createHash, randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import type { NetworkPolicy, SandboxRuntime } from '../../sandboxes/runtime/driver.js';
import { asUserArgv, isRootSpec, resolveSpec } from '../../sandboxes/run-as.js';
import { TemplateBuildError } from '../oci/errors.js';
import type { TemplatesRepo } from '../repo.js';
import { type ContextEntry, ContextError, readArchive, select } from './context.js';
import type { FsStep, Plan } from './plan.js';

export interface BuildBase {
  /** The driver's template the layers stand on, and its build. */
  template: string;
  build: string;
  /** A snapshot over it the steps start from (FROM another template built from a Dockerfile). */
  snapshot: string | null;
}

export interface StepsInput {
  runtime: SandboxRuntime;
  repo: TemplatesRepo;
  templateId: string;
  plan: Plan;
  base: BuildBase;
  context: Map<string, ContextEntry> | null;
  maxContextBytes: number;
  network?: NetworkPolicy;
  signal: AbortSignal;
  log(line: string): Promise<void>;
  step(k: number, n: number): Promise<void>;
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
const ARCHIVE = /\.(tar|tar\.gz|tgz)$/;

function keyOf(...parts: string[]): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(p).update('\0');
  return h.digest('hex');
}

/** Runs (or finds cached) every step; returns the top snapshot the template's sandboxes start on. */
export async function buildSteps(o: StepsInput): Promise<{ snapshot: string | null; built: number; cached: number }> {
  let snapshot = o.base.snapshot;
  let key = keyOf('base', o.base.template, o.base.build, snapshot ?? '');
  let built = 0;
  let cached = 0;
  const n = o.plan.total;
  for (let k = 1; k <= n; k++) {
    if (o.signal.aborted) throw new TemplateBuildError('Canceled', 'the build was canceled');
    await o.step(k, n);
    const label = o.plan.labels[k - 1]!;
    const s = o.plan.steps.find((x) => x.index === k);
    if (!s) {
      await o.log(`step ${k}/${n}: ${label}`);
      continue;
    }
    let files = '';
    if (s.kind === 'copy') {
      if (!o.context)
        throw new TemplateBuildError(
          'StepFailed',
          `step ${k}/${n} (line ${s.line}) ${s.add ? 'ADD' : 'COPY'} needs a context (give context: a fileId or url of a .tar/.tar.gz)`,
        );
      try {
        files = select(o.context, s.sources!).digest;
      } catch (e) {
        if (e instanceof ContextError)
          throw new TemplateBuildError('StepFailed', `step ${k}/${n} (line ${s.line}): ${e.message}`);
        throw e;
      }
    }
    // An ARG's value (a build arg) changes what the step does even where its text is the same.
    const args = Object.keys(s.args).length ? [JSON.stringify(s.args)] : [];
    const next = keyOf(key, s.text, JSON.stringify([s.env, s.workdir, s.user]), files, ...args);
    const hit = await o.repo.layer(o.templateId, next);
    if (hit && (await o.runtime.getSnapshot(hit))) {
      await o.log(`step ${k}/${n}: ${label} (cached)`);
      snapshot = hit;
      key = next;
      cached++;
      continue;
    }
    await o.log(`step ${k}/${n}: ${label}`);
    const started = Date.now();
    snapshot = await runStep(o, s, snapshot, k, n);
    await o.repo.putLayer(o.templateId, next, snapshot);
    await o.log(`step ${k}/${n} done in ${((Date.now() - started) / 1000).toFixed(2)} s`);
    key = next;
    built++;
  }
  return { snapshot, built, cached };
}

async function runStep(o: StepsInput, s: FsStep, parent: string | null, k: number, n: number): Promise<string> {
  const id = `bld-${randomBytes(8).toString('hex')}`;
  const rt = o.runtime;
  await rt.create({
    id,
    template: o.base.template,
    snapshot: parent ?? undefined,
    env: s.env,
    limits: { cpus: 2, memoryMb: 2048 },
    networkPolicy: o.network,
  });
  try {
    if (s.workdir !== '/') {
      const r = await rt.exec(id, `mkdir -p ${q(s.workdir)}`, { timeoutMs: 30_000 });
      if (r.exitCode !== 0)
        throw new TemplateBuildError(
          'StepFailed',
          `step ${k}/${n} (line ${s.line}): WORKDIR ${s.workdir} could not be made: ${r.stderr.trim().slice(-300)}`,
        );
    }
    if (s.kind === 'run') await run(o, id, s, k, n);
    else await copy(o, id, s, k, n);
    const snap = await rt.snapshot(id);
    return snap.id;
  } finally {
    await rt.destroy(id).catch(() => {});
  }
}

/**
 * The shell line of a RUN step as its USER: nube's static /.nube/runas with the user resolved in the
 * build sandbox's /etc/passwd and /etc/group (no `su` needed in the image); `su` where the layers stand
 * on a template imported before runas was added to every import (until that template is rebuilt).
 */
async function asStepUser(o: StepsInput, id: string, s: FsStep, k: number, n: number): Promise<string> {
  if (isRootSpec(s.user)) return s.command!;
  const read = (path: string) => o.runtime.readFile(id, path).then((b) => b.toString('utf8'), () => '');
  const u = resolveSpec(s.user, await read('/etc/passwd'), await read('/etc/group'));
  if (typeof u === 'string') throw new TemplateBuildError('StepFailed', `step ${k}/${n} (line ${s.line}): USER ${s.user}: ${u}`);
  const runas = asUserArgv(u, ['/bin/sh', '-c', s.command!], 'runas').map(q).join(' ');
  return `if [ -x /.nube/runas ]; then exec ${runas}; else exec su -m -s /bin/sh ${q(s.user)} -c ${q(s.command!)}; fi`;
}

async function run(o: StepsInput, id: string, s: FsStep, k: number, n: number): Promise<void> {
  const command = await asStepUser(o, id, s, k, n);
  const tail: string[] = [];
  let pending = '';
  const sink = (c: Buffer) => {
    pending += c.toString('utf8');
    const lines = pending.split('\n');
    pending = lines.pop()!;
    for (const l of lines) {
      tail.push(l);
      if (tail.length > 10) tail.shift();
      o.log(l.slice(0, 4000)).catch(() => {});
    }
  };
  const r = await o.runtime.execStream(
    id,
    ['/bin/sh', '-c', command],
    { cwd: s.workdir, env: s.env, timeoutMs: 30 * 60_000, signal: o.signal },
    { stdout: sink, stderr: sink },
  );
  if (pending) {
    tail.push(pending);
    if (tail.length > 10) tail.shift();
    await o.log(pending.slice(0, 4000));
  }
  if (o.signal.aborted) throw new TemplateBuildError('Canceled', 'the build was canceled');
  if (r.timedOut || r.exitCode !== 0) {
    const last = tail.join('\n').slice(-2000);
    throw new TemplateBuildError(
      'StepFailed',
      `RUN step ${k}/${n} (line ${s.line}) ${r.timedOut ? 'timed out' : `exited ${r.exitCode}`}${last ? `; its last lines:\n${last}` : ''}`,
    );
  }
}

async function copy(o: StepsInput, id: string, s: FsStep, k: number, n: number): Promise<void> {
  const rt = o.runtime;
  const sel = select(o.context!, s.sources!);
  const toDir = s.dest!.endsWith('/') || sel.items.length > 1 || sel.items.some((i) => !i.single);
  const script: string[] = [];
  const written: string[] = [];
  const place = async (target: string, e: ContextEntry) => {
    if (e.type === 'directory') {
      await rt.mkdir(id, target);
    } else if (e.type === 'symlink') {
      script.push(`mkdir -p ${q(posix.dirname(target))} && ln -sfn ${q(e.linkname ?? '')} ${q(target)}`);
    } else {
      await rt.writeFile(id, target, e.data);
      const mode = s.chmod ?? (e.mode & 0o111 ? (e.mode & 0o7777).toString(8) : null);
      if (mode) script.push(`chmod ${mode} ${q(target)}`);
    }
    written.push(target);
  };
  for (const item of sel.items) {
    for (const { rel, entry } of item.entries) {
      let target: string;
      if (rel === '') target = toDir ? posix.join(s.dest!, posix.basename(item.source)) : s.dest!;
      else target = posix.join(s.dest!, rel);
      if (s.add && entry.type === 'file' && ARCHIVE.test(entry.path)) {
        // ADD of a local archive: its contents go under the destination directory.
        let inner: Map<string, ContextEntry>;
        try {
          inner = await readArchive(entry.data, o.maxContextBytes);
        } catch (e) {
          throw new TemplateBuildError('StepFailed', `step ${k}/${n} (line ${s.line}): ${entry.path}: ${(e as Error).message}`);
        }
        const dir = rel === '' ? s.dest! : posix.dirname(target);
        for (const x of inner.values()) await place(posix.join(dir, x.path), x);
        continue;
      }
      await place(target, entry);
    }
  }
  if (s.chown && written.length) script.push(`chown -h ${q(s.chown)} ${written.map(q).join(' ')}`);
  if (script.length) {
    const r = await rt.exec(id, script.join(' && '), { timeoutMs: 120_000 });
    if (r.exitCode !== 0)
      throw new TemplateBuildError(
        'StepFailed',
        `step ${k}/${n} (line ${s.line}): setting owners, modes and links failed (exit ${r.exitCode}): ${r.stderr.trim().slice(-500)}`,
      );
  }
  await o.log(`copied ${written.length} entries to ${s.dest}`);
}
