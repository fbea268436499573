// One-call launch: fetch the source on the host (through the outbound guard) into the box, then a
// durable job builds it inside the box as root there (never on the host), swaps it in as /app, starts
// it under the supervisor, waits for its first answer and publishes a release (the first launch's is
// the recovery release). The request waits for the job; GET /machines/{id} shows its phase meanwhile.
import { createReadStream } from 'node:fs';
import type { z } from 'zod';
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { cutShort, type JobContext } from '../../platform/jobs.js';
import { runPinned } from '../../platform/nodes.js';
import type { MachineApps } from './app.js';
import { join } from 'node:path';
import { Spool } from '../../platform/spool.js';
import { type Fetched, fetchSource, type Source } from './fetch-source.js';
import type { LaunchResult } from './schemas.js';
import type { Releases } from './releases.js';
import type { MachineRow, OrderRow } from './repo.js';
import type { Overrides } from './runspec.js';
import type { MachinesCore } from './service.js';
import type { SandboxVolume } from '../sandboxes/volume-binder.js';
import { APP_DIR, LOG_FILE } from './supervisor.js';
import { tierNamed } from './tiers.js';

export const LAUNCH_JOB = 'machines.launch';
const INCOMING = '/opt/nube/incoming';
const NEW_TREE = `${APP_DIR}.new`;
/** How long a launch request waits for its build before answering what it has. */
const WAIT_MS = 15 * 60_000;
const BUILD_TIMEOUT_S = 600;

export interface LaunchInput {
  repo?: string;
  ref?: string;
  archiveUrl?: string;
  sandboxId?: string;
  tier?: string;
  name?: string;
  domain?: string;
  port?: number;
  buildCommand?: string;
  startCommand?: string;
  env?: Record<string, string>;
  /** Volumes of a new machine (as CreateMachineInput's). */
  volumes?: SandboxVolume[];
}

