// The real `e2b` SDK against nube, configured by E2B's environment variables only: commands.
import { CommandExitError, Sandbox, TimeoutError } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;
let sbx: Sandbox;

describe('e2b SDK: commands', () => {
  beforeAll(async () => {
    t = await startE2bNube('e2b-commands');
    sbx = await Sandbox.create();
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('runs a command in the foreground with envs and cwd', async () => {
    const r = await sbx.commands.run('echo "$GREETING from $(pwd)"; echo oops >&2', { envs: { GREETING: 'hello' }, cwd: '/tmp' });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe('hello from /tmp\n');
    expect(r.stderr).toBe('oops\n');
  });

  it("starts in E2B's home, /home/user, with HOME set to it", async () => {
    const r = await sbx.commands.run('pwd; echo "$HOME"; cd && pwd');
    expect(r.stdout).toBe('/home/user\n/home/user\n/home/user\n');
  });

  it('streams output to onStdout and onStderr as it comes', async () => {
    const seen: { at: number; line: string }[] = [];
    const errs: string[] = [];
    const started = Date.now();
    await sbx.commands.run('echo one; sleep 1; echo two; echo bad >&2', {
      onStdout: (d) => {
        seen.push({ at: Date.now() - started, line: d });
      },
      onStderr: (d) => {
        errs.push(d);
      },
    });
    expect(seen.map((s) => s.line).join('')).toBe('one\ntwo\n');
    // `one` arrived before the command ended (a second before `two`).
    expect(seen[0]!.line).toBe('one\n');
    expect(seen.at(-1)!.at - seen[0]!.at).toBeGreaterThan(700);
    expect(errs.join('')).toBe('bad\n');
  });

  it('raises CommandExitError on a non-zero exit', async () => {
    const e = await sbx.commands.run('echo out; echo err >&2; exit 3').catch((x: unknown) => x);
    expect(e).toBeInstanceOf(CommandExitError);
    const c = e as CommandExitError;
    expect(c.exitCode).toBe(3);
    expect(c.stdout).toBe('out\n');
    expect(c.stderr).toBe('err\n');
  });

  it('kills a command past timeoutMs', async () => {
    const started = Date.now();
    const e = await sbx.commands.run('sleep 30', { timeoutMs: 1000 }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(TimeoutError);
    expect(Date.now() - started).toBeLessThan(10_000);
    // The client gives up at its deadline; nube kills the command at the same deadline, counted from
    // when it started it, so a moment later.
    let left = true;
    for (let i = 0; i < 50 && left; i++) {
      left = (await sbx.commands.list()).some((p) => p.args.includes('sleep 30'));
      if (left) await new Promise((r) => setTimeout(r, 100));
    }
    expect(left).toBe(false);
  });

  it('runs in the background, lists, sends stdin and kills', async () => {
    const h = await sbx.commands.run('while read line; do echo "got $line"; done', { background: true, stdin: true });
    expect(h.pid).toBeGreaterThan(0);
    const list = await sbx.commands.list();
    const mine = list.find((p) => p.pid === h.pid);
    expect(mine?.cmd).toBe('/bin/bash');
    expect(mine?.args.at(-1)).toContain('while read line');
    await sbx.commands.sendStdin(h.pid, 'ping\n');
    for (let i = 0; i < 100 && !h.stdout.includes('got ping'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(h.stdout).toBe('got ping\n');
    expect(await sbx.commands.kill(h.pid)).toBe(true);
    const end = await h.wait().catch((x: unknown) => x);
    expect(end).toBeInstanceOf(CommandExitError);
    expect((await sbx.commands.list()).find((p) => p.pid === h.pid)).toBeUndefined();
    expect(await sbx.commands.kill(h.pid)).toBe(false);
  });

  it('reconnects to a running background command', async () => {
    const h = await sbx.commands.run('sleep 1; echo later', { background: true });
    await h.disconnect();
    const again = await sbx.commands.connect(h.pid);
    const r = await again.wait();
    expect(r.stdout).toBe('later\n');
  });
});
