import { describe, expect, it } from 'vitest';
import { type JudgeInput, judge, parseState } from './app-health.js';

const NOW = 1_700_000_100_000;
const watch = { run: 'r1', startedAt: NOW - 5000, oomBase: 2, oomNoted: 0 };
const base: JudgeInput = { watch, state: null, oomTotal: 2, probe: null, port: 8080, health: null, memoryMB: 256, startTimeoutMs: 60_000, now: NOW };
const state = (line: string) => parseState(line);

describe('machine app health', () => {
  it('reads the supervisor state line', () => {
    expect(state('run=r1 state=exited starts=3 started=1700000090 code=137 exited=1700000095 next=4\n')).toEqual({
      run: 'r1',
      state: 'exited',
      starts: 3,
      code: 137,
      exited: 1700000095,
      next: 4,
    });
    expect(state('run=r1 state=up starts=1 started=1700000090 code=- exited=- next=-')).toMatchObject({ state: 'up', code: null, exited: null });
    expect(state('garbage')).toBeNull();
    expect(parseState(null)).toBeNull();
  });

  it('is starting until the port answers, running once it does, unhealthy past the start timeout', () => {
    const up = state('run=r1 state=up starts=1 started=1 code=- exited=- next=-');
    expect(judge({ ...base, state: null })).toMatchObject({ status: 'starting', restarts: 0 });
    // A state line from an older run says nothing about this one.
    expect(judge({ ...base, state: state('run=old state=exited starts=9 started=1 code=3 exited=1 next=30') }).status).toBe('starting');
    expect(judge({ ...base, state: up, probe: { error: 'nothing listens on the port' } })).toMatchObject({ status: 'starting' });
    expect(judge({ ...base, state: up, probe: { status: 404 } })).toMatchObject({ status: 'running', message: null });
    const late = judge({ ...base, state: up, probe: { error: 'nothing listens on the port' }, now: NOW + 70_000 });
    expect(late.status).toBe('unhealthy');
    expect(late.message).toContain('has not answered on port 8080 for 75 s (nothing listens on the port)');
    // With a health path, only 2xx/3xx passes.
    expect(judge({ ...base, health: '/health', state: up, probe: { status: 500 } }).status).toBe('starting');
    expect(judge({ ...base, health: '/health', state: up, probe: { status: 204 } }).status).toBe('running');
  });

  it('says crashing with the last exit and restarts', () => {
    const h = judge({ ...base, state: state('run=r1 state=exited starts=4 started=1700000090 code=3 exited=1700000095 next=8') });
    expect(h).toMatchObject({ status: 'crashing', restarts: 3, exits: 4, oomKills: 0, lastExit: { code: 3, signal: null, oom: false, at: '2023-11-14T22:14:55.000Z' } });
    expect(h.message).toContain('it exited with code 3');
    expect(h.message).toContain('restarted 3 times');
    // Started again after exits and not answering yet: still crashing, not starting.
    expect(judge({ ...base, state: state('run=r1 state=up starts=5 started=1 code=3 exited=1700000095 next=-'), probe: { error: 'x' } }).status).toBe('crashing');
    // Serving again after a crash: running, the restarts still counted.
    expect(judge({ ...base, state: state('run=r1 state=up starts=2 started=1 code=3 exited=1 next=-'), probe: { status: 200 } })).toMatchObject({ status: 'running', restarts: 1 });
  });

  it('says oom when the kernel counted OOM kills since the start and the app died by SIGKILL', () => {
    const killed = state('run=r1 state=exited starts=2 started=1 code=137 exited=1700000095 next=2');
    const h = judge({ ...base, state: killed, oomTotal: 5 });
    expect(h).toMatchObject({ status: 'oom', oomKills: 3, lastExit: { code: 137, signal: 9, oom: true } });
    expect(h.message).toContain('more than its 256 MB');
    // Killed by SIGKILL with no OOM kill counted since the start (a kill -9): crashing, not oom.
    expect(judge({ ...base, state: killed, oomTotal: 2 })).toMatchObject({ status: 'crashing', lastExit: { signal: 9, oom: false } });
  });
});
