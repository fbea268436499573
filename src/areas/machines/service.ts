import { DEFAULT_WORKSPACE } from '../../platform/workspaces.js';
// Machines: always-on boxes. A machine is a row here plus a sandbox (the sandboxes service's) that
// never expires; what runs in it is the app layer's (app.ts). Knows nothing of HTTP.
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import type { z } from 'zod';
import type { Principal } from '../../platform/auth.js';
import { safeEqual, sha256Hex } from '../../platform/crypto.js';
import { ApiError, errors } from '../../platform/errors.js';
import { runPinned } from '../../platform/nodes.js';
import type { OutboxEvent } from '../../platform/outbox.js';
import { BASE62, newId, randomToken } from '../../platform/ids.js';
import type { Services } from '../../platform/operation.js';
import { PLANS } from '../../platform/plans.js';
import type { PaymentProvider, ProviderPayment } from '../../platform/payments.js';
import type { PlatformDeps } from '../deps.js';
import type { KeyRequest } from '../account/service.js';
import type { SandboxVolume } from '../sandboxes/volume-binder.js';
import { type AppHealth, AppHealthCheck } from './app-health.js';
import type { Machine } from './schemas.js';
import type { MachineRow, MachinesRepo, OrderRow } from './repo.js';
import { type Tier, monthlyPrice, proratedCentavos, tierNamed, TIERS } from './tiers.js';

export interface CreateMachineInput {
  tier: string;
  cpuMode: 'shared' | 'reserved';
  diskAddonsGB: number;
  template?: string;
  name?: string;
  fromSandboxId?: string;
  /** Volumes the machine holds and its box mounts, kept across its restarts and releases. */
  volumes?: SandboxVolume[];
  /** A key nube mints for the machine's own code (NUBE_API_KEY), revoked with the machine. */
  nubeKey?: Omit<KeyRequest, 'name'>;
  /** The workspace it lands in (its box too); resolved in create. */
  workspaceId?: string;
}

export type MachineView = z.input<typeof Machine>;
type Deps = Pick<Services, 'sandboxes' | 'account' | 'domains'>;

const EXTRA_CA_PATH = '/usr/local/share/ca-certificates/nube-extra.crt';
const iso = (ms: number) => new Date(ms).toISOString();

export class MachinesCore {
  readonly health: AppHealthCheck;

  constructor(
    readonly repo: MachinesRepo,
    readonly deps: PlatformDeps,
    readonly s: Deps,
    readonly payments: PaymentProvider,
  ) {
    this.health = new AppHealthCheck({
      repo,
      sandboxes: s.sandboxes,
      readBox: (p, r, path) => this.readBox(p, r, path),
      startTimeoutMs: deps.config.machines.startTimeoutMs,
    });
  }

  tiers() {
    return { tiers: TIERS };
  }

  async principalOf(ownerId: string): Promise<Principal> {
    return { scheme: 'owner', ownerId, plan: await this.s.account.planOf(ownerId) };
  }

  /** The caller's live machine; another owner's, a deleted one or none at all is a 404. */
  async own(p: Principal, id: string): Promise<MachineRow> {
    const r = await this.repo.get(id);
    if (!r || r.owner_id !== p.ownerId || r.status === 'deleted' || !this.deps.workspaces.sees(p, r.workspace_id)) throw errors.notFound('machine');
    return r;
  }

  /** The custom domains attached to a machine (the domains area holds them). */
  domainsOf(id: string): Promise<string[]> {
    return this.s.domains.namesOf('machine', id);
  }

  /** The row as the API shows it; with the app's health, the status and lastError are the app's. */
  view(r: MachineRow, domains: string[] = [], app: AppHealth | null = null, volumes: SandboxVolume[] = []): MachineView {
    const down = app !== null && app.status !== 'running';
    return {
      id: r.id,
      name: r.name,
      status: r.status === 'deleted' ? 'stopped' : app && r.status === 'running' ? app.status : r.status,
      tier: r.tier,
      cpuMode: r.cpu_mode,
      diskAddonsGB: r.disk_addons_gb,
      monthlyMxn: r.monthly_centavos / 100,
      sandboxId: r.sandbox_id,
      template: r.template,
      url: r.url,
      domains,
      volumes,
      currentReleaseId: r.current_release_id,
      phase: r.phase,
      pendingRestart: r.pending_restart === 1,
      lastError: down && r.status === 'running' ? app.message : r.last_error,
      app: app && { restarts: app.restarts, lastExit: app.lastExit, oomKills: app.oomKills },
      createdAt: iso(r.created_at),
      updatedAt: iso(r.updated_at),
      workspaceId: r.workspace_id,
    };
  }

