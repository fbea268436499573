// The rest of E2B's control plane: fork, metrics, network updates and snapshots. A snapshot is one of
// nube's derived templates (a frozen copy of the sandbox's files, `tpl_...`): Sandbox.create(its id)
// starts from it, DELETE /templates/{id} removes it.
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { SandboxesService } from '../../areas/sandboxes/facade.js';
import type { Principal } from '../../platform/auth.js';
import { ApiError, errors } from '../../platform/errors.js';
import { toE2bId, toNubeId } from './access.js';
import type { Route, SettledSandboxes } from './control-route.js';
import { page, parseBody, parseQuery, readPageToken, single } from './query.js';

const ForkBody = z.object({ timeout: z.number().int().min(0).optional(), count: z.number().int().min(1).max(100).optional() });
const SnapshotBody = z.object({ name: z.string().min(1).max(128).regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/).optional() });
const NetworkBody = z
  .object({
    allowOut: z.array(z.string().min(1).max(255)).max(256).optional(),
    denyOut: z.array(z.string().min(1).max(255)).max(256).optional(),
    allow_internet_access: z.boolean().optional(),
  })
  .strict();
const MetricsQuery = z.object({ start: z.coerce.number().int().min(0).optional(), end: z.coerce.number().int().min(0).optional() });
const SnapshotsQuery = z.object({
  sandboxID: single.optional(),
  name: single.optional(),
  nextToken: single.optional(),
  limit: z.coerce.number().int().min(1).max(100).optional(),
});

/** Snapshots are derived templates under this key; the hash is each one's own. */
const SNAPSHOT_KEY = 'e2b-snapshot';
/** Samples kept per sandbox (one per request at most every second: a few minutes of polling). */
const MAX_SAMPLES = 360;

interface Sample {
  at: number;
  cpuUsec: number;
  cpuUsedPct: number;
  cpuCount: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

export class ControlExtras {
  /** Metrics taken so far per sandbox (in memory): E2B's metrics are a series. */
  private readonly samples = new Map<string, Sample[]>();

  constructor(
    private readonly sandboxes: SandboxesService,
    private readonly control: SettledSandboxes,
    /** Deletes one of the owner's own templates by name (E2B's template builds); absent: 501. */
    private readonly deleteOwn?: (p: Principal, name: string) => Promise<void>,
  ) {}

  async fork(p: Principal, id: string, raw: unknown) {
    const b = parseBody(ForkBody, raw);
    const parent = await this.control.settled(p, id);
    if (parent.status !== 'running') throw new ApiError(409, 'Conflict', `sandbox ${id} is ${parent.status === 'suspended' ? 'paused' : parent.status}`);
    const r = (await this.sandboxes.action(p, id, 'fork', { count: b.count ?? 1, timeoutSeconds: b.timeout ?? 15 })) as {
      sandboxes: { id: string }[];
    };
    const out = [];
    for (const child of r.sandboxes) {
      try {
        out.push({ sandbox: this.control.answer(p, await this.control.settled(p, child.id)) });
      } catch (e) {
        const status = e instanceof ApiError ? e.status : 500;
        out.push({ error: { code: status, message: e instanceof Error ? e.message : 'fork failed' } });
      }
    }
    return out;
  }

  /** A sample now (CPU use since the one before, or since the start), added to the sandbox's series. */
  private async sample(p: Principal, id: string) {
    const s = await this.sandboxes.get(p, id);
    const series = this.samples.get(id) ?? [];
    if (s.status !== 'running') return series;
    const u = await this.sandboxes.usage(p, id);
    const now = Date.now();
    const prev = series[series.length - 1];
    if (prev && now - prev.at < 1000) return series;
    const since = prev ?? { at: Date.parse(s.createdAt), cpuUsec: 0 };
    const wallUsec = Math.max(1, (now - since.at) * 1000);
    const cpuUsedPct = Math.max(0, Math.min(100, ((u.cpuUsec - since.cpuUsec) / wallUsec / s.cpuCount) * 100));
    series.push({
      at: now,
      cpuUsec: u.cpuUsec,
      cpuUsedPct: Math.round(cpuUsedPct * 100) / 100,
      cpuCount: s.cpuCount,
      memUsed: Math.max(0, u.memoryBytes - u.memoryCacheBytes),
      memTotal: s.memoryMB * 1024 * 1024,
      memCache: u.memoryCacheBytes,
      diskUsed: u.diskBytes,
      diskTotal: u.diskTotalBytes,
    });
    if (series.length > MAX_SAMPLES) series.shift();
    if (this.samples.size > 10_000) this.samples.clear();
    this.samples.set(id, series);
    return series;
  }

