import type { AreaModule } from '../area.js';
import { FormEndpoint } from './http.js';
import { formsOperations } from './operations.js';
import { FormsRepo, formsMigrations } from './repo.js';
import { FormsService } from './service.js';

export const formsArea: AreaModule = {
  name: 'forms',
  operations: formsOperations,
  migrations: formsMigrations,
  create(deps, other) {
    const { websites, files, account } = other;
    if (!websites || !files || !account)
      throw new Error('the forms area needs the websites, files and account services to be created first');
    const forms = new FormsService({
      repo: new FormsRepo(deps.store.db),
      websites,
      files,
      events: deps.events,
      planOf: async (ownerId) =>
        (await account.getAccount({ scheme: 'owner', ownerId, plan: 'byte' })).plan.name,
      log: deps.log,
    });
    return { forms };
  },
  routes(app, services, deps) {
    const endpoint = new FormEndpoint(
      services.forms,
      services.websites,
      deps.rateLimiter,
      deps.config.forms.perMinute,
      () => deps.publicUrl(),
    );
    endpoint.install(app);
    // The websites area's host router hands it POSTs to `/f/<form>` on a site's own host.
    services.websites.formPosts = (post) => endpoint.handle(post);
  },
};