  /**
   * What GET and list answer: `lost` with the reason while the machine's node is down, else the row
   * brought up to date.
   */
  async show(p: Principal, r: MachineRow): Promise<MachineView> {
    const [domains, volumes] = await Promise.all([this.domainsOf(r.id), this.s.sandboxes.volumesOf(r.id)]);
    const lost = r.status === 'deleted' ? null : await this.deps.nodes.lostReason(r.node_id);
    if (lost) return { ...this.view(r, domains, null, volumes), status: 'lost', lastError: lost };
    const fresh = await this.refresh(p, r);
    return this.view(fresh, domains, await this.appHealth(p, fresh), volumes);
  }

  /** The app's health when one was started here (another node's box is read there, not from here). */
  async appHealth(p: Principal, r: MachineRow): Promise<AppHealth | null> {
    if (r.status !== 'running' || (r.node_id && r.node_id !== this.deps.nodes.id)) return null;
    return this.health.of(asAccount(p), r).catch((e: unknown) => {
      this.deps.log.warn({ err: e, machine: r.id }, "could not read the app's health");
      return null;
    });
  }

  /** A file of the machine's box as text; null when absent, a directory, or the box is not running. */
  async readBox(p: Principal, r: MachineRow, path: string): Promise<string | null> {
    try {
      const f = await this.s.sandboxes.work.file(p, r.sandbox_id, 'read', { path });
      const content = String(f.content);
      return f.encoding === 'base64' ? Buffer.from(content, 'base64').toString('utf8') : content;
    } catch (e) {
      if (e instanceof ApiError && [400, 404, 409].includes(e.status)) return null;
      throw e;
    }
  }

  /**
   * A provisioning machine becomes running (or failed) when its box has started. Another node's
   * machine is brought up to date there (every request for it is forwarded to its node).
   */
  async refresh(caller: Principal, r: MachineRow): Promise<MachineRow> {
    if (r.status !== 'provisioning') return r;
    if (r.node_id && r.node_id !== this.deps.nodes.id) return r;
    const p = asAccount(caller);
    const sbx = await this.s.sandboxes.get(p, r.sandbox_id).catch(() => null);
    if (!sbx) return r;
    if (sbx.status === 'running') {
      // The app tree and the log directory exist from the start, so files can be written to /app.
      await this.s.sandboxes.work.exec(p, r.sandbox_id, { command: 'mkdir -p /app /var/log/nube /opt/nube', timeoutSeconds: 30 });
      await this.trustExtraCas(p, r.sandbox_id);
      await this.repo.update(r.id, { status: 'running' });
      return { ...r, status: 'running' };
    }
    if (sbx.status === 'failed') {
      const patch = { status: 'failed' as const, last_error: sbx.error ?? 'the box failed to start' };
      await this.repo.update(r.id, patch);
      return { ...r, ...patch };
    }
    return r;
  }

  /**
   * The operator's extra CA certificates (NUBE_EXTRA_CA_BUNDLE) join the box's trust store, so `npm
   * install` or `pip install` inside work behind a TLS-inspecting proxy; caEnv() points Node and
   * Python at them too.
   */
  async trustExtraCas(p: Principal, sandboxId: string): Promise<void> {
    const file = this.deps.config.machines.extraCaBundle;
    if (!file) return;
    const pem = await readFile(file, 'utf8');
    await this.s.sandboxes.work.file(p, sandboxId, 'write', { path: EXTRA_CA_PATH, content: pem });
    const out = await this.s.sandboxes.work.exec(p, sandboxId, {
      command: `update-ca-certificates >/dev/null 2>&1 || cat ${EXTRA_CA_PATH} >> /etc/ssl/certs/ca-certificates.crt`,
      timeoutSeconds: 60,
    });
    if (out.exitCode !== 0) throw errors.conflict(`could not add the extra CA bundle: ${out.stderr.slice(0, 300)}`, 'CaBundleFailed');
  }

