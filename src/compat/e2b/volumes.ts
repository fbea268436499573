// E2B's volumes (`Volume.create/list/getInfo/connect/destroy`, `Sandbox.create({volumeMounts})`) over
// nube's volumes area: one volume store, the same rows, limits and owners. E2B names a volume in a
// mount; nube mounts by id: a name is resolved among the caller's volumes. E2B's volume content API
// (`/volumecontent/{id}/...`: the Volume instance's file methods) works on the volume's directory on
// this node with the volume's own token (volume-tree.ts keeps it inside the volume).
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { SandboxVolume } from '../../areas/sandboxes/volume-binder.js';
import type { VolumesService } from '../../areas/volumes/service.js';
import type { Principal } from '../../platform/auth.js';
import { errors } from '../../platform/errors.js';
import { PLANS } from '../../platform/plans.js';
import type { Access } from './access.js';
import type { Route } from './control-route.js';
import { parseBody, parseQuery, single } from './query.js';
import { VolumeTree } from './volume-tree.js';

const MIB_PER_GIB = 1024;
/** E2B's volume names (its API's own rule). */
const NAME = /^[A-Za-z0-9_-]+$/;

const NewVolume = z
  .object({ name: z.string().min(1).max(128).regex(NAME, 'letters, digits, _ and - only') })
  .strict();
export const MountsBody = z
  .array(z.object({ name: z.string().min(1).max(128), path: z.string().min(1).max(1024) }).strict())
  .max(8);

const Int = z.coerce.number().int();
const PathQuery = z.object({ path: single.pipe(z.string().min(1).max(4096)) });
const Owner = Int.min(0).max(2 ** 32 - 2);
const Mode = Int.min(0).max(0o7777);
const WriteQuery = PathQuery.extend({
  uid: Owner.optional(),
  gid: Owner.optional(),
  mode: Mode.optional(),
  force: z
    .enum(['true', 'false'])
    .transform((v) => v === 'true')
    .optional(),
});
const MetaBody = z.object({ uid: Owner.optional(), gid: Owner.optional(), mode: Mode.optional() }).strict();

/** A mount as E2B shows it on a sandbox. */
export interface E2bMount {
  name: string;
  path: string;
}

type Listed = Awaited<ReturnType<VolumesService['list']>>['items'][number];

export class E2bVolumes {
  constructor(
    private readonly volumes: VolumesService | undefined,
    private readonly access: Access,
    /** The largest file a write takes (the envd upload's limit). */
    private readonly uploadLimit: number,
  ) {}

  private service(): VolumesService {
    if (!this.volumes) throw errors.notImplemented('volumes on this nube');
    return this.volumes;
  }

  private async all(p: Principal): Promise<Listed[]> {
    return (await this.service().list(p)).items;
  }

  private answer(p: Principal, v: { id: string; name: string }) {
    return { volumeID: v.id, name: v.name, token: this.access.volumeTokenFor(p.ownerId, v.id) };
  }

  /** E2B's volumes have no size: a new one gets the plan's sandbox disk, in whole GiB (nube's limit unit). */
  async create(p: Principal, raw: unknown) {
    const b = parseBody(NewVolume, raw);
    // E2B names are unique in a team (a second one is its 400); nube's own API allows repeats.
    if ((await this.all(p)).some((v) => v.name === b.name)) {
      throw errors.badRequest(`Volume with name '${b.name}' already exists`, [
        { path: ['body', 'name'], message: 'taken' },
      ]);
    }
    const sizeGB = Math.max(1, Math.ceil(PLANS[p.plan].sandboxDiskMb / MIB_PER_GIB));
    return this.answer(p, await this.service().create(p, { name: b.name, sizeGB }));
  }

  /**
   * nube's mounts for E2B's `volumeMounts` (every one read-write, as E2B's are). A name none of the
   * caller's volumes has is E2B's 400, as is one several have (made through nube's API).
   */
  async resolve(p: Principal, mounts: z.output<typeof MountsBody>): Promise<SandboxVolume[]> {
    if (!mounts.length) return [];
    const mine = await this.all(p);
    const problems: { path: string[]; message: string }[] = [];
    const out = mounts.map((m, i) => {
      const named = mine.filter((v) => v.name === m.name);
      if (named.length !== 1) {
        problems.push({
          path: ['body', 'volumeMounts', String(i), 'name'],
          message: named.length
            ? `several volumes are named '${m.name}': mount one by nube's API`
            : `volume '${m.name}' not found`,
        });
      }
      return { volumeId: named[0]?.id ?? '', path: m.path, readOnly: false };
    });
    if (problems.length)
      throw errors.badRequest(`invalid mounts: ${problems.map((x) => x.message).join('; ')}`, problems);
    return out;
  }

