// `nube doctor`: the platform's checks and every area's, run at once, printed one line per finding.
import { AREAS } from './areas/index.js';
import { ConfigError, type Config, loadConfig } from './config.js';
import { type CheckReport, fail, formatReport, runChecks } from './platform/doctor.js';
import { platformChecks } from './platform/doctor-checks.js';
import { ALL_MIGRATIONS } from './migrations.js';

/** Every migration this nube knows, by name (what a current store has applied). */
const MIGRATIONS = Object.keys(ALL_MIGRATIONS);

export async function doctor(env: Record<string, string | undefined> = process.env): Promise<{ reports: CheckReport[]; exitCode: number }> {
  let config: Config;
  try {
    config = loadConfig(env);
  } catch (e) {
    // Nothing else can be checked without a configuration.
    const found = e instanceof ConfigError ? e.message.replace(/\n\s*/g, ' ') : `cannot load the configuration: ${(e as Error).message}`;
    return { reports: [{ check: 'configuration', ...fail(found, 'correct the variables named above') }], exitCode: 1 };
  }
  const checks = [...platformChecks(config, MIGRATIONS), ...AREAS.flatMap((a) => a.doctor?.(config) ?? [])];
  const reports = await runChecks(checks);
  return { reports, exitCode: reports.some((r) => r.status === 'fail') ? 1 : 0 };
}

export { formatReport };