  caEnv(): Record<string, string> {
    if (!this.deps.config.machines.extraCaBundle) return {};
    const all = '/etc/ssl/certs/ca-certificates.crt';
    return { NODE_EXTRA_CA_CERTS: EXTRA_CA_PATH, SSL_CERT_FILE: all, REQUESTS_CA_BUNDLE: all, PIP_CERT: all };
  }

  async list(p: Principal, workspaceId?: string) {
    const rows = await this.repo.list(p.ownerId, await this.deps.workspaces.filter(p, workspaceId));
    return { machines: await Promise.all(rows.map((r) => this.show(p, r))) };
  }

  async get(p: Principal, id: string) {
    return this.show(p, await this.own(p, id));
  }

  tierOf(input: { tier: string; cpuMode: 'shared' | 'reserved' }): Tier {
    const tier = tierNamed(input.tier);
    if (!tier) {
      throw errors.validation([{ path: ['body', 'tier'], message: `unknown tier; one of ${TIERS.map((t) => t.name).join(', ')}` }]);
    }
    if (input.cpuMode === 'reserved' && tier.reservedMonthlyMxn === null) {
      throw errors.validation([{ path: ['body', 'cpuMode'], message: `tier ${tier.name} has no reserved CPU; use shared` }]);
    }
    return tier;
  }

  /**
   * Reserved CPU on one host: the cores of all reserved boxes together never pass the host's cores,
   * so a reserved box's quota is never oversubscribed by other reserved boxes. Counted per node: the
   * check runs on the node the box was placed on.
   */
  async assertReservedCapacity(tier: Tier): Promise<void> {
    const taken = (await this.repo.reservedRows(this.deps.nodes.id)).reduce((n, r) => n + (tierNamed(r.tier)?.vcpus ?? 0), 0);
    const cores = availableParallelism();
    if (taken + tier.vcpus > cores) {
      throw errors.conflict(
        `no reserved CPU left on this host: ${taken} of ${cores} cores are reserved, ${tier.name} needs ${tier.vcpus}`,
        'NoReservedCapacity',
        { reservedCores: taken, hostCores: cores },
      );
    }
  }

  /** Whether the plan has a box left (machines paid through an order do not count against it). */
  async hasBoxLeft(p: Principal): Promise<boolean> {
    return (await this.repo.count(p.ownerId)) < PLANS[p.plan].boxes;
  }

  async create(
    p: Principal,
    input: CreateMachineInput,
    orderId: string | null = null,
    kind: OrderRow['kind'] = 'create',
    orderInput: unknown = input,
  ): Promise<MachineView | { checkoutUrl: string }> {
    const tier = this.tierOf(input);
    input = { ...input, workspaceId: await this.deps.workspaces.forCreate(p, input.workspaceId) };
    await this.placeBox(p, input);
    // Placed here: the box's sandbox stays on this node (the scheduler is not asked twice).
    return runPinned(() => this.createHere(p, tier, input, orderId, kind, orderInput));
  }

  /**
   * The machine lives on its box's node: the sandbox it is made from, or where the scheduler puts a
   * new one. Elsewhere: ElsewhereError, and the REST layer relays the whole request there.
   */
  async placeBox(p: Principal, input: { fromSandboxId?: string; template?: string; volumes?: SandboxVolume[] }): Promise<void> {
    if (input.volumes?.length) {
      // The box keeps the sandbox's own mounts when promoted: volumes go to a new box only.
      if (input.fromSandboxId !== undefined)
        throw errors.badRequest('volumes apply to a new box: a promoted sandbox keeps its own mounts', [
          { path: ['body', 'volumes'], message: 'not with fromSandboxId' },
        ]);
      // Where the volumes are (404 for another account's): the box is made there.
      await this.s.sandboxes.placeWithVolumes(p.ownerId, input.volumes);
    } else if (input.fromSandboxId !== undefined) {
      await this.s.sandboxes.get(p, input.fromSandboxId);
      await this.deps.nodes.assertHere(await this.s.sandboxes.nodeOf(input.fromSandboxId), 'sandbox');
    } else {
      await this.s.sandboxes.placeHere(p.ownerId, input.template ?? 'base');
    }
  }

