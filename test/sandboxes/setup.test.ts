// README's set-up builds the `base` template ahead (scripts/build-templates.sh, run by setup.sh); run
// again on a host where it is built, it checks and rebuilds nothing.
import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { readTemplate, recipeHash } from '../../src/areas/sandboxes/runtime/namespaces/templates.js';
import { TEMPLATE_WAIT_MS, TEST_ROOT } from './helpers.js';

const run = promisify(execFile);
const dataDir = `${TEST_ROOT}/setup-${process.pid}`;
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('set-up builds templates ahead', () => {
  it('build-templates.sh builds base, or keeps the build of its current recipe', async () => {
    const env = { ...process.env, NUBE_TEMPLATES_DIR: `${TEST_ROOT}/templates`, NUBE_DATA_DIR: dataDir };
    const first = await run('sh', ['scripts/build-templates.sh'], { env, maxBuffer: 16 << 20 });
    const built = await readTemplate(`${TEST_ROOT}/templates`, 'base', recipeHash('base', 100_000));
    expect(built).not.toBeNull();
    expect(JSON.parse(first.stdout.slice(first.stdout.lastIndexOf('{\n')))).toEqual(built);
    const again = await run('sh', ['scripts/build-templates.sh'], { env });
    expect(JSON.parse(again.stdout)).toEqual(built);
    expect(await run('sh', ['scripts/build-templates.sh'], { env: { ...env, NUBE_SETUP_TEMPLATES: '' } })).toMatchObject({ stdout: '' });
  }, TEMPLATE_WAIT_MS);
});
