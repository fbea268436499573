import type { AreaModule } from '../area.js';
import { mountConsole } from './routes.js';
import { ConsoleSessions } from './sessions.js';
import { ConsoleSessionsRepo, consoleMigrations } from './sessions-repo.js';
import { ConsoleFiles } from './static-files.js';

declare module '../../platform/operation.js' {
  interface Services {
    consoleSessions: ConsoleSessions;
  }
}

/** The web console at /console: its pages and its session sign-in. It adds no operation: it calls the API. */
export const consoleArea: AreaModule = {
  name: 'console',
  operations: [],
  migrations: consoleMigrations,
  create(deps, other) {
    if (!other.account) throw new Error('the console area needs the account area');
    const sessions = new ConsoleSessions(new ConsoleSessionsRepo(deps.store.db), deps.auth, other.account, deps.config.secret);
    deps.auth.registerSession(sessions.resolver);
    return { consoleSessions: sessions };
  },
  routes(app, services, deps) {
    mountConsole(app, { sessions: services.consoleSessions, files: new ConsoleFiles(), proxy: deps.auth.proxy, config: deps.config });
  },
};
