import { hmacHex } from '../../platform/crypto.js';
import { newId } from '../../platform/ids.js';
import { pathLocator, registerNodeJob } from '../../platform/node-held.js';
import type { AreaModule } from '../area.js';
import { BROADCAST_JOB, Broadcasts } from './broadcasts.js';
import { Signer } from './cursor.js';
import { FleetService } from './facade.js';
import { fleetOperations } from './operations.js';
import { Pools } from './pool.js';
import { fleetMigrations, fleetWorkspaceMigrations } from './migrations.js';
import { FleetRepo } from './repo.js';
import { FleetAdmin } from './service.js';
import { TelegramChannel } from './telegram.js';
import { FleetTurns } from './turns.js';
import { installWidget } from './widget.js';
import { tableHolder } from '../../platform/workspaces.js';

export type { FleetService } from './facade.js';

export const fleetArea: AreaModule = {
  name: 'fleet',
  operations: fleetOperations,
  migrations: { ...fleetMigrations, ...fleetWorkspaceMigrations },
  async create(deps, other) {
    const repo = new FleetRepo(deps.store.db);
    const signer = new Signer(hmacHex(deps.config.secret, 'nube-fleet-signing'));
    const agents = other.agents!;
    const admin = new FleetAdmin(repo, deps, signer, other.account!, (ownerId) => agents.nodeForBox(ownerId));
    let turns: FleetTurns | undefined;
    const destroy = async (box: { id: string; ownerId: string; agentId: string }) => {
      await repo.deleteBox(box.id);
      await turns?.deleteBoxAgent(box.ownerId, box.agentId);
    };
    const pools = new Pools(
      deps.config.fleet,
      {
        // A box is an agent of the owner; its row (with the conversation it serves) lets a restart find it.
        async create(fleetAgentId, groupId) {
          const fleet = await repo.agent(fleetAgentId);
          if (!fleet) throw new Error('the fleet agent was deleted');
          const agentId = await agents.createBox(fleet.owner_id, `fleet ${fleet.name} (${fleet.id})`);
          const now = Date.now();
          const id = newId('box');
          await repo.insertBox({ id, owner_id: fleet.owner_id, fleet_agent_id: fleet.id, agent_id: agentId, group_id: groupId, created_at: now, last_used_at: now });
          return { id, agentId, ownerId: fleet.owner_id };
        },
        bind: (boxId, groupId) => repo.bindBox(boxId, groupId),
        destroy,
      },
      (e) => deps.log.warn({ err: e }, 'fleet box removal failed'),
    );
    turns = new FleetTurns(repo, admin, pools, agents, signer, deps);
    const telegram = new TelegramChannel(repo, admin, deps);
    turns.onReply((fleet, groupId, reply) => telegram.deliver(fleet, groupId, reply));
    // This node runs the pools of its own fleet agents only (their boxes are agents here).
    const mine = new Set(await repo.agentIdsOn(deps.nodes.id));
    for (const b of (await repo.boxes()).filter((x) => mine.has(x.fleet_agent_id))) {
      const box = { id: b.id, agentId: b.agent_id, ownerId: b.owner_id, fleetAgentId: b.fleet_agent_id, lastUsed: Number(b.last_used_at) };
      // A box from before boxes were per conversation may hold several conversations' state: it goes.
      if (b.group_id === '') await destroy(box).catch((e: unknown) => deps.log.warn({ err: e, box: b.id }, 'old shared fleet box not removed'));
      else pools.restore({ ...box, groupId: b.group_id });
    }
    pools.startShrinking();
    deps.auth.register(admin.tokenResolver);
    deps.auth.register(admin.clientResolver);
    deps.auth.register(admin.publicResolver);
    void turns.recover().catch((e: unknown) => deps.log.warn({ err: e }, 'fleet turn recovery failed'));
    // A broadcast runs on the node of its fleet agent's pool (its web conversations' turns are serialized there).
    const broadcasts = new Broadcasts(repo, admin, turns, telegram, deps);
    registerNodeJob<{ id: string }>(deps.jobs, deps.nodes, BROADCAST_JOB, (p, job) => broadcasts.run(p.id, job), { leaseMs: 60_000 });
    const fleet = new FleetService(admin, turns, pools, repo, signer, telegram, broadcasts);
    deps.workspaces.register(
      tableHolder({ area: 'fleet', param: 'fleetAgentId', deleteOperation: 'fleet.delete', db: deps.store.db, table: 'fleet_agents', remove: (p, id) => fleet.deleteAgent(p, id) }),
    );
    return { fleet };
  },
  routes(app, services, deps) {
    // A fleet agent's messages, admin calls and channel webhooks are served by the node running its pool.
    const locate = (id: string) => services.fleet.repo.nodeOf(id);
    deps.forwarder.addLocator(pathLocator('fleet agent', /^\/api\/v2\/fleet-agents\/(flt_[A-Za-z0-9]+)/, locate));
    deps.forwarder.addLocator(pathLocator('fleet agent', /^\/api\/v2\/fleet-channels\/telegram\/(flt_[A-Za-z0-9]+)/, locate));
    // Before the areas close (agents drop their connections): turns failing from now on are left to rerun.
    app.addHook('onClose', async () => services.fleet.turns.stop());
    services.fleet.telegram.routes(app, services.fleet.turns);
    installWidget(app);
  },
  async close(services) {
    services.fleet.pools.close();
  },
};
