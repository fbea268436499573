// The real `@e2b/code-interpreter` SDK against nube: runCode on a real Jupyter kernel.
import { Sandbox } from '@e2b/code-interpreter';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SandboxNube, TEMPLATE_WAIT_MS, stopSandboxNube } from '../sandboxes/helpers.js';
import { startE2bNube } from './e2b-helpers.js';

let t: SandboxNube;
let sbx: Sandbox;

describe('@e2b/code-interpreter SDK: runCode', () => {
  beforeAll(async () => {
    t = await startE2bNube('e2b-code-interpreter', ['code-interpreter']);
    sbx = await Sandbox.create();
  }, TEMPLATE_WAIT_MS);

  afterAll(async () => {
    await stopSandboxNube(t);
  }, 120_000);

  it('runs on the code-interpreter template', async () => {
    expect((await sbx.getInfo()).templateId).toBe('code-interpreter-v1');
  });

  it('returns stdout, stderr and the result text, and keeps state between calls', async () => {
    const out: string[] = [];
    const a = await sbx.runCode('import sys\nx = 20\nprint("hi")\nprint("warn", file=sys.stderr)\nx + 1', {
      onStdout: (m) => {
        out.push(m.line);
      },
    });
    expect(a.error).toBeUndefined();
    expect(a.logs.stdout.join('')).toBe('hi\n');
    expect(a.logs.stderr.join('')).toBe('warn\n');
    expect(a.text).toBe('21');
    expect(a.results[0]?.isMainResult).toBe(true);
    expect(out.join('')).toBe('hi\n');
    const b = await sbx.runCode('x * 2');
    expect(b.text).toBe('40');
  });

  it('reports errors with name, value and traceback', async () => {
    const r = await sbx.runCode('def f():\n    raise ValueError("bad value")\nf()');
    expect(r.error?.name).toBe('ValueError');
    expect(r.error?.value).toBe('bad value');
    expect(r.error?.traceback).toContain('ValueError');
    expect(r.error?.traceback).toContain('f()');
  });

  it('passes envs for one execution only', async () => {
    const r = await sbx.runCode('import os\nos.environ.get("ONLY_NOW")', { envs: { ONLY_NOW: 'yes' } });
    expect(r.text).toBe("'yes'");
    expect((await sbx.runCode('os.environ.get("ONLY_NOW")')).text).toBeUndefined();
  });

  it("runs in E2B's home: a file written by a relative path is read by one; a context runs in its cwd", async () => {
    await sbx.files.write('data.csv', 'a,b\n1,2\n');
    const r = await sbx.runCode('import os\nprint(os.getcwd(), os.environ["HOME"])\nopen("data.csv").read()');
    expect(r.error).toBeUndefined();
    expect(r.logs.stdout.join('')).toBe('/home/user /home/user\n');
    expect(r.text).toBe("'a,b\\n1,2\\n'");
    const tmp = await sbx.createCodeContext({ cwd: '/tmp' });
    expect(tmp.cwd).toBe('/tmp');
    expect((await sbx.runCode('import os\nos.getcwd()', { context: tmp })).text).toBe("'/tmp'");
    // The default context is back in the home after another context ran.
    expect((await sbx.runCode('os.getcwd()')).text).toBe("'/home/user'");
    expect((await sbx.listCodeContexts()).find((c) => c.id !== tmp.id)?.cwd).toBe('/home/user');
    await sbx.removeCodeContext(tmp);
  });

  it('keeps contexts apart', async () => {
    const ctx = await sbx.createCodeContext();
    expect(ctx.language).toBe('python');
    await sbx.runCode('y = "in context"', { context: ctx });
    expect((await sbx.runCode('y', { context: ctx })).text).toBe("'in context'");
    const outside = await sbx.runCode('y');
    expect(outside.error?.name).toBe('NameError');
    const err = await sbx.runCode('1/0', { context: ctx });
    expect(err.error?.name).toBe('ZeroDivisionError');
    expect((await sbx.listCodeContexts()).map((c) => c.id)).toContain(ctx.id);
    await sbx.removeCodeContext(ctx);
    expect((await sbx.listCodeContexts()).map((c) => c.id)).not.toContain(ctx.id);
  });
});