type Result = z.input<typeof LaunchResult>;
const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export class Launcher {
  /** Where a fetched source waits on the host's disk until it is written into the box. */
  private readonly spool: Spool;

  constructor(
    private readonly core: MachinesCore,
    private readonly apps: MachineApps,
    private readonly releases: Releases,
  ) {
    this.spool = new Spool(join(core.deps.config.dataDir, 'spool', 'machines'));
  }

  private get sbx() {
    return this.core.s.sandboxes;
  }

  async launch(p: Principal, input: LaunchInput, orderId: string | null = null): Promise<Result | { checkoutUrl: string }> {
    // The domain is checked before anything is built (plan, name, not another account's).
    if (input.domain !== undefined) await this.core.s.domains.claims.precheck(p, input.domain, ['body', 'domain']);
    // A launch runs on the machine's node (relayed there before the source is fetched): its box is there.
    let found: MachineRow | undefined;
    if (input.sandboxId !== undefined) {
      found = await this.core.repo.bySandbox(input.sandboxId);
      if (!found || found.owner_id !== p.ownerId) throw errors.notFound('machine with that sandboxId');
      await this.core.deps.nodes.assertHere(found.node_id, 'machine');
    } else {
      await this.core.placeBox(p, { volumes: input.volumes });
    }
    const fetched: Fetched[] = [];
    try {
      return await runPinned(() => this.launchHere(p, input, orderId, found ?? null, fetched));
    } finally {
      for (const f of fetched) await f.file.remove();
    }
  }

  private async launchHere(p: Principal, input: LaunchInput, orderId: string | null, found: MachineRow | null, spooled: Fetched[]): Promise<Result | { checkoutUrl: string }> {
    let m: MachineRow | null = null;
    if (found) {
      m = found;
      this.assertCanBuild(m.tier);
      if (input.repo === undefined && input.archiveUrl === undefined && m.source === null) {
        throw errors.validation([{ path: ['body', 'repo'], message: 'this machine was never launched from a source: give repo or archiveUrl' }]);
      }
    } else {
      this.assertCanBuild(input.tier ?? 'micro');
      this.core.tierOf({ tier: input.tier ?? 'micro', cpuMode: 'shared' });
    }
    const source: Source =
      input.repo !== undefined
        ? { kind: 'git', url: input.repo, ref: input.ref ?? null }
        : input.archiveUrl !== undefined
          ? { kind: 'archive', url: input.archiveUrl }
          : (JSON.parse(m!.source!) as Source);
    // The source first: a refused or unreachable one leaves no machine behind.
    const fetched = await fetchSource(this.core.deps.outbound, this.spool, source);
    spooled.push(fetched);
    if (m === null) {
      const tier = input.tier ?? 'micro';
      const created = await this.core.create(p, { tier, cpuMode: 'shared', diskAddonsGB: 0, name: input.name, volumes: input.volumes }, orderId, 'launch', input);
      if ('checkoutUrl' in created) return created;
      m = (await this.core.repo.get(created.id))!;
    }
    if (input.domain !== undefined) await this.core.s.domains.claims.claim(p, input.domain, { kind: 'machine', id: m.id, port: null }, m.workspace_id);
    m = await this.untilBoxRuns(p, m);
    await this.deliver(p, m, fetched);
    const overrides: Overrides = {
      ...(input.startCommand ? { start: input.startCommand } : {}),
      ...(input.buildCommand ? { build: input.buildCommand } : {}),
      ...(input.port ? { port: input.port } : {}),
      ...(input.env ? { env: input.env } : {}),
    };
    // `sandboxId` alone redeploys as before (same overrides); a new source starts from its own.
    const fresh = input.repo !== undefined || input.archiveUrl !== undefined || Object.keys(overrides).length > 0;
    const keep = fresh ? JSON.stringify(overrides) : m.overrides;
    await this.core.repo.update(m.id, { source: JSON.stringify(source), overrides: keep, status: 'building', phase: 'queued', last_launch: null });
    await this.core.deps.jobs.enqueue(this.core.deps.nodes.jobType(LAUNCH_JOB, m.node_id), { machineId: m.id, commit: fetched.commit ?? null }, { key: `machine-launch:${m.id}`, onDuplicate: 'replace' });
    if (orderId !== null) return { machineId: m.id, sandboxId: m.sandbox_id, releaseId: null, url: null, domain: null, status: 'building', buildLog: '', error: null };
    return this.await(m.id);
  }

  assertCanBuild(tierName: string): void {
    const tier = tierNamed(tierName);
    if (tier && !tier.canBuild) {
      throw errors.validation([
        { path: ['body', 'tier'], message: `${tier.name} cannot sustain a build: launch onto micro or larger (a nano box can run a prebuilt app created with POST /machines)` },
      ]);
    }
  }

  private async untilBoxRuns(p: Principal, m: MachineRow): Promise<MachineRow> {
    const end = Date.now() + 10 * 60_000;
    for (;;) {
      const r = await this.core.refresh(p, (await this.core.repo.get(m.id))!);
      if (r.status !== 'provisioning') return r;
      if (Date.now() > end) throw errors.conflict('the machine box did not start in time', 'MachineStarting');
      await new Promise((res) => setTimeout(res, 250));
    }
  }

  /** Writes the fetched bytes into the box (the job unpacks them; they survive a restart of nube). */
  private async deliver(p: Principal, m: MachineRow, f: Fetched): Promise<void> {
    await this.sbx.work.exec(p, m.sandbox_id, { command: `rm -rf ${INCOMING} && mkdir -p ${INCOMING}`, timeoutSeconds: 60 });
    await this.sbx.work.writeFrom(p, m.sandbox_id, `${INCOMING}/source.${f.kind}`, createReadStream(f.file.path, { start: f.start }));
  }

  /** Waits for the launch job to finish and answers its result. */
  async await(id: string): Promise<Result> {
    const end = Date.now() + WAIT_MS;
    for (;;) {
      const r = await this.core.repo.get(id);
      if (!r) throw errors.notFound('machine');
      if (r.last_launch) return JSON.parse(r.last_launch) as Result;
      if (Date.now() > end) {
        return { machineId: r.id, sandboxId: r.sandbox_id, releaseId: null, url: r.url, domain: null, status: 'building', buildLog: '', error: null };
      }
      await new Promise((res) => setTimeout(res, 200));
    }
  }

  /** A paid launch order: the machine is created and its launch runs in the background. */
  async fulfil(p: Principal, o: OrderRow): Promise<string> {
    const r = await this.launch(p, JSON.parse(o.input) as LaunchInput, o.id);
    if ('checkoutUrl' in r) throw new Error('a paid order asked for payment again');
    return r.machineId;
  }

  private async phase(id: string, phase: string | null): Promise<void> {
    await this.core.repo.update(id, { phase });
  }

  private async sh(p: Principal, m: MachineRow, command: string, timeoutSeconds = 300) {
    return this.sbx.work.exec(p, m.sandbox_id, { command, timeoutSeconds });
  }

  /**
   * The job: unpack, build, swap in, start (waiting until the app serves), publish. Run again from the
   * start after a crash. An attempt cut by nube's own stop (the build's exec ends with nube) is not the
   * launch's failure: it is handed back to the queue and runs again when nube is back.
   */
  async run(job: { machineId: string; commit: string | null }, ctx: Pick<JobContext, 'signal' | 'stopping'>): Promise<void> {
    const m0 = await this.core.repo.get(job.machineId);
    // Gone, or this launch already answered (a rerun after a crash between the result and the job's end).
    if (!m0 || m0.status === 'deleted' || m0.last_launch !== null) return;
    const p = await this.core.principalOf(m0.owner_id);
    let m = m0;
    let buildLog = '';
    const fail = async (message: string) => {
      if (cutShort(ctx)) throw new Error(`launch cut by the stop of nube: ${message}`);
      const now = (await this.core.repo.get(m.id)) ?? m;
      const result: Result = { machineId: m.id, sandboxId: m.sandbox_id, releaseId: now.current_release_id, url: now.url, domain: null, status: 'failed', buildLog, error: message };
      await this.core.repo.update(m.id, {
        // With a supervisor the machine runs (the previous app, or the new one failing: its status says which).
        status: now.supervisor_exec_id ? 'running' : 'failed',
        phase: null,
        last_error: message,
        last_launch: JSON.stringify(result),
      });
    };
    try {
      await this.core.repo.update(m.id, { status: 'building', phase: 'unpacking' });
      const unpack = await this.sh(p, m, unpackScript(job.commit));
      if (unpack.exitCode !== 0) {
        buildLog = unpack.stderr.slice(-4000);
        return await fail(`could not unpack the source: ${unpack.stderr.slice(-500)}`);
      }
      const spec = await this.apps.runspecOf(p, m, NEW_TREE);
      await this.phase(m.id, 'building');
      if (spec.build) {
        const b = await this.sbx.work.exec(p, m.sandbox_id, { command: buildScript(spec.build), timeoutSeconds: BUILD_TIMEOUT_S, env: this.core.caEnv() });
        buildLog = b.stdout.slice(-4000);
        if (b.exitCode !== 0) return await fail(`the build failed (exit ${b.exitCode ?? 'timeout'}); see the logs`);
      }
      await this.phase(m.id, 'starting');
      const swap = await this.sh(p, m, `set -e; rm -rf ${APP_DIR}.prev; if [ -e ${APP_DIR} ]; then mv ${APP_DIR} ${APP_DIR}.prev; fi; mv ${NEW_TREE} ${APP_DIR}; rm -rf ${APP_DIR}.prev`);
      if (swap.exitCode !== 0) return await fail(`could not swap the new tree in: ${swap.stderr.slice(-500)}`);
      // The machine stays `building` until its release is published; the restart answers once the app serves.
      await this.apps.restart(p, m.id, { keepStatus: true });
      await this.phase(m.id, 'publishing');
      const first = (await this.core.repo.releases(m.id)).length === 0;
      const rel = await this.releases.publish(p, m.id, job.commit ? `launch ${job.commit.slice(0, 12)}` : 'launch', first ? 'recovery' : 'launch');
      m = (await this.core.repo.get(m.id))!;
      const [domain = null] = await this.core.domainsOf(m.id);
      const result: Result = { machineId: m.id, sandboxId: m.sandbox_id, releaseId: rel.id, url: m.url, domain, status: 'running', buildLog, error: null };
      await this.core.repo.update(m.id, { status: 'running', phase: null, last_error: null, last_launch: JSON.stringify(result) });
    } catch (e) {
      if (cutShort(ctx)) throw e;
      await fail(e instanceof ApiError ? e.message : (e as Error).message);
    }
  }
}

