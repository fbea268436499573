// The floor sandbox benches compare against: a bare `bwrap true` (starting a namespaced process), and
// a one-shot timer.
import { spawn } from 'node:child_process';

export const time = async (fn: () => Promise<unknown>) => {
  const t = performance.now();
  await fn();
  return performance.now() - t;
};

export const bwrapTrue = () =>
  new Promise<void>((resolve, reject) => {
    const c = spawn('bwrap', ['--unshare-all', '--ro-bind', '/', '/', '--proc', '/proc', '--dev', '/dev', 'true']);
    let err = '';
    c.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`bwrap exited ${code}: ${err.trim()}`))));
  });
