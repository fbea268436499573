import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { probeCgroups, V1_CONTROLLERS } from './cgroup-probe.js';

// Trees shaped like /sys/fs/cgroup: the probe only looks at `<root>/<controller>/cgroup.procs`.
const roots: string[] = [];
function tree(controllers: readonly string[]): string {
  const root = mkdtempSync(join(tmpdir(), 'nube-cgroup-'));
  roots.push(root);
  for (const c of controllers) {
    mkdirSync(join(root, c));
    writeFileSync(join(root, c, 'cgroup.procs'), '');
  }
  return root;
}
afterEach(() => {
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

describe('probeCgroups', () => {
  it('finds a usable v1 layout when every controller nube uses is mounted', () => {
    const { usable } = probeCgroups(tree([...V1_CONTROLLERS, 'blkio']));
    expect(usable).toMatchObject({ version: 'v1', usable: true });
    expect(usable?.detail).toContain('memory, cpu, pids, freezer');
  });

  it('names the v1 controllers that are missing, and offers nothing usable', () => {
    const { usable, found } = probeCgroups(tree(['memory', 'pids']));
    expect(usable).toBeUndefined();
    expect(found).toEqual([expect.objectContaining({ version: 'v1', usable: false })]);
    expect(found[0]!.detail).toContain('cpu, freezer not mounted');
  });

  it('finds nothing on a tree without v1 controllers (a unified v2 mount)', () => {
    const root = tree([]);
    writeFileSync(join(root, 'cgroup.controllers'), 'cpu memory pids');
    expect(probeCgroups(root)).toEqual({ usable: undefined, found: [] });
  });
});
