// The agent program (program/main.ts, with the ACP and MCP SDKs) bundled by esbuild into one
// JavaScript file for the sandbox's Node (Debian bookworm's nodejs 18): sandboxes have no npm and no
// internet, so the file is copied in whole. Built once per nube process, on first use.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

let bundled: Promise<Buffer> | undefined;

export function agentProgram(): Promise<Buffer> {
  bundled ??= (async () => {
    const ts = fileURLToPath(new URL('./program/entry.ts', import.meta.url));
    const entry = existsSync(ts) ? ts : ts.replace(/\.ts$/, '.js');
    const { build } = await import('esbuild'); // only when an agent is first made, not at every start
    const out = await build({
      entryPoints: [entry],
      bundle: true,
      platform: 'node',
      target: 'node18',
      format: 'cjs',
      minify: true,
      write: false,
      logLevel: 'silent',
      legalComments: 'none',
    });
    return Buffer.from(out.outputFiles[0]!.contents);
  })().catch((e: unknown) => {
    bundled = undefined;
    throw e;
  });
  return bundled;
}
