// The Python SDK's own suite (packages/python/tests, Debian's python3-pytest), run as a child process
// so that `npm test` covers it: pytest starts a real nube with sandboxes and the LLM stub
// (test/serve-nube.ts), runs mypy --strict, builds the wheel and installs it into a fresh venv offline.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const pyDir = join(dirname(fileURLToPath(import.meta.url)), '..');
// Debian's python3, where python3-pytest, mypy and python3-build are installed (a pyenv `python3` on
// PATH has none of them).
const PYTHON = process.env.NUBE_PYTHON ?? '/usr/bin/python3';

describe('Python SDK (pytest)', () => {
  it('passes its pytest suite against a real nube', async () => {
    const env = { ...process.env };
    delete env.NUBE_TEST_BASE_URL;
    delete env.NUBE_TEST_API_KEY;
    const child = spawn(PYTHON, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-rfE', 'tests'], {
      cwd: pyDir,
      env,
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    expect(code, out.slice(-20_000)).toBe(0);
    expect(out).toMatch(/\d+ passed/);
    expect(out).not.toMatch(/\d+ (failed|error)/);
  }, 1_200_000);
});
