// `nube doctor`'s list of what a stopped nube left on the host, and `nube cleanup` (issue 28 item 7),
// for the configured driver's data dir (runtime/namespaces/leftovers.ts does the work).
import type { Config } from '../../platform/config-shape.js';
import { type CheckResult, ok, warn } from '../../platform/doctor.js';
import {
  type CleanupResult,
  cleanLeftovers,
  findLeftovers,
  type LeftoverOptions,
} from './runtime/namespaces/leftovers.js';
import { runtimeDataDir } from './runtime-dir.js';

export function leftoverOptions(config: Config): LeftoverOptions {
  const c = config.sandboxes;
  return { dataDir: runtimeDataDir(config), bridge: c.bridge, cgroupParent: c.cgroupParent, cgroupVersion: c.cgroups };
}

/**
 * One line per part: `ok` while nube runs on the data dir (it uses them) or while a sandbox or another
 * nube needs the part; `warn` with `nube cleanup` when nobody does.
 */
export async function leftoversCheck(config: Config): Promise<CheckResult[]> {
  const scan = await findLeftovers(leftoverOptions(config));
  if (scan.nubes.length) {
    return [ok(`nube ${scan.nubes.map((u) => u.pid).join(', ')} runs on this data dir: the store, bridge, nft table, cgroups and run dir are its own`)];
  }
  if (scan.items.length === 0) return [ok('a stopped nube left nothing on this host')];
  return scan.items.map((i) =>
    i.neededBy.length
      ? ok(`left by a stopped nube: ${i.what}; needed by ${i.neededBy.join(', ')}`)
      : warn(`left by a stopped nube: ${i.what}; no sandbox needs it`, 'nube cleanup removes it'),
  );
}

export function cleanup(config: Config, force: boolean): Promise<CleanupResult> {
  return cleanLeftovers(leftoverOptions(config), { force });
}

/** Text for the CLI. */
export function formatCleanup(r: CleanupResult): string {
  if (r.refused) return `nube cleanup: nothing removed: ${r.refused}\n`;
  const lines = [
    ...r.killed.map((id) => `killed   sandbox ${id} (its files stay; nube starts it again when it starts)`),
    ...r.removed.map((w) => `removed  ${w}`),
    ...r.kept.map((w) => `kept     ${w}`),
    ...r.failed.map((w) => `FAILED   ${w}`),
  ];
  return `${lines.join('\n') || 'nothing to remove'}\n`;
}
