// Child process of bench/api.ts: runs one server alone on its event loop and reports over IPC.
//   api-server.ts nube   -> the real server from the NUBE_* environment (buildServer)
//   api-server.ts bare   -> a bare Fastify route answering GET /api/v2/account with BENCH_BARE_BODY
// Messages in: 'cpu' (reply with CPU time used so far), 'profile-start', 'profile-stop' (writes the CPU
// profile of the span to BENCH_PROFILE_FILE), { account: name } (nube mode: a second account, whose key comes
// back as { accountKey }), 'stop'. Messages out: { ready, address }, { cpu }, { profiled }, { accountKey }.
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import Fastify from 'fastify';
import { loadConfig } from '../../src/config.js';
import { buildServer } from '../../src/server.js';

interface Running {
  address: string;
  close(): Promise<void>;
  createAccount?(name: string): Promise<string>;
}

async function start(mode: string): Promise<Running> {
  if (mode === 'nube') {
    const nube = await buildServer(loadConfig(process.env));
    return {
      address: await nube.listen(),
      close: () => nube.close(),
      createAccount: async (name) => (await nube.services.account.createAccount({ name, plan: 'tera' })).secret,
    };
  }
  if (mode === 'bare') {
    const body = JSON.parse(process.env.BENCH_BARE_BODY ?? '{}') as unknown;
    const app = Fastify({ logger: false });
    app.get('/api/v2/account', async () => body);
    return { address: await app.listen({ host: '127.0.0.1', port: 0 }), close: () => app.close() };
  }
  throw new Error(`unknown mode ${mode}`);
}

const send = (msg: unknown) => process.send?.(msg);
const running = await start(process.argv[2] ?? '');
send({ ready: true, address: running.address });
const session = new Session();
process.on('message', async (msg) => {
  if (msg === 'cpu') send({ cpu: process.cpuUsage() });
  if (typeof msg === 'object' && msg !== null && 'account' in msg && running.createAccount) {
    send({ accountKey: await running.createAccount(String(msg.account)) });
  }
  if (msg === 'profile-start') {
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 200 });
    await session.post('Profiler.start');
    send({ profiling: true });
  }
  if (msg === 'profile-stop') {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(process.env.BENCH_PROFILE_FILE ?? 'bench.cpuprofile', JSON.stringify(profile));
    session.disconnect();
    send({ profiled: true });
  }
  if (msg === 'stop') {
    void running.close().finally(() => process.exit(0));
  }
});
// Never outlive the bench: if the parent goes away, so do we.
process.on('disconnect', () => process.exit(0));
