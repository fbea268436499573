// Leftovers at the driver's level (leftovers.ts): parts another nube shares stay while it runs, and a
// sandbox whose address lease went with a cleanup and was taken meanwhile gets another address at the
// next start and keeps it. (The API-level round trip is test/sandboxes/leftovers.test.ts.)
import { mkdirSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registerHostUser } from './host-users.js';
import { cleanLeftovers, findLeftovers } from './leftovers.js';
import { cleanup, newRuntime, testRuntime, uniqueId } from './test-env.js';

const BRIDGE = { name: 'nubelr0', cidr: '10.88.0.1/16' };
const CGROUP = 'nube-leftovers-rt';

describe('namespaces runtime: leftovers', () => {
  const { runtime, dataDir, opts } = testRuntime('leftovers', { bridge: BRIDGE, cgroupParent: CGROUP });
  const lo = { dataDir, bridge: BRIDGE, cgroupParent: CGROUP };

  beforeAll(async () => {
    await runtime.ensureTemplate('base', (l) => console.log(l));
  }, 900_000);
  afterAll(async () => {
    await cleanup(runtime, dataDir);
    await cleanLeftovers(lo, { force: true });
  }, 120_000);

  it("keeps what another nube shares, and a sandbox whose lease was taken gets another address", async () => {
    const id = uniqueId('lo');
    await runtime.create({ id });
    const before = await runtime.addressOf(id);
    await runtime.suspend(id);
    await runtime.close();

    // Another nube, on another data dir, serves with the same bridge and cgroup parent.
    const other = registerHostUser({ dataDir: `${dataDir}-other`, bridge: BRIDGE.name, cgroupParent: CGROUP });
    try {
      const scan = await findLeftovers(lo);
      expect(scan.nubes).toEqual([]);
      const bridge = scan.items.find((i) => i.kind === 'bridge');
      expect(bridge?.neededBy).toEqual([`nube ${process.pid} on ${resolve(dataDir)}-other`]);
      const r = await cleanLeftovers(lo);
      expect(r.refused).toBeNull();
      expect(r.failed).toEqual([]);
      expect(r.removed.join('\n')).toMatch(/sandbox store .* loop-mounted/);
      expect(r.removed.join('\n')).toMatch(/1 address lease/);
      for (const kind of ['bridge nubelr0', 'nft table inet nube_nubelr0', `cgroup parent ${CGROUP}`]) {
        expect(r.kept.find((k) => k.includes(kind))).toMatch(new RegExp(`needed by nube ${process.pid} on `));
      }
    } finally {
      other();
    }

    // Its address is taken by another data dir's sandbox while nube is stopped.
    const idx = Number(before.split('.').at(-1)) + 256 * Number(before.split('.').at(-2));
    const taken = `/run/nube-net/${BRIDGE.name}/${idx}`;
    mkdirSync(taken);
    writeFileSync(`${taken}/owner`, '/elsewhere:sb-x');
    try {
      const again = newRuntime('namespaces', opts);
      const found = await again.recover();
      expect(found.map((s) => `${s.id} ${s.state}`)).toEqual([`${id} suspended`]);
      await again.resume(id);
      const now = await again.addressOf(id);
      expect(now).not.toBe(before);
      expect((await again.exec(id, `grep -c '${now}$' /proc/net/fib_trie`)).stdout.trim()).not.toBe('0');
      // Kept across another start.
      const third = newRuntime('namespaces', opts);
      await third.recover();
      expect(await third.addressOf(id)).toBe(now);
      await third.destroy(id);
      await Promise.all([again.close(), third.close()]);
    } finally {
      await cleanLeftovers(lo).catch(() => {});
      await rm(taken, { recursive: true, force: true });
    }
  }, 300_000);
});
