import { pathLocator, registerNodeJob } from '../../platform/node-held.js';
import type { AreaModule } from '../area.js';
import { AgentsService } from './facade.js';
import { agentsOperations } from './operations.js';
import { AgentsRepo, agentWorkspaceMigrations, agentsMigrations } from './repo.js';
import { AgentsCore, BUILD_JOB } from './service.js';
import { INTERRUPTED } from './turns.js';
import { installAgentSocket } from './ws.js';
import { tableHolder } from '../../platform/workspaces.js';

export type { AgentsService } from './facade.js';

// Browsers embed an agent with its `agt_` token: message, try and GET of that agent answer any origin.
const CORS_PATH = /^\/api\/v2\/agents\/[^/?]+(\/message|\/try)?(\?|$)/;
const CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-headers': 'authorization, content-type, x-api-key',
  'access-control-allow-methods': 'GET, POST, OPTIONS',
  'access-control-max-age': '600',
};

export const agentsArea: AreaModule = {
  name: 'agents',
  operations: agentsOperations,
  migrations: { ...agentsMigrations, ...agentWorkspaceMigrations },
  async create(deps, other) {
    const core = new AgentsCore(new AgentsRepo(deps.store.db), deps, {
      sandboxes: other.sandboxes!,
      llm: other.llm!,
      account: other.account!,
    });
    deps.auth.register(core.embedResolver);
    deps.usage.registerGauge('agents', (ownerId) => core.repo.count(ownerId));
    // The gateway counts an agent's completions toward the scoped keys whose turns it runs.
    other.llm!.attributeSubjects(async (subject) => (subject.startsWith('agent:') ? core.repo.runningTurnKeys(subject.slice(6)) : []));
    // The job's lease is renewed while it runs: a first build of the sandbox template takes minutes.
    // A build makes the agent's sandbox: it runs on the agent's node (a node-local job type).
    registerNodeJob<{ id: string }>(deps.jobs, deps.nodes, BUILD_JOB, (p, job) => core.build(p.id, job), { maxAttempts: 3, concurrency: 8, leaseMs: 120_000 });
    await core.repo.failInterrupted(Date.now(), deps.nodes.id, INTERRUPTED);
    core.reconnectAll();
    deps.workspaces.register(
      tableHolder({ area: 'agents', param: 'id', deleteOperation: 'agents.delete', db: deps.store.db, table: 'agents', remove: (p, id) => core.delete(p, id) }),
    );
    return { agents: new AgentsService(core) };
  },
  routes(app, services, deps) {
    // Requests for an agent (its turns, its ACP socket) are served by the node holding its sandbox.
    deps.forwarder.addLocator(pathLocator('agent', /^\/api\/v2\/agents\/(agt_[A-Za-z0-9]+)/, (id) => services.agents.core.repo.nodeOf(id)));
    app.addHook('onSend', (req, reply, payload, done) => {
      if (req.url.startsWith('/api/v2/agents/') && CORS_PATH.test(req.url)) reply.headers(CORS);
      done(null, payload);
    });
    app.options('/api/v2/agents/:id', (_req, reply) => reply.code(204).headers(CORS).send());
    app.options('/api/v2/agents/:id/message', (_req, reply) => reply.code(204).headers(CORS).send());
    app.options('/api/v2/agents/:id/try', (_req, reply) => reply.code(204).headers(CORS).send());
    installAgentSocket(app, services.agents.core, deps.auth);
  },
  async close(services) {
    // Turns write what they produced before their connections close under them.
    await services.agents.turns.stop();
    await services.agents.core.close();
  },
};
