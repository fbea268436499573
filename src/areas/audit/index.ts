import type { AreaModule } from '../area.js';
import { AuditWriter, auditKey } from './chain.js';
import { auditOperations } from './operations.js';
import { installAuditRecorder } from './recorder.js';
import { RefusalAggregator } from './refusals.js';
import { AuditService } from './service.js';
import { auditMigrations } from './tables.js';

/** The audit log (issue 32, item 4): recorded by a hook on every route, read through `GET /account/audit`. */
export const auditArea: AreaModule = {
  name: 'audit',
  operations: auditOperations,
  migrations: auditMigrations,
  async create(deps, other) {
    const account = other.account;
    if (!account) throw new Error('the audit area needs the account service');
    const audit = new AuditService(deps.store.db, deps.store.dialect, auditKey(deps.config.secret), (id) => account.planOf(id));
    await audit.registerPruning(deps.jobs);
    return { audit };
  },
  routes(app, services, deps) {
    if (!deps.config.audit) return;
    const writer = new AuditWriter(deps.store.db, deps.store.dialect, auditKey(deps.config.secret));
    const refusals = new RefusalAggregator((e) => writer.append(e), deps.config.auditRefusalWindowMs, (err) =>
      deps.log.error({ err }, 'counted refusals not recorded'),
    );
    services.audit.refusals = refusals;
    app.addHook('onClose', async () => {
      await refusals.close().catch((err: unknown) => deps.log.error({ err }, 'counted refusals not recorded'));
    });
    installAuditRecorder(app, { writer, auth: deps.auth, keyName: (id) => services.account.keyName(id), refusals });
  },
};
