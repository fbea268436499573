// Runs the slowest test files first. CI starts from a clean clone, so vitest has no durations of its
// own and keeps the include order: the long kill and multi-node files (test/webhooks, test/websites...)
// came last and ran alone at the end. test/durations.json holds each file's seconds from a full run
// (`node scripts/test-durations.mjs <vitest json report>` rewrites it); a file it does not know yet
// counts as UNKNOWN_S. The order changes only when files start, never what runs.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const UNKNOWN_S = 20;

function durations(): Record<string, number> {
  try {
    return JSON.parse(readFileSync(new URL('./durations.json', import.meta.url), 'utf8')) as Record<
      string,
      number
    >;
  } catch {
    return {};
  }
}

export default class SlowestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const known = durations();
    const root = this.ctx.config.root;
    const cost = (f: TestSpecification) => known[relative(root, f.moduleId)] ?? UNKNOWN_S;
    return [...files].sort((a, b) => cost(b) - cost(a));
  }
}
