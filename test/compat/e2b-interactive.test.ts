// The real `e2b` SDK against nube: processes that take input. PTYs (create, input, resize, kill,
// disconnect and reconnect) and commands started with `stdin: true` (send, close).
import { CommandExitError, Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;
let sbx: Sandbox;
const decoder = new TextDecoder();
const input = (s: string) => new TextEncoder().encode(s);

/** Waits until `read()` passes `ok` (output comes as it comes). */
async function until(read: () => string, ok: (s: string) => boolean, ms = 10_000): Promise<string> {
  const end = Date.now() + ms;
  while (!ok(read()) && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
  return read();
}

describe('e2b SDK: PTY and stdin', () => {
  beforeAll(async () => {
    t = await startE2bNube('e2b-interactive');
    sbx = await Sandbox.create({ timeoutMs: 300_000 });
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('runs a login shell on a PTY of the asked size, as the user, with its envs', async () => {
    let out = '';
    const term = await sbx.pty.create({
      cols: 80,
      rows: 24,
      envs: { ABC: '123' },
      onData: (d) => {
        out += decoder.decode(d);
      },
    });
    await sbx.pty.sendInput(term.pid, input('tty; echo "$ABC $(whoami) $TERM $(tput cols)x$(tput lines)"\n'));
    expect(
      await until(
        () => out,
        (s) => /123 user xterm-256color 80x24/.test(s),
      ),
    ).toMatch(/\/dev\/pts\/\d+/);
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(term.pid, input('echo "now $(tput cols)x$(tput lines)"; exit 3\n'));
    const end = await term.wait().catch((e: unknown) => e);
    expect(end).toBeInstanceOf(CommandExitError);
    expect((end as CommandExitError).exitCode).toBe(3);
    expect(out).toContain('now 100x30');
  });

  it('keeps a PTY running across a disconnect; another connection gets its output', async () => {
    let first = '';
    let second = '';
    const term = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => {
        first += decoder.decode(d);
      },
    });
    await sbx.pty.sendInput(term.pid, input('echo one-$((40+2))\n'));
    await until(
      () => first,
      (s) => s.includes('one-42'),
    );
    await term.disconnect();
    expect((await sbx.commands.list()).map((p) => p.pid)).toContain(term.pid);
    const again = await sbx.pty.connect(term.pid, {
      onData: (d) => {
        second += decoder.decode(d);
      },
    });
    await sbx.pty.sendInput(term.pid, input('echo two-$((40+2)); exit\n'));
    expect((await again.wait()).exitCode).toBe(0);
    expect(second).toContain('two-42');
    expect(second).not.toContain('one-42');
  });

  it('kills a PTY; killing one that is gone answers false', async () => {
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
    expect(await sbx.pty.kill(term.pid)).toBe(true);
    await expect(term.wait()).rejects.toThrow();
    expect((await sbx.commands.list()).map((p) => p.pid)).not.toContain(term.pid);
    expect(await sbx.pty.kill(term.pid)).toBe(false);
    expect(await sbx.pty.kill(999_999)).toBe(false);
  });

  it('sends stdin to a command and closes it (the command sees the end of its input)', async () => {
    const cmd = await sbx.commands.run('wc -c; echo done', { background: true, stdin: true });
    await sbx.commands.sendStdin(cmd.pid, 'hello ');
    await cmd.sendStdin(input('world'));
    await cmd.closeStdin();
    const r = await cmd.wait();
    expect(r.stdout).toBe('11\ndone\n');
    // Without stdin: true there is no input to send or close.
    const plain = await sbx.commands.run('sleep 30', { background: true });
    await expect(sbx.commands.sendStdin(plain.pid, 'x')).rejects.toThrow(/without stdin/);
    await expect(plain.closeStdin()).rejects.toThrow(/no stdin/);
    await plain.kill();
  });

  it('a command with stdin runs as the asked user, in the asked directory, and can be killed', async () => {
    const cmd = await sbx.commands.run('echo "$(whoami) $(pwd)"; cat', {
      background: true,
      stdin: true,
      user: 'root',
      cwd: '/tmp',
    });
    await until(
      () => cmd.stdout,
      (s) => s.length > 0,
    );
    expect(cmd.stdout).toBe('root /tmp\n');
    expect(await cmd.kill()).toBe(true);
    const end = await cmd.wait().catch((e: unknown) => e);
    expect(end).toBeInstanceOf(CommandExitError);
    expect((end as CommandExitError).error).toBe('signal: killed');
    await expect(sbx.commands.run('true', { stdin: true, cwd: '/no/such/dir' })).rejects.toThrow(
      /no\/such\/dir/,
    );
  });
});
