import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

function where(url: string): string {
  if (!url) return '(native)';
  const path = url.replace(/^file:\/\//, '');
  const nm = path.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const rest = path.slice(nm + 'node_modules/'.length).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  if (path.startsWith('node:')) return path;
  return relative(process.cwd(), path);
}

/**
 * Text report of a .cpuprofile: share of busy (non-idle) time by function, self and inclusive, and self
 * time by file or package. Inclusive time counts a function once per sample however deep it recurses.
 */
export function summarizeProfile(file: string, top = 25): string {
  const p = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const nodes = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const label = (n: ProfileNode) =>
    `${n.callFrame.functionName || '(anonymous)'} ${where(n.callFrame.url)}${n.callFrame.url ? `:${n.callFrame.lineNumber + 1}` : ''}`;
  const self = new Map<string, number>();
  const incl = new Map<string, number>();
  const byFile = new Map<string, number>();
  let busy = 0;
  let idle = 0;
  p.samples.forEach((id, i) => {
    const n = nodes.get(id);
    const dt = p.timeDeltas[i] ?? 0;
    if (!n) return;
    if (n.callFrame.functionName === '(idle)') {
      idle += dt;
      return;
    }
    busy += dt;
    self.set(label(n), (self.get(label(n)) ?? 0) + dt);
    const w = where(n.callFrame.url);
    byFile.set(w, (byFile.get(w) ?? 0) + dt);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const l = label(nodes.get(cur)!);
      if (seen.has(l)) continue;
      seen.add(l);
      incl.set(l, (incl.get(l) ?? 0) + dt);
    }
  });
  const fmt = (m: Map<string, number>) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, v]) => `${((v / busy) * 100).toFixed(1).padStart(5)}%  ${k}`)
      .join('\n');
  return [
    `busy ${(busy / 1000).toFixed(0)} ms, idle ${(idle / 1000).toFixed(0)} ms; shares below are of busy time`,
    `\nself time by function (top ${top}):\n${fmt(self)}`,
    `\ninclusive time by function (top ${top}):\n${fmt(incl)}`,
    `\nself time by file or package:\n${fmt(byFile)}`,
  ].join('\n');
}
