// A lock between processes on one host (parallel test files, several nubes): a directory, since mkdir is
// atomic, with its holder's pid inside. It is broken only when its holder is gone (a crash while holding
// it), never for taking long: a second holder beside a slow first one is what the lock is there to stop.
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { isAlive } from './proc.js';

/** A lock without a pid this long after it was made is an older nube's (which wrote none), and stale. */
const NO_PID_STALE_MS = 30_000;

/** Takes `lock`, waiting `pollMs` between tries; `onWait(holderPid)` is called while another holds it. */
export async function takePidLock(lock: string, o: { pollMs?: number; onWait?: (holder: number) => void | Promise<void> } = {}): Promise<void> {
  for (;;) {
    try {
      await mkdir(lock);
      await writeFile(`${lock}/pid`, String(process.pid));
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const holder = Number(await readFile(`${lock}/pid`, 'utf8').catch(() => ''));
      const age = Date.now() - ((await stat(lock).catch(() => null))?.mtimeMs ?? Date.now());
      const stale = holder > 0 ? holder !== process.pid && !isAlive(holder) : age > NO_PID_STALE_MS;
      if (stale) {
        await rm(lock, { recursive: true, force: true });
        continue;
      }
      await o.onWait?.(holder);
      await new Promise((r) => setTimeout(r, o.pollMs ?? 40));
    }
  }
}

/** Runs `fn` holding `lock`, and lets it go after. */
export async function withPidLock<T>(lock: string, fn: () => Promise<T>, o: Parameters<typeof takePidLock>[1] = {}): Promise<T> {
  await takePidLock(lock, o);
  try {
    return await fn();
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}
