// `nube doctor`: checks of the host and the configuration, each answering what it found and, when
// something is wrong, what to do about it. Platform and every area contribute checks (AreaModule.doctor);
// this file runs them and prints the report.
import { randomBytes } from 'node:crypto';
import { unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * ok: nothing to do. skip: not configured, nothing to check. warn: works, but worth fixing (slow first
 * sandbox, a risky setting). fail: nube will not start, or sandboxes will not run, until it is fixed.
 */
export type CheckStatus = 'ok' | 'skip' | 'warn' | 'fail';

export interface CheckResult {
  status: CheckStatus;
  /** What was found, one line. */
  found: string;
  /** What to do, one line (for warn and fail). */
  fix?: string;
}

export interface DoctorCheck {
  /** Short name shown in the report (`metadata store`, `cgroups`). */
  name: string;
  run(): Promise<CheckResult | CheckResult[]> | CheckResult | CheckResult[];
}

export interface CheckReport extends CheckResult {
  check: string;
}

export const ok = (found: string): CheckResult => ({ status: 'ok', found });
export const skip = (found: string): CheckResult => ({ status: 'skip', found });
export const warn = (found: string, fix: string): CheckResult => ({ status: 'warn', found, fix });
export const fail = (found: string, fix: string): CheckResult => ({ status: 'fail', found, fix });

/** Runs every check at once (a check waiting on a network timeout holds up no other); reports in order. */
export async function runChecks(checks: DoctorCheck[], timeoutMs = 15_000): Promise<CheckReport[]> {
  const results = await Promise.all(
    checks.map(async (c): Promise<CheckReport[]> => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<CheckResult>((resolve) => {
        timer = setTimeout(
          () => resolve(fail(`no answer within ${timeoutMs / 1000} s`, 'see why the check hangs (a firewall dropping packets?)')),
          timeoutMs,
        );
      });
      try {
        const r = await Promise.race([Promise.resolve().then(() => c.run()), late]);
        return (Array.isArray(r) ? r : [r]).map((x) => ({ check: c.name, ...x }));
      } catch (e) {
        return [{ check: c.name, ...fail(`the check itself failed: ${errorText(e)}`, 'report this as a bug of nube doctor') }];
      } finally {
        clearTimeout(timer);
      }
    }),
  );
  return results.flat();
}

const LABEL: Record<CheckStatus, string> = { ok: 'ok  ', skip: '-   ', warn: 'WARN', fail: 'FAIL' };

/** One line per finding; a problem's line ends with what to do about it. */
export function formatReport(reports: CheckReport[]): string {
  const width = Math.max(...reports.map((r) => r.check.length));
  const lines = reports.map((r) => {
    const head = `${LABEL[r.status]}  ${r.check.padEnd(width)}  ${r.found}`;
    return r.fix && (r.status === 'warn' || r.status === 'fail') ? `${head} -> ${r.fix}` : head;
  });
  const fails = reports.filter((r) => r.status === 'fail').length;
  const warns = reports.filter((r) => r.status === 'warn').length;
  const summary =
    fails > 0
      ? `${fails} problem${fails === 1 ? '' : 's'} (FAIL) keep nube or its sandboxes from working; ${warns} warning${warns === 1 ? '' : 's'}.`
      : warns > 0
        ? `nothing blocks nube; ${warns} warning${warns === 1 ? '' : 's'} worth a look.`
        : 'all good.';
  return `${lines.join('\n')}\n\n${summary}\n`;
}

/** An error's message with the system code when there is one (`connect ECONNREFUSED 127.0.0.1:1`). */
export function errorText(e: unknown): string {
  if (e instanceof AggregateError && e.errors.length) return errorText(e.errors[0]);
  if (e instanceof Error) return e.message || (e as NodeJS.ErrnoException).code || e.name;
  return String(e);
}

/** Whether this user can create a file in `dir` (tried for real: root passes access() checks on read-only mounts). */
export async function canWrite(dir: string): Promise<{ ok: true } | { ok: false; why: string }> {
  const probe = join(dir, `.nube-doctor-${process.pid}-${randomBytes(4).toString('hex')}`);
  try {
    await writeFile(probe, 'x');
    await unlink(probe);
    return { ok: true };
  } catch (e) {
    return { ok: false, why: errorText(e) };
  }
}

/** A URL for display: the password replaced by `***`. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}