  async metrics(p: Principal, id: string, q: z.output<typeof MetricsQuery>) {
    const series = await this.sample(p, id);
    const start = q.start !== undefined ? q.start * 1000 : -Infinity;
    // `end` is second-precision: the whole second it names counts.
    const end = q.end !== undefined ? q.end * 1000 + 999 : Infinity;
    return series
      .filter((m) => m.at >= start && m.at <= end)
      .map(({ at, cpuUsec: _, ...m }) => ({ timestamp: new Date(at).toISOString(), timestampUnix: Math.floor(at / 1000), ...m }));
  }

  async createSnapshot(p: Principal, id: string, raw: unknown) {
    const b = parseBody(SnapshotBody, raw);
    await this.control.settled(p, id);
    const t = (await this.sandboxes.action(p, id, 'template-snapshot', {
      key: SNAPSHOT_KEY,
      hash: randomBytes(12).toString('hex'),
      ...(b.name ? { name: b.name } : {}),
    })) as { id: string; name: string | null };
    return { snapshotID: t.id, names: t.name ? [t.name] : [] };
  }

  async listSnapshots(p: Principal, q: z.output<typeof SnapshotsQuery>) {
    const { items } = (await this.sandboxes.forks.listTemplates(p, {})) as {
      items: { id: string; name: string | null; sourceSandboxId: string | null; createdAt: string }[];
    };
    const source = q.sandboxID ? toNubeId(q.sandboxID) : undefined;
    const matching = items
      .filter((t) => source === undefined || t.sourceSandboxId === source)
      .filter((t) => q.name === undefined || t.name === q.name || t.id === q.name);
    const r = page(matching, (t) => ({ at: Date.parse(t.createdAt), id: t.id }), { order: 'desc', limit: q.limit ?? 100, from: readPageToken(q.nextToken) });
    return { body: r.items.map((t) => ({ snapshotID: t.id, names: t.name ? [t.name] : [] })), next: r.next };
  }

  mount(route: Route): void {
    const id = (req: { params: { id: string } }) => toNubeId(req.params.id);
    route('POST', '/sandboxes/:id/fork', async (p, req) => ({ status: 201, body: await this.fork(p, id(req), req.body) }));
    route('GET', '/sandboxes/:id/metrics', async (p, req) => ({ status: 200, body: await this.metrics(p, id(req), parseQuery(MetricsQuery, req.query)) }));
    route('PUT', '/sandboxes/:id/network', async (p, req) => {
      const b = parseBody(NetworkBody, req.body);
      await this.sandboxes.action(p, id(req), 'network-policy', {
        internet: b.allow_internet_access !== false,
        allowOut: b.allowOut ?? [],
        denyOut: b.denyOut ?? [],
      });
      return { status: 204 };
    });
    route('POST', '/sandboxes/:id/snapshots', async (p, req) => ({ status: 201, body: await this.createSnapshot(p, id(req), req.body) }));
    route('GET', '/snapshots', async (p, req) => {
      const r = await this.listSnapshots(p, parseQuery(SnapshotsQuery, req.query));
      const headers: Record<string, string> = r.next ? { 'x-next-token': r.next } : {};
      return { status: 200, body: r.body, headers };
    });
    route('DELETE', '/templates/:id', async (p, req) => {
      if (req.params.id.startsWith('tpl_')) await this.sandboxes.forks.deleteTemplate(p, req.params.id);
      else if (this.deleteOwn) await this.deleteOwn(p, req.params.id);
      else throw errors.notImplemented('E2B templates other than snapshots on nube');
      return { status: 204 };
    });
  }
}

export { toE2bId };
