// The scopes keys may name, compiled from the operation registry: `<area>:read`, `<area>:write` and
// each operation id (platform/scopes.ts has the checks a request goes through).
import { type ErrorIssue, errors } from './errors.js';
import type { AnyOperation } from './operation.js';
import { scopeOf } from './scopes.js';

export class ScopeCatalog {
  private readonly byScope = new Map<string, string[]>();
  private readonly ops = new Map<string, AnyOperation>();
  constructor(operations: readonly AnyOperation[]) {
    for (const op of operations) {
      if (!op.auth.includes('owner')) continue;
      this.ops.set(op.id, op);
      const s = scopeOf(op);
      this.byScope.set(s, [...(this.byScope.get(s) ?? []), op.id]);
    }
  }

  /** Every name a scope may have: `<area>:read`, `<area>:write` for each area, and each operation id. */
  validNames(): string[] {
    const areas = new Set([...this.byScope.keys()].map((s) => s.slice(0, s.indexOf(':'))));
    return [...[...areas].sort().flatMap((a) => [`${a}:read`, `${a}:write`]), ...[...this.ops.keys()].sort()];
  }

  /** 400 listing the valid names when one is unknown; else the operation ids the scopes allow. */
  compile(scopes: readonly string[], path: (string | number)[] = ['body', 'scopes'], strict = true): Set<string> {
    const valid = new Set(this.validNames());
    const issues: ErrorIssue[] = [];
    if (!strict) scopes = scopes.filter((s) => valid.has(s));
    scopes.forEach((s, i) => {
      if (!valid.has(s)) issues.push({ path: [...path, i], message: `unknown scope ${s}`, code: 'unknown_scope' });
    });
    if (issues.length) {
      throw errors.badRequest(`unknown scope: ${issues.map((i) => i.message.slice(14)).join(', ')}; valid scopes: ${[...valid].join(', ')}`, issues, 'UnknownScope');
    }
    const allowed = new Set<string>();
    for (const s of scopes) {
      if (this.ops.has(s)) allowed.add(s);
      // An area's write scope includes its reads: whoever may delete a sandbox may look at it.
      else if (s.endsWith(':write')) for (const id of [...(this.byScope.get(s) ?? []), ...(this.byScope.get(`${s.slice(0, -6)}:read`) ?? [])]) allowed.add(id);
      else for (const id of this.byScope.get(s) ?? []) allowed.add(id);
    }
    return allowed;
  }

  /** Each area with the operations its read scope and its write scope add (writes include the reads). */
  areas(): { area: string; read: string[]; write: string[] }[] {
    const areas = [...new Set([...this.byScope.keys()].map((s) => s.slice(0, s.indexOf(':'))))].sort();
    return areas.map((area) => ({
      area,
      read: [...(this.byScope.get(`${area}:read`) ?? [])].sort(),
      write: [...(this.byScope.get(`${area}:write`) ?? [])].sort(),
    }));
  }

  operation(id: string): AnyOperation | undefined {
    return this.ops.get(id);
  }
}
