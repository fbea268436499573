// robots.txt (RFC 9309) for the `*` group: Allow/Disallow path patterns with `*` and `$`, the longest
// matching rule wins, Allow wins a tie. nube's crawler has no name of its own, so only `*` applies.

export interface RobotsRules {
  allow: string[];
  disallow: string[];
}

export const NO_RULES: RobotsRules = { allow: [], disallow: [] };

export function parseRobots(text: string): RobotsRules {
  const rules: RobotsRules = { allow: [], disallow: [] };
  let inStar = false;
  let lastWasAgent = false;
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.replace(/#.*$/, '').trim();
    const m = /^([A-Za-z-]+)\s*:\s*(.*)$/.exec(line);
    if (!m) continue;
    const key = m[1]!.toLowerCase();
    const value = m[2]!.trim();
    if (key === 'user-agent') {
      // Consecutive User-agent lines open one group; a User-agent after rules opens a new one.
      inStar = (lastWasAgent && inStar) || value === '*';
      lastWasAgent = true;
      continue;
    }
    lastWasAgent = false;
    if (!inStar || value === '') continue;
    if (key === 'disallow') rules.disallow.push(value);
    else if (key === 'allow') rules.allow.push(value);
  }
  return rules;
}

function matchLength(pattern: string, path: string): number {
  const anchored = pattern.endsWith('$');
  const body = anchored ? pattern.slice(0, -1) : pattern;
  const re = new RegExp(`^${body.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}${anchored ? '$' : ''}`);
  return re.test(path) ? pattern.length : -1;
}

/** Whether `pathAndQuery` (e.g. `/a/b?x=1`) may be fetched under `rules`. */
export function robotsAllows(rules: RobotsRules, pathAndQuery: string): boolean {
  let best = -1;
  let allowed = true;
  for (const p of rules.disallow) {
    const n = matchLength(p, pathAndQuery);
    if (n > best) [best, allowed] = [n, false];
  }
  for (const p of rules.allow) {
    const n = matchLength(p, pathAndQuery);
    if (n >= best && n >= 0) [best, allowed] = [n, true];
  }
  return allowed;
}
