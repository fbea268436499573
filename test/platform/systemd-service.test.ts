import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { CONFIG_VARIABLES } from '../../src/config.js';
import { envFileText, execStart, install, passThrough, systemdRuns, uninstall, verifyUnit } from '../../src/systemd-service.js';

// `nube service install|uninstall`: the unit and environment file it writes, checked by systemd's own
// `systemd-analyze verify` (this project's machines do not run systemd as PID 1, so the unit is never
// started here: on such a host install says so and exits 1).

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'nube-service-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const unitDir = join(dir, 'units');
const envFile = join(dir, 'etc/nube/env');
const SECRET = 'a "quoted" secret \\ with a backslash, long enough';

async function nube(args: string[], env: Record<string, string> = {}) {
  return run('npx', ['tsx', 'src/main.ts', ...args], { env: { ...process.env, NUBE_LOG_LEVEL: 'silent', ...env }, cwd: process.cwd() }).then(
    (r) => ({ code: 0, ...r }),
    (e: { code: number; stdout: string; stderr: string }) => e,
  );
}

/** An environment file read back the way systemd reads one: NAME="value" with \" and \\ escapes. */
function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z_][A-Z0-9_]*)="((?:[^"\\]|\\.)*)"$/.exec(line);
    if (m) out[m[1]!] = m[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
  }
  return out;
}

describe('nube service', () => {
  it('install writes a unit systemd accepts and a root-only environment file with this shell\'s configuration', async () => {
    const r = install({
      root: process.cwd(),
      env: { ...process.env, NUBE_SECRET: SECRET, NUBE_PORT: '7171' },
      dataDir: 'relative-data',
      paths: { unitDir, envFile },
      start: false,
    });
    expect(r).toMatchObject({ started: false, notStarted: 'asked not to (--no-start)', keptEnv: false });
    const unitFile = join(unitDir, 'nube.service');
    const unit = readFileSync(unitFile, 'utf8');
    const [node, entry] = execStart(process.cwd());
    expect(unit).toContain(`ExecStart="${node}" "${entry}" "serve"`);
    expect(node).toBe(process.execPath);
    expect(entry).toBe(join(process.cwd(), 'scripts/run-built.mjs'));
    expect(unit).toContain(`WorkingDirectory=${process.cwd()}`);
    expect(unit).toContain(`EnvironmentFile=${envFile}`);
    // A stop is nube's own SIGTERM (in-flight work finishes, sandboxes stay), restarts on a crash.
    expect(unit).toMatch(/^KillMode=mixed$/m);
    expect(unit).toMatch(/^Restart=on-failure$/m);
    expect(unit).toMatch(/^LimitNOFILE=\d+$/m);
    const complaints = verifyUnit(unitFile);
    if (complaints !== null) expect(complaints).toEqual([]);

    expect(statSync(envFile).mode & 0o777).toBe(0o600);
    const env = parseEnvFile(readFileSync(envFile, 'utf8'));
    expect(env).toMatchObject({ NUBE_SECRET: SECRET, NUBE_PORT: '7171', NUBE_DATA_DIR: join(process.cwd(), 'relative-data') });
    // Only the configuration's own variables: nothing else of the shell leaks into the file.
    expect(Object.keys(env).filter((k) => !CONFIG_VARIABLES.includes(k))).toEqual([]);
    expect(env.PATH).toBeUndefined();
    expect(env.HOME).toBeUndefined();
  }, 120_000);

  it('a second install keeps an environment file the operator edited; uninstall removes the unit, --purge the file too', async () => {
    writeFileSync(envFile, 'NUBE_PORT="8080"\n', { mode: 0o600 });
    const again = install({ root: process.cwd(), env: process.env, dataDir: '/srv/other', paths: { unitDir, envFile }, start: false });
    expect(again.keptEnv).toBe(true);
    expect(readFileSync(envFile, 'utf8')).toBe('NUBE_PORT="8080"\n');

    expect(uninstall({ paths: { unitDir, envFile } }).removed).toEqual([join(unitDir, 'nube.service')]);
    expect(existsSync(envFile)).toBe(true);
    install({ root: process.cwd(), env: process.env, dataDir: '/srv/other', paths: { unitDir, envFile }, start: false });
    expect(uninstall({ paths: { unitDir, envFile }, purge: true }).removed).toEqual([join(unitDir, 'nube.service'), envFile]);
    expect(existsSync(envFile)).toBe(false);
  });

  it.skipIf(systemdRuns())('on a host without systemd, `nube service install` writes the files and says in words why it could not start them', async () => {
    const r = await nube(['service', 'install', '--unit-dir', unitDir, '--environment-file', envFile], { NUBE_DATA_DIR: join(dir, 'data') });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`wrote ${join(unitDir, 'nube.service')}`);
    expect(r.stdout).toContain('not started: systemd is not running on this host');
    expect(parseEnvFile(readFileSync(envFile, 'utf8')).NUBE_DATA_DIR).toBe(join(dir, 'data'));
    expect(passThrough('status')).toBe(1);
  }, 120_000);

  it('environment files quote what systemd would otherwise split or unescape', () => {
    const text = envFileText({ NUBE_SECRET: 'x"y\\z', NUBE_PUBLIC_URL: 'https://a.example', UNRELATED: 'no' }, '/srv/nube');
    expect(parseEnvFile(text)).toEqual({ NUBE_SECRET: 'x"y\\z', NUBE_PUBLIC_URL: 'https://a.example', NUBE_DATA_DIR: '/srv/nube' });
  });
});