/** Unpacks /opt/nube/incoming/source.* into /app.new (one top-level directory is stripped). */
function unpackScript(commit: string | null): string {
  return `set -e
rm -rf ${NEW_TREE}; mkdir -p ${NEW_TREE}; cd ${NEW_TREE}
f=$(ls ${INCOMING}/source.* | head -n1)
case "$f" in
  *.tar.gz) tar -xzf "$f" --no-same-owner ;;
  *.tar) tar -xf "$f" --no-same-owner ;;
  *.zip) python3 -m zipfile -e "$f" . ;;
  *.git-pack)
    git init -q --bare ${INCOMING}/repo.git
    git --git-dir=${INCOMING}/repo.git unpack-objects -q < "$f"
    git --git-dir=${INCOMING}/repo.git archive ${q(commit ?? 'HEAD')} | tar -x --no-same-owner ;;
esac
if [ "$(ls -A | wc -l)" = 1 ] && [ -d "$(ls -A)" ]; then d=$(ls -A); mv "$d" ../.nube-strip; rmdir ${NEW_TREE}; mv ../.nube-strip ${NEW_TREE}; fi`;
}

/** Runs the build in the new tree; its output goes to the machine's log with a [build] prefix, and back. */
function buildScript(build: string): string {
  return `exec bash -c ${q(buildBash(build))}`;
}

function buildBash(build: string): string {
  return `cd ${NEW_TREE} && mkdir -p $(dirname ${LOG_FILE}) && { printf '%s [build] $ %s\\n' "$(date -u +%FT%TZ)" ${q(build)}; } >> ${LOG_FILE}
set -o pipefail
bash -c ${q(build)} 2>&1 | while IFS= read -r line; do printf '%s [build] %s\\n' "$(date -u +%FT%TZ)" "$line" >> ${LOG_FILE}; printf '%s\\n' "$line"; done`;
}