  private async createHere(
    p: Principal,
    tier: Tier,
    input: CreateMachineInput,
    orderId: string | null,
    kind: OrderRow['kind'],
    orderInput: unknown,
  ): Promise<MachineView | { checkoutUrl: string }> {
    if (input.cpuMode === 'reserved') await this.assertReservedCapacity(tier);
    if (input.fromSandboxId !== undefined) {
      if (await this.repo.bySandbox(input.fromSandboxId)) {
        throw errors.conflict('that sandbox is a machine already', 'AlreadyMachine');
      }
    }
    const monthlyCentavos = Math.round(monthlyPrice(tier, input.cpuMode, input.diskAddonsGB) * 100);
    if (orderId === null && !(await this.hasBoxLeft(p))) {
      const what = kind === 'launch' ? ', launched from its source' : '';
      // The order is carried out later as the account, not as this caller: its scope could not bound the key.
      if (input.nubeKey) throw errors.notImplemented('nubeKey on a machine paid through checkout');
      return this.checkout(p, kind, orderInput, monthlyCentavos, `Machine ${tier.name} (${input.cpuMode} CPU)${what}, one month`);
    }
    if (input.nubeKey && orderId !== null) throw errors.notImplemented('nubeKey on a machine paid through checkout');
    const id = newId('mch');
    const name = input.name ?? id;
    // Minted within the caller's scope before the box exists, revoked if the create fails after.
    // The key is bound to the machine's own workspace unless it names its workspaces.
    const nubeEnv = input.nubeKey ? await this.mintKey(p, id, { ...input.nubeKey, workspaceIds: input.nubeKey.workspaceIds ?? [input.workspaceId ?? DEFAULT_WORKSPACE] }) : {};
    const unmint = () => (input.nubeKey ? this.s.account.revokeHeld(p.ownerId, `machine:${id}`) : Promise.resolve());
    const volumes = input.volumes ?? [];
    // Held by the machine, not its box: a box made again (or none for a while) keeps them.
    await this.s.sandboxes.holdVolumes(p, id, volumes).catch(async (e: unknown) => {
      await unmint();
      throw e;
    });
    const unhold = async () => {
      await this.s.sandboxes.releaseVolumes(id);
      await unmint();
    };
    let sandboxId: string;
    if (input.fromSandboxId !== undefined) {
      sandboxId = input.fromSandboxId;
    } else {
      const sbx = await this.s.sandboxes.create(p, {
        ...(volumes.length ? { volumes, volumeHolder: id } : {}),
        template: input.template ?? 'base',
        timeoutSeconds: 60,
        suspendOnIdle: false,
        name: `machine ${name}`,
        workspaceId: input.workspaceId,
        metadata: { machineId: id },
        env: nubeEnv,
        limits: {
          cpus: tier.vcpus,
          memoryMb: tier.memoryMB,
          diskMb: (tier.diskGB + input.diskAddonsGB) * 1024,
        },
      }).catch(async (e: unknown) => {
        await unhold();
        throw e;
      });
      sandboxId = sbx.id;
    }
    const now = Date.now();
    const row: MachineRow = {
      id,
      owner_id: p.ownerId,
      name,
      tier: tier.name,
      cpu_mode: input.cpuMode,
      disk_addons_gb: input.diskAddonsGB,
      monthly_centavos: monthlyCentavos,
      sandbox_id: sandboxId,
      template: input.template ?? (input.fromSandboxId ? null : 'base'),
      status: 'provisioning',
      runspec: null,
      secrets_sealed: input.nubeKey ? this.deps.secretBox.seal(JSON.stringify(nubeEnv)) : null,
      pending_restart: 0,
      supervisor_exec_id: null,
      port: null,
      url: null,
      current_release_id: null,
      last_error: null,
      order_id: orderId,
      source: null,
      overrides: null,
      phase: null,
      last_launch: null,
      node_id: this.deps.nodes.id,
      app_watch: null,
      created_at: now,
      updated_at: now,
      workspace_id: input.workspaceId ?? DEFAULT_WORKSPACE,
    };
    try {
      await this.s.sandboxes.keepAlive(p, sandboxId);
      await this.repo.insert(row);
      await this.onCreated?.(id);
    } catch (e) {
      if (input.fromSandboxId === undefined) await this.s.sandboxes.delete(p, sandboxId).catch(() => {});
      await unhold();
      throw e;
    }
    return this.view(await this.refresh(p, row), [], null, await this.s.sandboxes.volumesOf(id));
  }

