import { describe, expect, it } from 'vitest';
import type { PlatformDeps } from '../deps.js';
import { buildLogger } from './build-log.js';

describe('template build log', () => {
  it('logs each step once at info with its estimate, every line at debug', () => {
    const info: [Record<string, unknown>, string][] = [];
    const debug: string[] = [];
    const log = { info: (o: Record<string, unknown>, m: string) => info.push([o, m]), debug: (_: unknown, m: string) => debug.push(m) };
    const fn = buildLogger(log as unknown as PlatformDeps['log'], { sandbox: 'sbx_1' });
    const p = (step: string, percent: number) => ({ template: 'base', step, percent, elapsedSeconds: 3, pid: 1 });
    fn('building template base', p('preparing', 0));
    fn('I: running apt-get update...', p('updating package lists', 0));
    fn('I: some other line', p('updating package lists', 1));
    fn('a line without progress');
    fn('template base built in 83.2 s', p('done', 100));
    expect(info.map(([, m]) => m)).toEqual([
      'building template base: preparing (about 0 %)',
      'building template base: updating package lists (about 0 %)',
      'template base built in 83.2 s',
    ]);
    expect(info[1]![0]).toMatchObject({ sandbox: 'sbx_1', step: 'updating package lists', percent: 0, elapsedSeconds: 3 });
    expect(debug).toHaveLength(5);
  });
});
