// README's set-up builds the `base` (and, with goose on the host, `goose`) template ahead (scripts/build-templates.sh, run by setup.sh); run
// again on a host where it is built, it checks and rebuilds nothing.
import { execFile } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { GOOSE } from '../../src/areas/sandboxes/runtime/namespaces/host-tools.js';
import { readTemplate, recipeHash } from '../../src/areas/sandboxes/runtime/namespaces/templates.js';
import { TEMPLATE_WAIT_MS, TEST_ROOT } from './helpers.js';

const run = promisify(execFile);
const dataDir = `${TEST_ROOT}/setup-${process.pid}`;
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('set-up builds templates ahead', () => {
  it('build-templates.sh builds base, or keeps the build of its current recipe', async () => {
    const env = { ...process.env, NUBE_TEMPLATES_DIR: `${TEST_ROOT}/templates`, NUBE_DATA_DIR: dataDir, NUBE_SETUP_TEMPLATES: 'base' };
    const first = await run('sh', ['scripts/build-templates.sh'], { env, maxBuffer: 16 << 20 });
    const built = await readTemplate(`${TEST_ROOT}/templates`, 'base', recipeHash('base', 100_000));
    expect(built).not.toBeNull();
    expect(JSON.parse(first.stdout.slice(first.stdout.lastIndexOf('{\n')))).toEqual(built);
    const again = await run('sh', ['scripts/build-templates.sh'], { env });
    expect(JSON.parse(again.stdout)).toEqual(built);
    expect(await run('sh', ['scripts/build-templates.sh'], { env: { ...env, NUBE_SETUP_TEMPLATES: '' } })).toMatchObject({ stdout: '' });
  }, TEMPLATE_WAIT_MS);

  it('builds goose too by default where scripts/install-goose.sh put goose on the host', async () => {
    const { NUBE_SETUP_TEMPLATES: _, ...rest } = process.env;
    const env = { ...rest, NUBE_TEMPLATES_DIR: `${TEST_ROOT}/templates`, NUBE_DATA_DIR: dataDir };
    const out = (await run('sh', ['scripts/build-templates.sh'], { env, maxBuffer: 16 << 20 })).stdout;
    // Each template's JSON starts on a line of its own; build progress lines come before.
    const names = out
      .split(/^(?=\{$)/m)
      .filter((s) => s.startsWith('{'))
      .map((s) => (JSON.parse(s) as { name: string }).name);
    expect(names).toEqual(existsSync(GOOSE.hostPath) ? ['base', 'goose'] : ['base']);
  }, TEMPLATE_WAIT_MS);
});
