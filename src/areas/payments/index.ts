import type { AreaModule } from '../area.js';
import { paymentsOperations } from './operations.js';
import { installPaymentPages } from './pages.js';
import { PaymentLinksRepo, paymentsMigrations } from './repo.js';
import { PaymentLinksService } from './service.js';

export const paymentsArea: AreaModule = {
  name: 'payments',
  operations: paymentsOperations,
  migrations: paymentsMigrations,
  create(deps) {
    const paymentLinks = new PaymentLinksService(
      new PaymentLinksRepo(deps.store.db),
      deps.payments.provider,
      {
        events: deps.events,
        publicUrl: () => deps.publicUrl(),
        log: deps.log,
        // The operator who confirms machines' checkouts confirms payment links' too.
        operatorKey: deps.config.machines.checkoutOperatorKey,
      },
    );
    deps.payments.receive((pay) => paymentLinks.providerPaid(pay));
    return { paymentLinks };
  },
  routes(app, services, deps) {
    installPaymentPages(app, () => services.paymentLinks, deps.payments, deps.rateLimiter);
  },
};
