import type { AreaModule } from '../area.js';
import { Certificates } from './certificates.js';
import { certsMigrations } from './certs-repo.js';
import { DomainClaims } from './claims.js';
import { claimsMigrations, domainWorkspaceMigrations } from './claims-repo.js';
import { tableHolder } from '../../platform/workspaces.js';
import { tlsChecks } from './doctor.js';
import { domainsOperations } from './operations.js';
import { DomainsService } from './service.js';

const CHALLENGE_PATH = /^\/\.well-known\/acme-challenge\/([A-Za-z0-9_-]{1,200})$/;

export const domainsArea: AreaModule = {
  name: 'domains',
  operations: domainsOperations,
  migrations: { ...claimsMigrations, ...certsMigrations, ...domainWorkspaceMigrations },
  async create(deps, other) {
    const claims = new DomainClaims(deps.store.db, deps.config, deps.bus);
    await claims.load();
    const certificates = new Certificates(deps, claims);
    await certificates.start();
    // `other` fills as later areas are created: sites and machines are looked up when a target is checked.
    const domains = new DomainsService(claims, certificates, other);
    domains.workspaces = deps.workspaces;
    deps.workspaces.register(
      tableHolder({
        area: 'domains',
        param: 'domain',
        idColumn: 'domain',
        deleteOperation: 'domains.delete',
        db: deps.store.db,
        table: 'domains',
        remove: (p, name) => domains.remove(p, name),
      }),
    );
    return { domains };
  },
  doctor: tlsChecks,
  routes(app, services) {
    // HTTP-01: the ACME CA asks http://<domain>/.well-known/acme-challenge/<token> on nube's HTTP port.
    // Before the host routers (a verified domain's other paths go to its site or machine).
    app.addHook('onRequest', (req, reply, done) => {
      const m = req.method === 'GET' ? CHALLENGE_PATH.exec(req.url) : null;
      if (!m) return done();
      services.domains.challenge(m[1]!).then(
        (answer) => {
          if (answer === undefined) void reply.code(404).type('text/plain').send('no such challenge');
          else void reply.code(200).type('text/plain').send(answer);
        },
        (err: Error) => done(err),
      );
    });
  },
};
