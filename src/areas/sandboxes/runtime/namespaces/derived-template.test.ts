// A derived template (base plus host files): the parent's files hard-linked, each host file copied in
// after its sha256 is checked and owned by root-inside; a missing or altered host file is refused with
// what installs it; and the pinned goose version matches scripts/install-goose.sh.
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { TemplateInfo } from '../driver.js';
import { buildDerived, hostFilesProblem } from './derived-template.js';
import { GOOSE, GOOSE_FILE, type HostFile } from './host-tools.js';
import { templateUnavailable } from './templates.js';

const dir = mkdtempSync(join(tmpdir(), 'nube-derived-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

describe('derived templates', () => {
  it('hard-links the parent tree and copies each host file in, owned by root inside the sandbox', async () => {
    const parentRoot = `${dir}/parent/rootfs`;
    mkdirSync(`${parentRoot}/usr/local/bin`, { recursive: true });
    writeFileSync(`${parentRoot}/etc-file`, 'from the parent');
    writeFileSync(`${dir}/tool`, '#!/bin/sh\necho tool\n');
    const parent: TemplateInfo = { name: 'base', build: 'p1', path: parentRoot, packages: ['x'], builtAt: '', buildMs: 0 };
    const file: HostFile = { from: `${dir}/tool`, to: '/usr/local/bin/tool', sha256: sha('#!/bin/sh\necho tool\n'), installedBy: 'the test' };
    const t = { name: 'child', build: 'c1', dir: `${dir}/child/c1`, meta: `${dir}/child/c1/meta.json`, rootfs: `${dir}/child/c1/rootfs` };
    mkdirSync(`${dir}/child`, { recursive: true });
    const info = await buildDerived(t, { from: 'base', hostFiles: [file] }, parent, 100_000, () => {});
    expect(info).toMatchObject({ name: 'child', build: 'c1', path: t.rootfs, packages: ['x'] });
    expect(statSync(`${t.rootfs}/etc-file`).ino).toBe(statSync(`${parentRoot}/etc-file`).ino);
    const copied = statSync(`${t.rootfs}/usr/local/bin/tool`);
    expect(copied.uid).toBe(100_000);
    expect(copied.mode & 0o777).toBe(0o755);
    expect(JSON.parse(readFileSync(t.meta, 'utf8')).name).toBe('child');
  });

  it('refuses a missing or altered host file, naming what installs it', async () => {
    const missing: HostFile = { from: `${dir}/nope`, to: '/x', sha256: sha(''), installedBy: 'scripts/install-x.sh' };
    expect(await hostFilesProblem([missing])).toMatch(/nope is not on this host; install it with scripts\/install-x.sh/);
    writeFileSync(`${dir}/altered`, 'other bytes');
    const altered: HostFile = { ...missing, from: `${dir}/altered` };
    expect(await hostFilesProblem([altered])).toMatch(/has sha256 [0-9a-f]{64}, expected/);
  });

  it('goose is unavailable exactly when its binary is not on the host; base never is', () => {
    const there = (() => {
      try {
        return statSync(GOOSE_FILE.from).isFile();
      } catch {
        return false;
      }
    })();
    expect(templateUnavailable('goose') === null).toBe(there);
    expect(templateUnavailable('base')).toBeNull();
  });

  it('pins the same goose as scripts/install-goose.sh', () => {
    const script = readFileSync(new URL('../../../../../scripts/install-goose.sh', import.meta.url), 'utf8');
    expect(script).toContain(`VERSION=${GOOSE.version}`);
    expect(script).toContain(`PACKAGE=${GOOSE.npmPackage}`);
    expect(script).toContain(`TARBALL_SHA256=${GOOSE.tarballSha256}`);
    expect(script).toContain(`BINARY_SHA256=${GOOSE.binarySha256}`);
    expect(GOOSE.hostPath).toBe(`/opt/nube/goose/${GOOSE.version}/goose`);
    expect(script).toContain('DEST=/opt/nube/goose/$VERSION');
  });
});
