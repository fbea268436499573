import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { ProgressWriter, readProgress, SHIFT_STEP } from './build-progress.js';
import { buildTemplate } from './templates.js';
import { buildInProgress } from './test-env.js';

const dir = mkdtempSync(`${tmpdir()}/nube-progress-`);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('template build progress', () => {
  it("follows mmdebstrap's steps forward only, estimates below 100 %, and is readable by others", async () => {
    const file = `${dir}/a.json`;
    const w = new ProgressWriter(file, 'base');
    expect(w.now()).toMatchObject({ template: 'base', step: 'preparing', percent: 0, pid: process.pid });
    w.line('I: running apt-get update...');
    expect(w.now().step).toBe('updating package lists');
    w.line('I: installing remaining packages inside the chroot...');
    const installing = w.now();
    expect(installing.step).toBe('downloading and installing packages');
    expect(installing.percent).toBeGreaterThanOrEqual(17);
    w.line('I: extracting archives...'); // an earlier step's line: no going back
    expect(w.now().step).toBe('downloading and installing packages');
    w.step(SHIFT_STEP);
    expect(w.now()).toMatchObject({ step: 'shifting file ownership' });
    expect(w.now().percent).toBeLessThan(100);
    await w.flushed();
    expect(await readProgress(file)).toMatchObject({ step: 'shifting file ownership', pid: process.pid });
  });

  it('a build whose process is gone, or no file, is no build', async () => {
    const dead = spawnSync('true').pid;
    writeFileSync(`${dir}/dead.json`, JSON.stringify({ template: 'base', pid: dead, startedAt: 0, stepIndex: 1, stepStartedAt: 0 }));
    expect(await readProgress(`${dir}/dead.json`)).toBeNull();
    expect(await readProgress(`${dir}/none.json`)).toBeNull();
  });

  it('a build that waits for another process says where that build is, then takes its result', async () => {
    const templates = `${dir}/templates`;
    const other = await buildInProgress(templates, 'base', 'I: installing essential packages...');
    const heard: string[] = [];
    const waiting = buildTemplate(templates, 'base', 100_000, (line, pr) => heard.push(`${line} | ${pr?.step}`));
    for (let i = 0; i < 100 && heard.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(heard[0]).toMatch(
      new RegExp(`^waiting for the build in process ${process.pid}: installing essential packages, about \\d+ % \\| installing essential packages$`),
    );
    // The other build finishes: its meta appears and the lock goes.
    const meta = { name: 'base', build: other.build, path: `${other.paths.dir}/rootfs`, packages: [], builtAt: 'x', buildMs: 1 };
    await other.finish(meta);
    expect(await waiting).toEqual(meta);
  });
});
