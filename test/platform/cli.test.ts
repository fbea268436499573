import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { startNube } from '../helpers/server.js';

const run = promisify(execFile);
const dataDir = mkdtempSync(join(tmpdir(), 'nube-cli-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

async function nube(...args: string[]): Promise<string> {
  const { stdout } = await run('npx', ['tsx', 'src/main.ts', ...args], {
    env: { ...process.env, NUBE_DATA_DIR: dataDir, NUBE_LOG_LEVEL: 'silent' },
    cwd: process.cwd(),
  });
  return stdout;
}

describe('nube CLI', () => {
  it('creates accounts and keys, lists and revokes them; the server honours them', async () => {
    const created = JSON.parse(await nube('accounts', 'create', '--plan', 'mega', '--name', 'team'));
    expect(created.plan).toBe('mega');
    expect(created.apiKey).toMatch(/^nube_sk_live_/);
    const key = JSON.parse(await nube('keys', 'create', '--account', created.accountId, '--name', 'deploy'));
    const listed = JSON.parse(await nube('keys', 'list', '--account', created.accountId));
    expect(listed.map((k: { name: string }) => k.name)).toEqual(['default', 'deploy']);
    expect(JSON.stringify(listed)).not.toContain(key.apiKey);

    const server = await startNube({ dataDir, env: { NUBE_AUTH_CACHE_MS: '0' } });
    try {
      const ok = await fetch(`${server.baseUrl}/api/v2/account`, { headers: { authorization: `Bearer ${key.apiKey}` } });
      expect(ok.status).toBe(200);
      expect(((await ok.json()) as { plan: { name: string } }).plan.name).toBe('mega');
      await nube('keys', 'revoke', key.id);
      const revoked = await fetch(`${server.baseUrl}/api/v2/account`, { headers: { authorization: `Bearer ${key.apiKey}` } });
      expect(revoked.status).toBe(401);
    } finally {
      await server.close();
    }
  }, 240_000);

  it('templates build refuses an unknown template by name (building a real one is covered by the runtime tests)', async () => {
    await expect(
      run('npx', ['tsx', 'src/main.ts', 'templates', 'build', 'no-such-template'], { env: { ...process.env, NUBE_DATA_DIR: dataDir } }),
    ).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('unknown template no-such-template') });
  }, 120_000);

  it('migrate --dry-run lists what an upgrade would apply; a store a newer nube migrated is refused, saying so', async () => {
    const fresh = mkdtempSync(join(tmpdir(), 'nube-cli-dry-'));
    try {
      const env = { ...process.env, NUBE_DATA_DIR: fresh, NUBE_LOG_LEVEL: 'silent' };
      const cli = (...args: string[]) => run('npx', ['tsx', 'src/main.ts', ...args], { env });
      const before = (await cli('migrate', '--dry-run')).stdout;
      expect(before).toMatch(/^\d+ migration\(s\) to apply, in this order:/);
      expect(before).toContain('0104-sandboxes-memory-kept');
      // A dry run applies nothing: asked again, it lists the same.
      expect((await cli('migrate', '--dry-run')).stdout).toBe(before);
      await cli('migrate');
      expect((await cli('migrate', '--dry-run')).stdout).toBe('the metadata store is up to date: nothing to apply\n');
      // As if a newer nube had run a migration this one does not have.
      const db = new Database(join(fresh, 'nube.db'));
      db.prepare("insert into nube_migrations (name, timestamp) values ('9999-from-the-future', '2030-01-01T00:00:00.000Z')").run();
      db.close();
      for (const args of [['migrate', '--dry-run'], ['migrate']]) {
        await expect(cli(...args)).rejects.toMatchObject({
          code: 1,
          stderr: expect.stringContaining('migrated by a newer nube (1 migration(s) this version does not have: 9999-from-the-future)'),
        });
      }
    } finally {
      rmSync(fresh, { recursive: true, force: true });
    }
  }, 180_000);

  it('refuses a bad configuration with a message naming the variable', async () => {
    await expect(
      run('npx', ['tsx', 'src/main.ts', 'migrate'], { env: { ...process.env, NUBE_DATA_DIR: dataDir, NUBE_PORT: 'x' } }),
    ).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('NUBE_PORT') });
  }, 120_000);
});
