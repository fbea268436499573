// The nube the Python SDK's pytest suite runs against (packages/python/tests/conftest.py starts this):
// a real nube on loopback with sandboxes (the test templates and bridge) and the LLM stub as the
// operator's upstream, so agents answer. Prints one JSON line with its URL and owner key, then serves
// until its stdin closes (pytest ended, however it ended), and removes what it made.
import { startAgentNube } from '../../../test/agents/helpers.js';

const t = await startAgentNube(`python-sdk-${process.pid}`);
const runtime = t.nube.services.sandboxes.core.runtime;
await runtime.ensureTemplate('base', (line) => process.stderr.write(`template base: ${line}\n`));
process.stdout.write(`${JSON.stringify({ baseUrl: t.baseUrl, apiKey: t.ownerKey })}\n`);
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await t.stop().catch((e: unknown) => process.stderr.write(`stopping nube: ${String(e)}\n`));
  process.exit(0);
};
process.stdin.on('end', stop);
process.stdin.on('close', stop);
process.stdin.resume();
process.on('SIGTERM', stop);
