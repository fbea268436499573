// run-cell and kernel-restart on a real Jupyter kernel (the code-interpreter template): state persists
// across cells, errors carry name/value/traceback, rich outputs come back, a timeout interrupts the cell
// and the kernel keeps its state, kernel-restart (and a kernel that dies) gives a fresh namespace.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRIVERS, type SandboxNube, TEMPLATE_WAIT_MS, createRunning, startSandboxNube, stopSandboxNube } from './helpers.js';

let t: SandboxNube;
let id: string;
const sx = (path: string) => `/sandboxes/${id}${path}`;
const cell = (code: string, extra: Record<string, unknown> = {}) =>
  t.call('POST', sx('/run-cell'), { code, ...extra });

describe.each(DRIVERS)('%s: run-cell on a Jupyter kernel', (driver) => {
  beforeAll(async () => {
    // code-interpreter may not be built yet on this host: built (or waited for) before the tests.
    t = await startSandboxNube('kernel', { NUBE_SANDBOX_DRIVER: driver }, undefined, { templates: ['code-interpreter'] });
    id = (await createRunning(t, { template: 'code-interpreter', timeoutSeconds: 1200 })).id;
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('run-cell keeps state between cells; kernel-restart clears it', async () => {
    const a = await cell('x = 41\nprint("set")');
    expect(a.status, JSON.stringify(a.body)).toBe(200);
    expect(a.body).toMatchObject({ stdout: 'set\n', error: null, kernelStarted: true });
    const b = await cell('x + 1');
    expect(b.body.result).toBe('42');
    expect(b.body).toMatchObject({ kernelStarted: false, timedOut: false });
    expect(b.body.outputs).toEqual([{ type: 'execute_result', data: { 'text/plain': '42' } }]);
    expect(b.body.executionCount).toBe(2);
    const e = await cell('1/0');
    expect(e.body.error.name).toBe('ZeroDivisionError');
    expect((await t.call('POST', sx('/kernel-restart'))).body.restarted).toBe(true);
    const c = await cell('x');
    expect(c.body.error.name).toBe('NameError');
    expect((await cell('x', { lang: 'node' })).status).toBe(400);
  }, 120_000);

  it('an exception returns its name, value and a plain-text traceback; stderr and display data come back', async () => {
    const e = await cell('def f():\n    raise ValueError("bad thing")\nf()');
    expect(e.status).toBe(200);
    expect(e.body.error).toMatchObject({ name: 'ValueError', value: 'bad thing' });
    expect(e.body.error.traceback).toContain('raise ValueError');
    expect(e.body.error.traceback).not.toContain('\u001b[');
    const d = await cell(
      'import sys\nfrom IPython.display import display, Image\nprint("to err", file=sys.stderr)\n' +
        'display(Image(data=bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8ffff3f0005fe02fea7d6a4280000000049454e44ae426082")))',
    );
    expect(d.body.stderr).toBe('to err\n');
    const img = d.body.outputs.find((o: { type: string }) => o.type === 'display_data');
    expect(Buffer.from(img.data['image/png'], 'base64').subarray(1, 4).toString()).toBe('PNG');
    // Output is capped at 1 MiB per stream, and says so.
    const big = await cell('print("x" * 3_000_000)');
    expect(big.body).toMatchObject({ truncated: true, error: null });
    expect(big.body.stdout.length).toBe(1024 * 1024);
  }, 60_000);

  it('a cell over its timeout is interrupted; the kernel keeps its state and runs the next cell (restarted only if it ignores the interrupt)', async () => {
    await cell('kept = "yes"');
    const started = Date.now();
    const slow = await cell('import time\nprint("before")\ntime.sleep(600)', { timeoutSeconds: 1 });
    expect(slow.status, JSON.stringify(slow.body)).toBe(200);
    // Interrupted at its 1 s timeout, not after the 600 s sleep; the bound is generous for a busy machine.
    expect(Date.now() - started).toBeLessThan(120_000);
    expect(slow.body).toMatchObject({ timedOut: true, kernelRestarted: false, stdout: 'before\n' });
    expect(slow.body.error.name).toBe('Timeout');
    const next = await cell('kept');
    expect(next.body).toMatchObject({ result: "'yes'", error: null, kernelStarted: false });
    // A cell that swallows the interrupt: the kernel is restarted after a grace, and the answer says so.
    const stubborn = await cell(
      'import time\nwhile True:\n    try:\n        time.sleep(0.1)\n    except KeyboardInterrupt:\n        pass',
      {
        timeoutSeconds: 1,
      },
    );
    expect(stubborn.body).toMatchObject({ timedOut: true, kernelRestarted: true });
    expect(stubborn.body.error.name).toBe('Timeout');
    expect((await cell('kept')).body.error.name).toBe('NameError');
    expect((await cell('2 * 21')).body.result).toBe('42');
  }, 300_000);

  it('a kernel that dies is restarted with an empty namespace, and says so', async () => {
    await cell('y = 1');
    const dead = await cell('import os\nos._exit(1)');
    expect(dead.status, JSON.stringify(dead.body)).toBe(200);
    expect(dead.body).toMatchObject({ kernelRestarted: true });
    expect(dead.body.error.name).toBe('KernelDied');
    expect((await cell('y')).body.error.name).toBe('NameError');
    expect((await cell('1 + 1')).body.result).toBe('2');
    // Every restart above (kernel-restart, a stubborn cell, a death) left exactly one kernel running.
    const ps = await t.call('POST', sx('/exec'), {
      command: 'ps -eo args= | grep -c "^/usr/bin/python3 -m ipykernel_launcher" || true',
    });
    expect(ps.body.stdout.trim()).toBe('1');
  }, 60_000);

  it('the kernel and its variables outlive a restart of nube; a suspend ends them', async () => {
    expect((await cell('survivor = 7 * 6')).status).toBe(200);
    await t.nube.close();
    Object.assign(t, await startSandboxNube('kernel', { NUBE_OWNER_KEY: t.ownerKey, NUBE_SANDBOX_DRIVER: driver }, t.dataDir));
    const after = await cell('survivor');
    expect(after.body).toMatchObject({ result: '42', error: null, kernelStarted: false });
    // A suspend ends every process: the next cell starts a fresh kernel and says so.
    expect((await t.call('POST', sx('/suspend'))).status).toBe(200);
    expect((await t.call('POST', sx('/resume'))).status).toBe(200);
    // Two first cells at once share one new kernel.
    const [fresh, other] = await Promise.all([cell('survivor'), cell('1')]);
    expect(fresh.body).toMatchObject({ kernelStarted: true });
    expect(fresh.body.error.name).toBe('NameError');
    expect(other.body.result).toBe('1');
    const ps = await t.call('POST', sx('/exec'), {
      command: 'ps -eo args= | grep -c "^python3 -u /tmp/.nube-kernel.py serve" || true',
    });
    expect(ps.body.stdout.trim()).toBe('1');
  }, 60_000);
});
