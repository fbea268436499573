import { parseAllowList } from '../../platform/outbound.js';
import type { AreaModule } from '../area.js';
import { DeliveriesRepo } from './delivery-repo.js';
import { DELIVER_JOB, type DeliverJob, Deliverer } from './delivery.js';
import { MeteredSender } from './metered-sender.js';
import { webhooksOperations } from './operations.js';
import { WebhooksRepo, webhookWorkspaceMigrations, webhooksMigrations } from './repo.js';
import { WebhooksService } from './service.js';
import { tableHolder } from '../../platform/workspaces.js';

export const webhooksArea: AreaModule = {
  name: 'webhooks',
  operations: webhooksOperations,
  migrations: { ...webhooksMigrations, ...webhookWorkspaceMigrations },
  create(deps) {
    const allow = parseAllowList(deps.config.outboundAllow);
    const hooks = new WebhooksRepo(deps.store.db);
    const deliveries = new DeliveriesRepo(deps.store.db);
    const { webhookTimeoutMs, webhookRetryMs } = deps.config;
    const sender = new MeteredSender(deps.outbound, webhookTimeoutMs, deps.metrics);
    const deliverer = new Deliverer({
      hooks,
      deliveries,
      jobs: deps.jobs,
      sender,
      dialect: deps.store.dialect,
      fallbackMs: webhookTimeoutMs + 20_000,
      openSecret: (sealed) => deps.secretBox.open(sealed),
      retryMs: webhookRetryMs,
      log: deps.log,
    });
    deps.jobs.register<DeliverJob>(DELIVER_JOB, deliverer.run, {
      // HTTP failures are rescheduled by the handler itself; queue retries only cover crashes and
      // store errors between sending and recording.
      maxAttempts: 10,
      // Most slots of the queue (20 by default): deliveries are short and I/O bound, other types keep 4.
      concurrency: 16,
      leaseMs: webhookTimeoutMs + 20_000,
    });
    // Events recorded in the outbox with their change become deliveries in the commit that removes them.
    deps.events.consume({
      handle: (trx, events) => deliverer.fanOutRecorded(trx, events),
      committed: () => deliverer.committed(),
    });
    // Events still published on the bus (sources not yet moved to the outbox) are fanned out as before:
    // at most once, lost if nube dies before the fan-out commits.
    const unsubscribe = deps.bus.subscribe((e) =>
      deliverer.fanOut(e).catch((err: unknown) => {
        deps.log.error({ err, event: e.event, owner: e.ownerId }, 'webhook fan-out failed; event not delivered');
      }),
    );
    const webhooks = new WebhooksService(hooks, deliveries, deliverer, deps.secretBox, allow, async () => {
      unsubscribe();
      await deliverer.stop();
    });
    webhooks.workspaces = deps.workspaces;
    deps.workspaces.register(
      tableHolder({ area: 'webhooks', param: 'webhookId', deleteOperation: 'webhooks.delete', db: deps.store.db, table: 'webhooks', remove: (p, id) => webhooks.delete(p, id) }),
    );
    return { webhooks };
  },
  async close(services) {
    await services.webhooks.close();
  },
};
