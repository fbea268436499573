import { describe, expect, it } from 'vitest';
import { DockerfileError, parseDockerfile, substitute } from './parse.js';
import { fromOf, planOf, startCommandOf } from './plan.js';

const errorOf = (text: string) => {
  try {
    planOf(text, null);
  } catch (e) {
    if (e instanceof DockerfileError) return e.message;
    throw e;
  }
  return null;
};

describe('Dockerfile parsing and planning', () => {
  it('joins continuations (skipping comments inside), keeps the first line, reads flags and the exec form', () => {
    const ins = parseDockerfile(
      'FROM a\n\n# c\nRUN echo a \\\n  # inside\n  && echo b\nCOPY --chown=1:2 --chmod=755 x /y\nCMD ["a", "b c"]\n',
    );
    expect(ins.map((i) => [i.line, i.keyword])).toEqual([
      [1, 'FROM'],
      [4, 'RUN'],
      [7, 'COPY'],
      [8, 'CMD'],
    ]);
    expect(ins[1]!.args).toBe('echo a   && echo b');
    expect(ins[2]!.flags).toEqual({ chown: '1:2', chmod: '755' });
    expect(ins[3]!.json).toEqual(['a', 'b c']);
  });

  it('the escape directive changes the continuation character', () => {
    const ins = parseDockerfile('# escape=`\nFROM a\nRUN echo a `\n  b');
    expect(ins[1]).toMatchObject({ line: 3, args: 'echo a   b' });
  });

  it('substitutes like BuildKit', () => {
    const v = { A: 'x', E: '' };
    expect(substitute('$A ${A} ${B:-d} ${A:+alt} ${E:-empty} \\$A', v, 1)).toBe('x x d alt empty $A');
  });

  it('plans env, ARG, WORKDIR, USER and the start command over the base settings', () => {
    const plan = planOf(
      'ARG V=1\nFROM img:$V\nARG N=7\nENV A=/a B="${N} x"\nWORKDIR $A\nWORKDIR sub\nUSER app\nRUN echo $B\nCOPY f ./\nEXPOSE 80 53/udp\nENTRYPOINT ["srv"]\nCMD ["--port", "80"]',
      { env: ['PATH=/bin'], cmd: ['old'], entrypoint: null, workdir: null, user: null, exposedPorts: [] },
    );
    expect(plan.from).toBe('img:1');
    expect(plan.total).toBe(10);
    expect(plan.steps.map((s) => [s.index, s.kind])).toEqual([
      [6, 'run'],
      [7, 'copy'],
    ]);
    expect(plan.steps[0]).toMatchObject({ workdir: '/a/sub', user: 'app', env: { PATH: '/bin', A: '/a', B: '7 x', N: '7' } });
    expect(plan.steps[1]).toMatchObject({ dest: '/a/sub/./', sources: ['f'] });
    expect(plan.config).toMatchObject({
      env: ['PATH=/bin', 'A=/a', 'B=7 x'],
      workdir: '/a/sub',
      user: 'app',
      exposedPorts: ['80/tcp', '53/udp'],
    });
    expect(startCommandOf(plan.config)).toBe("'srv' '--port' '80'");
  });

  it('build args override ARG defaults (before FROM too), reach RUN and COPY paths, and are listed as declared', () => {
    const text = 'ARG TAG=1\nFROM img:$TAG\nARG WHO=me\nARG DEST\nRUN echo $WHO\nCOPY f $DEST';
    const { from, declared } = fromOf(text, { TAG: '2' });
    expect(from).toBe('img:2');
    expect([...declared].sort()).toEqual(['DEST', 'TAG', 'WHO']);
    const plan = planOf(text, null, { WHO: 'you', DEST: '/d/' });
    expect(plan.steps[0]).toMatchObject({ env: { WHO: 'you', DEST: '/d/' }, args: { WHO: 'you', DEST: '/d/' } });
    expect(plan.steps[1]).toMatchObject({ dest: '/d/', args: { WHO: 'you', DEST: '/d/' } });
    // ARGs stay out of the template's environment.
    expect(plan.config.env).toEqual([]);
    expect(planOf(text, null).steps[0]!.env.WHO).toBe('me');
  });

  it('names the line of what it cannot build', () => {
    expect(errorOf('FROM a\nVOLUME /x')).toBe('line 2: VOLUME is not supported by nube\'s builder');
    expect(errorOf('FROM a\nRUN <<EOF\necho\nEOF')).toContain('line 2: heredocs');
    expect(errorOf('FROM a\nRUN --mount=type=cache,target=/x true')).toBe('line 2: RUN --mount is not supported');
    expect(errorOf('FROM a\nADD https://x/y /z')).toContain('line 2: ADD of a URL');
    expect(errorOf('FROM a\nCOPY onlyone')).toContain('line 2: COPY needs a source and a destination');
    expect(errorOf('FROM a\nEXPOSE abc')).toBe('line 2: EXPOSE: bad port abc');
    expect(errorOf('# escape=x\nFROM a')).toContain('line 1: escape must be');
    expect(errorOf('')).toContain('line 1: a Dockerfile starts with FROM');
  });
});
