// `nube backup` on the gVisor driver: its sandboxes' files are not copied, and every backup says so
// (issue 37), rather than leaving them out in silence.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../config.js';
import { sandboxesArea } from './index.js';

describe('the sandboxes area in a backup', () => {
  it('on gVisor, says that its sandboxes are not in the backup and puts nothing back', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nube-bkp-'));
    const config = loadConfig({ NUBE_DATA_DIR: dir, NUBE_SANDBOX_DRIVER: 'gvisor' });
    const parts = sandboxesArea.backup!(config);
    expect(parts.map((p) => p.name)).toEqual(['sandbox-store']);
    const lines: string[] = [];
    await parts[0]!.own!.take(join(dir, 'into'), (l) => lines.push(l));
    expect(lines.join('\n')).toMatch(/gVisor driver's sandboxes are not in this backup/);
    await expect(parts[0]!.own!.put(join(dir, 'from'), () => {})).resolves.toBeUndefined();
  });
});
