// How far a template build is, for anyone who asks: the builder writes its current step into the
// build's lock dir, so a sandbox waiting in another process (or another nube on the host) can say
// "building template base, installing packages, ~40 %" instead of just `starting`.
import { readFile, rename, writeFile } from 'node:fs/promises';
import type { BuildProgress } from '../driver.js';
import { isAlive } from './proc.js';

/**
 * Steps of a build in order, recognised from mmdebstrap's `I:` lines (it prints no percentages unless
 * on a terminal), with the share of the build done when each begins. Shares measured on `base`
 * (83 s on this 2-core VM, idle): apt update 0-2 s, essential packages 2-14 s, the other packages
 * (download and install inside the chroot) 14-80 s, clean-up 80-81 s, ownership shift 81-83 s.
 */
const STEPS: { step: string; at: number; match?: RegExp }[] = [
  { step: 'preparing', at: 0 },
  { step: 'updating package lists', at: 0.005, match: /running apt-get update/ },
  { step: 'downloading essential packages', at: 0.02, match: /downloading packages/ },
  { step: 'extracting essential packages', at: 0.025, match: /extracting archives/ },
  { step: 'installing essential packages', at: 0.05, match: /installing essential packages/ },
  { step: 'downloading and installing packages', at: 0.17, match: /installing remaining packages/ },
  { step: 'cleaning up', at: 0.965, match: /running --customize-hook|cleaning package lists/ },
  { step: 'shifting file ownership', at: 0.975 },
];
export const SHIFT_STEP = STEPS.length - 1;
/** A whole build on an idle host; a busy one takes several times longer, so estimates stall below the next step. */
const TYPICAL_BUILD_S = 90;

interface ProgressFile {
  template: string;
  pid: number;
  startedAt: number;
  stepIndex: number;
  stepStartedAt: number;
}

function estimate(f: ProgressFile, now: number): BuildProgress {
  const cur = STEPS[f.stepIndex]!;
  const next = STEPS[f.stepIndex + 1]?.at ?? 1;
  // Within a step, move with time, but never past 90 % of it: the next `I:` line is the real signal.
  const span = next - cur.at;
  const within = Math.min(0.9, (now - f.stepStartedAt) / 1000 / (span * TYPICAL_BUILD_S));
  return {
    template: f.template,
    step: cur.step,
    percent: Math.min(99, Math.floor((cur.at + span * within) * 100)),
    elapsedSeconds: Math.round((now - f.startedAt) / 1000),
    pid: f.pid,
  };
}

/** The builder's side: call `line` for each line of output, `step` when we enter one of ours. */
export class ProgressWriter {
  private readonly f: ProgressFile;
  private writing: Promise<void> = Promise.resolve();

  constructor(
    private readonly path: string,
    template: string,
  ) {
    const now = Date.now();
    this.f = { template, pid: process.pid, startedAt: now, stepIndex: 0, stepStartedAt: now };
    this.save();
  }

  /** Moves to the step a line of mmdebstrap announces (steps only go forward). */
  line(text: string): void {
    const i = STEPS.findIndex((s) => s.match?.test(text));
    if (i > this.f.stepIndex) this.step(i);
  }

  step(index: number): void {
    this.f.stepIndex = index;
    this.f.stepStartedAt = Date.now();
    this.save();
  }

  now(): BuildProgress {
    return estimate(this.f, Date.now());
  }

  /** Writes are chained and atomic: a reader never sees half a file. */
  private save(): void {
    const text = JSON.stringify(this.f);
    this.writing = this.writing.then(async () => {
      await writeFile(`${this.path}.tmp`, text);
      await rename(`${this.path}.tmp`, this.path);
    }).catch(() => {});
  }

  flushed(): Promise<void> {
    return this.writing;
  }
}

/** A build in progress (its builder process alive), or null. */
export async function readProgress(path: string): Promise<BuildProgress | null> {
  const text = await readFile(path, 'utf8').catch(() => null);
  if (!text) return null;
  try {
    const f = JSON.parse(text) as ProgressFile;
    return isAlive(f.pid) ? estimate(f, Date.now()) : null;
  } catch {
    return null;
  }
}
