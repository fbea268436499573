import { join } from 'node:path';
import { Spool } from '../../platform/spool.js';
import type { AreaModule } from '../area.js';
import { websitesOperations } from './operations.js';
import { WebsitesRepo, websiteWorkspaceMigrations, websitesMigrations } from './repo.js';
import { SiteServer } from './serve.js';
import { WebsitesService } from './service.js';
import { tableHolder } from '../../platform/workspaces.js';

export const websitesArea: AreaModule = {
  name: 'websites',
  operations: websitesOperations,
  migrations: { ...websitesMigrations, ...websiteWorkspaceMigrations },
  create(deps, other) {
    const { files, account, domains } = other;
    if (!files || !account || !domains)
      throw new Error('the websites area needs the files, account and domains services to be created first');
    const repo = new WebsitesRepo(deps.store.db);
    deps.usage.registerGauge('storageBytes', (ownerId) => repo.storedBytes(ownerId));
    const websites = new WebsitesService({
      repo,
      // Site files live beside files, in the default region's store.
      store: files.stores.at(),
      files,
      spool: new Spool(join(deps.config.dataDir, 'spool', 'websites')),
      events: deps.events,
      planOf: async (ownerId) =>
        (await account.getAccount({ scheme: 'owner', ownerId, plan: 'byte' })).plan.name,
      storageUsed: (ownerId) => deps.usage.gauge('storageBytes', ownerId),
      workspaces: deps.workspaces,
      // Site URLs are https:// when nube's HTTPS listener has a certificate for the sites' names.
      publicUrl: () => deps.httpsUrl(`site.${deps.config.sites.host}`) ?? deps.publicUrl(),
      sitesHost: deps.config.sites.host,
      domainSite: (host) => {
        const r = domains.claims.route(host);
        return r?.kind === 'site' ? r.id : null;
      },
    });
    // A deleted site's domains stay the owner's (verified), attached to nothing.
    websites.onDeleted((site) => domains.claims.detachTarget('site', site.id));
    // A document's site is its document's (counted and deleted with it): archive sites here.
    deps.workspaces.register(
      tableHolder({
        area: 'websites',
        param: 'websiteId',
        deleteOperation: 'websites.delete',
        db: deps.store.db,
        table: 'websites',
        remove: (p, id) => websites.delete(p, id),
        only: ['source', '=', 'archive'],
      }),
    );
    return { websites };
  },
  routes(app, services) {
    new SiteServer(services.websites, (host) =>
      host ? (services.websites.deps.domainSite?.(host) ?? null) : null,
    ).install(app);
  },
};
