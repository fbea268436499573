import type { PlatformDeps } from '../deps.js';
import type { ProgressFn } from './runtime/driver.js';

/**
 * A template build's output in nube's log: each step once at info, with the estimate (what an operator
 * watching `npm start` needs while the first sandbox waits minutes), every line at debug.
 */
export function buildLogger(log: PlatformDeps['log'], fields: Record<string, unknown>): ProgressFn {
  let step = '';
  return (line, p) => {
    if (p && p.step !== step) {
      step = p.step;
      const msg = p.step === 'done' ? line : `building template ${p.template}: ${p.step} (about ${p.percent} %)`;
      log.info({ ...fields, step: p.step, percent: p.percent, elapsedSeconds: p.elapsedSeconds }, msg);
    }
    log.debug(fields, line);
  };
}
