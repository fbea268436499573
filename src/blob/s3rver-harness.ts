import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { once } from 'node:events';

/**
 * Starts s3rver (a pure-JS S3-compatible server) on a loopback port in a child process, for tests and
 * benchmarks. A separate process keeps its memory out of the caller's RSS measurements.
 * Note: s3rver checks presigned-URL expiry but does not verify SigV4 signatures.
 */
export interface S3rverHandle {
  endpoint: string;
  credentials: { accessKeyId: string; secretAccessKey: string };
  stop(): Promise<void>;
}

const SCRIPT = `
const S3rver = require(process.argv[1]);
const srv = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: process.argv[2],
  configureBuckets: JSON.parse(process.argv[3]).map((name) => ({ name })) });
srv.run().then(({ port }) => process.stdout.write(JSON.stringify({ port }) + '\\n'));
process.on('SIGTERM', () => srv.close().then(() => process.exit(0)));
`;

export async function startS3rver(directory: string, buckets: string[]): Promise<S3rverHandle> {
  const entry = createRequire(import.meta.url).resolve('s3rver');
  const child: ChildProcess = spawn(process.execPath, ['-e', SCRIPT, entry, directory, JSON.stringify(buckets)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    let buf = '';
    child.stdout?.on('data', (d: Buffer) => {
      buf += d.toString();
      const nl = buf.indexOf('\n');
      if (nl >= 0) resolve((JSON.parse(buf.slice(0, nl)) as { port: number }).port);
    });
    child.once('exit', (code) => reject(new Error(`s3rver exited early with code ${code}`)));
    child.once('error', reject);
  });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await once(child, 'exit');
    },
  };
}