  /** Each of the caller's sandboxes' mounts, by nube sandbox id. */
  async mountsBySandbox(p: Principal): Promise<Map<string, E2bMount[]>> {
    const by = new Map<string, E2bMount[]>();
    if (!this.volumes) return by;
    for (const v of await this.all(p)) {
      for (const m of v.mounts)
        by.set(m.sandboxId, [...(by.get(m.sandboxId) ?? []), { name: v.name, path: m.path }]);
    }
    return by;
  }

  mount(
    route: Route,
    app: FastifyInstance,
    prefix: string,
    send: (reply: FastifyReply, e: unknown) => unknown,
  ): void {
    const noQuery = (q: Record<string, string | string[] | undefined>) => parseQuery(z.object({}), q);
    route('POST', '/volumes', async (p, req) => {
      noQuery(req.query);
      return { status: 201, body: await this.create(p, req.body) };
    });
    route('GET', '/volumes', async (p, req) => {
      noQuery(req.query);
      return { status: 200, body: (await this.all(p)).map((v) => ({ volumeID: v.id, name: v.name })) };
    });
    route('GET', '/volumes/:id', async (p, req) => {
      noQuery(req.query);
      return { status: 200, body: this.answer(p, await this.service().get(p, req.params.id)) };
    });
    // A mounted volume is refused (409 VolumeInUse), as nube's own API refuses it.
    route('DELETE', '/volumes/:id', async (p, req) => {
      noQuery(req.query);
      await this.service().delete(p, req.params.id);
      return { status: 204 };
    });
    this.content(app, prefix, send);
  }

  /**
   * E2B's volume content API: the Volume instance's file methods, with the volume's token (a bearer),
   * not a key. The files are the volume's on this node, reached safely (volume-tree.ts).
   */
  private content(
    app: FastifyInstance,
    prefix: string,
    send: (reply: FastifyReply, e: unknown) => unknown,
  ): void {
    type Req = FastifyRequest<{
      Params: { id: string };
      Querystring: Record<string, string | string[] | undefined>;
    }>;
    const handle =
      (fn: (tree: VolumeTree, req: Req, reply: FastifyReply) => Promise<unknown>) =>
      async (req: Req, reply: FastifyReply) => {
        try {
          const auth = req.headers.authorization;
          const token = typeof auth === 'string' && auth.startsWith('Bearer ') ? auth.slice(7) : '';
          // A token opens its own volume only: another volume's is as good as none.
          const opened = this.access.volumeOpened(token);
          if (!opened || opened.id !== req.params.id) {
            return await reply
              .code(401)
              .send({ code: 401, message: 'missing or invalid token for this volume' });
          }
          const p = await this.access.principalOf(opened.ownerId);
          await this.access.limit(p, 'e2b.control');
          // A deleted volume's token opens nothing (404, as the volume is gone).
          const dir = await this.service().directory(p, opened.id);
          return await fn(new VolumeTree(dir.path, dir.ids), req, reply);
        } catch (e) {
          return send(reply, e);
        }
      };
    const base = `${prefix}/volumecontent/:id`;
    const json = (reply: FastifyReply, status: number, body: unknown) => reply.code(status).send(body);
    app.get(
      `${base}/path`,
      handle(async (tree, req, reply) =>
        json(reply, 200, await tree.stat(parseQuery(PathQuery, req.query).path)),
      ),
    );
    app.get(
      `${base}/dir`,
      handle(async (tree, req, reply) => {
        const q = parseQuery(PathQuery.extend({ depth: Int.max(32).min(1).optional() }), req.query);
        return json(reply, 200, await tree.list(q.path, q.depth ?? 1));
      }),
    );
    app.post(
      `${base}/dir`,
      handle(async (tree, req, reply) => {
        const q = parseQuery(WriteQuery, req.query);
        return json(reply, 201, await tree.makeDir(q.path, q, q.force === true));
      }),
    );
    app.patch(
      `${base}/path`,
      handle(async (tree, req, reply) => {
        const q = parseQuery(PathQuery, req.query);
        return json(reply, 200, await tree.update(q.path, parseBody(MetaBody, req.body)));
      }),
    );
    app.delete(
      `${base}/path`,
      handle(async (tree, req, reply) => {
        await tree.remove(parseQuery(PathQuery, req.query).path);
        return reply.code(204).send();
      }),
    );
    app.get(
      `${base}/file`,
      handle(async (tree, req, reply) => {
        const f = await tree.read(parseQuery(PathQuery, req.query).path);
        return reply
          .code(200)
          .headers({ 'content-type': 'application/octet-stream', 'content-length': String(f.size) })
          .send(f.stream);
      }),
    );
    app.put(
      `${base}/file`,
      { bodyLimit: this.uploadLimit },
      handle(async (tree, req, reply) => {
        const q = parseQuery(WriteQuery, req.query);
        const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
        // E2B's SDK documents both "writing overwrites" and `force` to overwrite: only force=false keeps a file.
        return json(reply, 200, await tree.write(q.path, body, q, q.force !== false));
      }),
    );
  }
}