  /** The machine's own key: within the caller's scope (the account checks), held by the machine. */
  private async mintKey(p: Principal, id: string, k: Omit<KeyRequest, 'name'>): Promise<Record<string, string>> {
    const { secret } = await this.s.account.createKeyFor(p, { ...k, name: `machine ${id}`, holder: `machine:${id}` });
    // The box API, not the public URL: the key works only from this box, through it (docs/decisions.md).
    return { NUBE_API_KEY: secret, NUBE_BASE_URL: await this.deps.boxApiUrl() };
  }

  /**
   * An order for the machine, paid through the payment provider: a Stripe Checkout Session whose
   * signed webhook completes it (providerPaid), or nube's own page the operator confirms (confirmOrder).
   * Either way the payer lands on `/checkout/<token>`, which shows the order and its machine once paid.
   */
  private async checkout(p: Principal, kind: 'create' | 'launch', input: unknown, amountCentavos: number, description: string) {
    const token = randomToken(40, BASE62);
    const id = newId('ord');
    const page = `${this.deps.publicUrl().replace(/\/$/, '')}/checkout/${token}`;
    const hosted = await this.payments.createCheckout({
      reference: id,
      ownerId: p.ownerId,
      amountCentavos,
      currency: 'MXN',
      description,
      successUrl: page,
      cancelUrl: page,
    });
    const order: OrderRow = {
      id,
      owner_id: p.ownerId,
      token_hash: sha256Hex(token),
      kind,
      input: JSON.stringify(input),
      amount_centavos: amountCentavos,
      description,
      status: 'pending',
      machine_id: null,
      created_at: Date.now(),
      paid_at: null,
      session_id: hosted?.sessionId ?? null,
    };
    await this.repo.insertOrder(order);
    return { checkoutUrl: hosted?.url ?? page };
  }

  async describeOrder(token: string) {
    const o = await this.repo.orderByToken(sha256Hex(token));
    return o
      ? {
          description: o.description,
          amountCentavos: o.amount_centavos,
          status: o.status,
          machineId: o.machine_id,
          provider: o.session_id === null ? ('builtin' as const) : this.payments.name,
        }
      : null;
  }

  /**
   * The operator confirms a payment on the checkout page: the order is marked paid (once), payment.paid
   * goes out, and the machine the order was for is created.
   */
  async confirmOrder(token: string, operatorKey: string | undefined): Promise<{ machineId: string | null; alreadyPaid: boolean }> {
    const o = await this.repo.orderByToken(sha256Hex(token));
    if (!o) throw errors.notFound('checkout');
    const expected = this.deps.config.machines.checkoutOperatorKey;
    if (!expected) throw errors.forbidden('payments are not confirmable here: NUBE_CHECKOUT_OPERATOR_KEY is not set', 'CheckoutDisabled');
    if (operatorKey === undefined || !safeEqual(operatorKey, expected)) throw errors.forbidden('wrong operator key', 'Forbidden');
    // Paid at the provider, confirmed by its webhook: a confirmation here could let the payer pay twice.
    if (o.session_id !== null && o.status === 'pending')
      throw errors.conflict(`this order is paid through ${this.payments.name}; its webhook confirms it`, 'PaidThroughProvider');
    return this.settle(o, null);
  }

  /**
   * The provider says a checkout was paid (its signature checked): the order it started turns paid
   * once, payment.paid goes out once and the machine is created; null when the session is no order's.
   */
  async providerPaid(pay: ProviderPayment): Promise<{ recorded: boolean } | null> {
    const o = await this.repo.orderBySession(pay.sessionId);
    if (!o) return null;
    const r = await this.settle(o, pay);
    return { recorded: !r.alreadyPaid };
  }

