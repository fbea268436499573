// `nube service install|status|logs|uninstall`: nube as a systemd service. The unit runs the same
// entry `npm start` does, with the configuration this shell had at install time in an environment
// file (root-only: it may hold NUBE_SECRET and database passwords). A stop sends SIGTERM to nube
// alone, which finishes in-flight requests and jobs and leaves sandboxes running, as a stop by hand
// does: sandboxes live in nube's own cgroups, outside the unit's, so systemd's final kill of what is
// left in the unit (nube's helpers) never reaches them.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { CONFIG_VARIABLES } from './config.js';

export const UNIT_NAME = 'nube.service';

export interface ServicePaths {
  /** Where systemd reads units (default /etc/systemd/system). */
  unitDir: string;
  /** The environment file (default /etc/nube/env). */
  envFile: string;
}

export const DEFAULT_PATHS: ServicePaths = { unitDir: '/etc/systemd/system', envFile: '/etc/nube/env' };

/** The command the unit starts: the checkout's `npm start` entry, or an installed package's build. */
export function execStart(root: string, node = process.execPath): string[] {
  const fromCheckout = existsSync(join(root, 'src/main.ts'));
  return [node, join(root, fromCheckout ? 'scripts/run-built.mjs' : 'dist/src/main.js'), 'serve'];
}

/** A value as systemd reads it in ExecStart and environment files: quoted, with \ and " escaped. */
function quote(v: string): string {
  return `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
}

export function unitText(o: { root: string; envFile: string; node?: string }): string {
  return `[Unit]
Description=nube: self-hostable cloud for AI agents
Documentation=file://${join(o.root, 'README.md')}
After=network-online.target postgresql.service redis-server.service
Wants=network-online.target

[Service]
Type=simple
WorkingDirectory=${o.root}
EnvironmentFile=${o.envFile}
ExecStart=${execStart(o.root, o.node).map(quote).join(' ')}
# SIGTERM to nube only: it finishes in-flight work and leaves sandboxes running (they are in its own
# cgroups, outside this unit's); what is left in the unit afterwards is nube's helpers.
KillMode=mixed
KillSignal=SIGTERM
TimeoutStopSec=90
Restart=on-failure
RestartSec=2
# Every sandbox's exec, port and database connection is a descriptor of nube's.
LimitNOFILE=1048576
TasksMax=infinity

[Install]
WantedBy=multi-user.target
`;
}

/**
 * The environment file: every configuration variable set in `env`, with the data directory made
 * absolute (the default ./data is relative to where nube was started).
 */
export function envFileText(env: Record<string, string | undefined>, dataDir: string): string {
  const lines = ['# nube\'s configuration for its systemd service (nube service install). Root only: it may hold secrets.'];
  for (const name of CONFIG_VARIABLES) {
    const v = name === 'NUBE_DATA_DIR' ? dataDir : env[name];
    if (v !== undefined && v !== '') lines.push(`${name}=${quote(v)}`);
  }
  if (!lines.some((l) => l.startsWith('NUBE_DATA_DIR='))) lines.push(`NUBE_DATA_DIR=${quote(dataDir)}`);
  return `${lines.join('\n')}\n`;
}

/** Whether systemd manages this host (it is PID 1): otherwise units can be written, not started. */
export function systemdRuns(): boolean {
  return existsSync('/run/systemd/system');
}

function systemctl(...args: string[]): void {
  execFileSync('systemctl', args, { stdio: 'inherit' });
}

export interface InstallResult {
  unitFile: string;
  envFile: string;
  /** The environment file was there already and was kept as it was. */
  keptEnv: boolean;
  started: boolean;
  /** Why it was not started, in words. */
  notStarted?: string;
}

export function install(o: { root: string; env: Record<string, string | undefined>; dataDir: string; paths?: ServicePaths; start?: boolean }): InstallResult {
  const paths = o.paths ?? DEFAULT_PATHS;
  const unitFile = join(paths.unitDir, UNIT_NAME);
  mkdirSync(paths.unitDir, { recursive: true });
  writeFileSync(unitFile, unitText({ root: resolve(o.root), envFile: paths.envFile }), { mode: 0o644 });
  const keptEnv = existsSync(paths.envFile);
  if (!keptEnv) {
    mkdirSync(dirname(paths.envFile), { recursive: true, mode: 0o700 });
    writeFileSync(paths.envFile, envFileText(o.env, resolve(o.dataDir)), { mode: 0o600 });
    chmodSync(paths.envFile, 0o600);
  }
  const result: InstallResult = { unitFile, envFile: paths.envFile, keptEnv, started: false };
  if (o.start === false) return { ...result, notStarted: 'asked not to (--no-start)' };
  if (!systemdRuns()) return { ...result, notStarted: 'systemd is not running on this host (no /run/systemd/system), so the unit cannot be enabled here' };
  systemctl('daemon-reload');
  systemctl('enable', '--now', UNIT_NAME);
  return { ...result, started: true };
}

export function uninstall(o: { paths?: ServicePaths; purge?: boolean }): { removed: string[] } {
  const paths = o.paths ?? DEFAULT_PATHS;
  const unitFile = join(paths.unitDir, UNIT_NAME);
  if (systemdRuns() && existsSync(unitFile)) systemctl('disable', '--now', UNIT_NAME);
  const removed: string[] = [];
  if (existsSync(unitFile)) {
    rmSync(unitFile);
    removed.push(unitFile);
  }
  if (o.purge && existsSync(paths.envFile)) {
    rmSync(paths.envFile);
    removed.push(paths.envFile);
  }
  if (systemdRuns()) systemctl('daemon-reload');
  return { removed };
}

/** `systemd-analyze verify` of a unit file: its complaints, or [] (null when the tool is missing). */
export function verifyUnit(unitFile: string): string[] | null {
  const r = spawnSync('systemd-analyze', ['verify', unitFile], { encoding: 'utf8' });
  if (r.error) return null;
  return `${r.stderr}${r.stdout}`
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l?.includes(unitFile.split('/').pop() ?? UNIT_NAME));
}

/** Runs `systemctl status` / `journalctl -u` for the unit, passing their output and exit code through. */
export function passThrough(what: 'status' | 'logs', follow = false): number {
  if (!systemdRuns()) {
    console.error('nube: systemd is not running on this host (no /run/systemd/system): there is no service to ask');
    return 1;
  }
  const [cmd, args] = what === 'status' ? ['systemctl', ['status', '--no-pager', UNIT_NAME]] : ['journalctl', ['-u', UNIT_NAME, '--no-pager', ...(follow ? ['-f'] : ['-n', '200'])]];
  return spawnSync(cmd as string, args as string[], { stdio: 'inherit' }).status ?? 1;
}

/** The checkout or package nube runs from: the nearest directory up from `from` with a package.json. */
export function packageRoot(from: string): string {
  let dir = from;
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`no package.json above ${from}`);
    dir = up;
  }
  return dir;
}
