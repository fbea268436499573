import { describe, expect, it } from 'vitest';
import { copyBase, failureOf, translate } from './template-steps.js';

const H = 'a'.repeat(64);

describe('E2B template steps as a Dockerfile', () => {
  it('copy sources lose their glob part, as E2B copies them', () => {
    expect(copyBase('hello.txt')).toBe('hello.txt');
    expect(copyBase('site/')).toBe('site');
    expect(copyBase('src/*.ts')).toBe('src');
    expect(copyBase('*.txt')).toBe('');
    expect(copyBase('./a/b/**/*.js')).toBe('a/b');
  });

  it('makes the default user first, runs steps as the current user, owns copies and new working dirs by it', () => {
    const t = translate({
      fromImage: 'debian:12',
      steps: [
        { type: 'RUN', args: ['echo hi'] },
        { type: 'COPY', args: ['site/', '/srv/', '', '0755'], filesHash: H },
        { type: 'ENV', args: ['A', 'x "y"', 'B', '$A/z'] },
        { type: 'WORKDIR', args: ['/srv'] },
        { type: 'RUN', args: ['apt-get update\napt-get install -y curl', 'root'] },
        { type: 'USER', args: ['app'] },
      ],
    });
    const lines = t.dockerfile.split('\n').filter((l) => !l.startsWith('#'));
    expect(lines[0]).toBe('FROM debian:12');
    expect(lines.slice(1, 5)).toEqual(['USER root', expect.stringMatching(/^RUN n='user'; if ! /), 'USER user', 'WORKDIR /home/user']);
    expect(lines).toContain('RUN echo hi');
    expect(lines).toContain(`COPY --chown=user:user --chmod=0755 ["${H}/site","/srv/"]`);
    expect(lines).toContain('ENV A="x \\"y\\"" B="$A/z"');
    expect(lines).toContain('WORKDIR /srv');
    expect(lines).toContain(`RUN ${JSON.stringify(['/bin/sh', '-c', 'apt-get update\napt-get install -y curl'])}`);
    expect(lines.slice(-2)).toEqual(['USER app', '']);
    expect(t.hashes).toEqual([H]);
  });

  it('a forced step gets an ARG no build had before; bad steps are 400s naming the step', () => {
    const a = translate({ fromTemplate: 'x', steps: [{ type: 'RUN', args: ['true'], force: true }] }).dockerfile;
    const b = translate({ fromTemplate: 'x', steps: [{ type: 'RUN', args: ['true'], force: true }] }).dockerfile;
    expect(a).toMatch(/ARG NUBE_E2B_FORCE_1=[0-9a-f]{16}/);
    expect(a).not.toBe(b);
    expect(a).not.toContain('WORKDIR');
    expect(() => translate({ fromImage: 'x', steps: [{ type: 'COPY', args: ['a', 'b'] }] })).toThrow(/step 1: COPY needs the filesHash/);
    expect(() => translate({ fromImage: 'x', steps: [{ type: 'HEALTHCHECK' }] })).toThrow(/step 1: HEALTHCHECK steps are not supported/);
    expect(() => translate({ steps: [] })).toThrow(/exactly one of fromImage and fromTemplate/);
  });

  it('a failure names the SDK step its Dockerfile line came from', () => {
    const d = translate({ fromImage: 'x', steps: [{ type: 'ENV', args: ['A', '1'] }, { type: 'RUN', args: ['exit 3'] }] }).dockerfile;
    const line = d.split('\n').indexOf('RUN exit 3') + 1;
    expect(failureOf(d, `RUN step 7/7 (line ${line}) exited 3; its last lines:\nboom`, 'StepFailed')).toEqual({
      message: 'step 2 (RUN exit 3) exited 3; its last lines:\nboom',
      step: '2',
    });
    expect(failureOf(d, 'image x not found', 'ImageNotFound')).toEqual({ message: 'image x not found', step: 'base' });
  });
});