  /** The order turns paid in the commit that records payment.paid (the outbox); the first settles it. */
  private async settle(o: OrderRow, pay: ProviderPayment | null): Promise<{ machineId: string | null; alreadyPaid: boolean }> {
    const paidAt = Date.now();
    const paid = await this.deps.events.atomically(async (trx, emit) => {
      const won = await this.repo.markPaid(o.id, paidAt, trx);
      if (won) emit(this.paymentPaid({ ...o, status: 'paid', paid_at: paidAt }, pay));
      return won;
    });
    if (!paid) return { machineId: o.machine_id, alreadyPaid: true };
    const p = await this.principalOf(o.owner_id);
    // Not a REST request (the checkout page's form, the provider's webhook): nothing relays it, so the box is made on this node.
    const fulfil = () => this.fulfil(p, o);
    const created = await (this.deps.nodes.holdsState ? runPinned(fulfil) : fulfil()).catch((e: unknown) => {
      this.deps.log.error({ err: e, order: o.id }, 'paid order: the machine could not be created');
      throw e;
    });
    await this.repo.setOrderMachine(o.id, created);
    return { machineId: created, alreadyPaid: false };
  }

  /** Called once a machine's row exists (its backup timer is armed there). */
  onCreated: ((machineId: string) => Promise<void>) | null = null;

  /** Runs what the order paid for; returns the machine's id. Launch orders are handled by the launcher. */
  onFulfil: ((p: Principal, o: OrderRow) => Promise<string>) | null = null;

  private async fulfil(p: Principal, o: OrderRow): Promise<string> {
    if (o.kind === 'launch' && this.onFulfil) return this.onFulfil(p, o);
    const m = await this.create(p, JSON.parse(o.input) as CreateMachineInput, o.id);
    if ('checkoutUrl' in m) throw new Error('a paid order asked for payment again');
    return m.id;
  }

  /** The one place payment.paid is made; recorded with the order's paid mark in one transaction. */
  paymentPaid(o: OrderRow, pay: ProviderPayment | null): OutboxEvent {
    return {
      event: 'payment.paid',
      ownerId: o.owner_id,
      data: {
        orderId: o.id,
        amountMxn: o.amount_centavos / 100,
        amountCentavos: o.amount_centavos,
        currency: 'MXN',
        description: o.description,
        kind: o.kind,
        provider: pay ? this.payments.name : 'builtin',
        providerReference: pay?.sessionId ?? null,
        email: pay?.email ?? null,
        paidAt: iso(o.paid_at ?? Date.now()),
      },
    };
  }

  /**
   * Idempotent: the first call stops the box, records the month's prorated charge and removes the
   * releases (and backups); later calls find the tombstone and answer the same.
   */
  async delete(p: Principal, id: string, beforeDestroy?: (r: MachineRow) => Promise<void>) {
    const r = await this.repo.get(id);
    if (!r || r.owner_id !== p.ownerId) throw errors.notFound('machine');
    if (r.status === 'deleted') return { ok: true as const };
    if (!(await this.repo.markDeleted(id))) return { ok: true as const };
    await beforeDestroy?.(r);
    await this.s.account.revokeHeld(r.owner_id, `machine:${id}`);
    await this.s.sandboxes.delete(p, r.sandbox_id).catch((e: unknown) => {
      if (!(e instanceof ApiError && e.status === 404)) throw e;
    });
    // Its box is gone: the volumes it held are free (a writer may mount them, they may be deleted).
    await this.s.sandboxes.releaseVolumes(id);
    await this.repo.deleteReleases(id);
    await this.deps.usage.add(p.ownerId, 'machineChargesCentavos', proratedCentavos(r.monthly_centavos / 100, r.created_at));
    return { ok: true as const };
  }
}

/**
 * The account behind a caller, for nube's own reads and set-up of a machine's box (its state file, its
 * health, the first mkdir): a scoped key that may read a machine may see its status even when it does
 * not cover the key minted into the box, which the box's exec, files and logs require (SandboxesCore.own).
 */
function asAccount(p: Principal): Principal {
  if (!p.scope) return p;
  const { scope: _scope, ...account } = p;
  return account;
}
