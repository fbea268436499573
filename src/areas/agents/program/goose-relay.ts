// The `goose` template's program: a relay between nube and goose (AAIF's agent, `goose acp` speaks ACP
// on stdio). Per connection, after the token line, it starts `goose acp` with goose's OpenAI provider
// pointed at nube's LLM gateway (the agent's scoped credential; the gateway's URL from the token line)
// and pipes the socket to its stdio, line by line. Two things are added on the way back: goose reports
// a turn's tokens in the prompt response's `usage`, nube reads `_meta.usage` (with the model and the
// tool calls, as nube's own agent reports it). goose keeps its sessions in its own database under
// $HOME, so a later connection (nube restarted) re-attaches them with session/load.
import { type ChildProcess, spawn } from 'node:child_process';
import type { Socket } from 'node:net';
import { gatewayModel } from './llm.js';
import { listenWithToken } from './listen.js';
import { sameGatewayHost, takeSecrets } from './secrets.js';

const env = process.env;
const PORT = Number(env.NUBE_AGENT_PORT ?? 7700);
const SECRETS = takeSecrets(env.NUBE_AGENT_SECRETS ?? '/opt/nube/agent.secrets');
const TOKEN = Buffer.from(SECRETS.token);
const WORKSPACE = env.NUBE_AGENT_WORKSPACE ?? '/root/workspace';
const GOOSE = env.NUBE_GOOSE_BIN ?? '/usr/local/bin/goose';

type Json = {
  id?: unknown;
  method?: string;
  params?: Record<string, unknown>;
  result?: Record<string, unknown>;
  error?: { code?: number; message?: string; data?: { reason?: string; code?: string } };
};

/**
 * goose's reasons for a failed prompt, as nube's codes: the gateway's 402 (the plan's LLM tokens used
 * up) reaches goose as "credits exhausted"; nube shows it as InsufficientBalance, as for its own agent.
 */
const REASONS: Record<string, { code: string; message: string }> = {
  credits_exhausted: { code: 'InsufficientBalance', message: "the plan's LLM tokens for this month are used up" },
};

/** Calls `onLine` per complete line of a byte stream (ndjson). */
function lines(onLine: (line: string) => void): (d: Buffer) => void {
  let rest = '';
  return (d) => {
    rest += d.toString('utf8');
    let nl = rest.indexOf('\n');
    while (nl >= 0) {
      const line = rest.slice(0, nl);
      rest = rest.slice(nl + 1);
      if (line.trim()) onLine(line);
      nl = rest.indexOf('\n');
    }
  };
}

const parse = (line: string): Json | null => {
  try {
    return JSON.parse(line) as Json;
  } catch {
    return null;
  }
};

/**
 * goose's environment: its OpenAI provider on nube's gateway. goose takes its key from the environment,
 * so its tools can read it: the gateway accepts it from this sandbox's address only.
 */
function gooseEnv(gatewayUrl: string, model: string): NodeJS.ProcessEnv {
  const u = new URL(gatewayUrl);
  return {
    ...env,
    HOME: env.HOME ?? '/root',
    GOOSE_PROVIDER: 'openai',
    GOOSE_MODEL: model,
    OPENAI_API_KEY: SECRETS.llmKey,
    OPENAI_HOST: u.origin,
    OPENAI_BASE_PATH: `${u.pathname.replace(/^\/+|\/+$/g, '')}/chat/completions`,
    // No OS keyring in a sandbox; tools run without asking (nube's policy allows every tool anyway:
    // they act only inside the agent's own sandbox); no usage reports to goose's telemetry.
    GOOSE_DISABLE_KEYRING: '1',
    GOOSE_MODE: 'auto',
    GOOSE_TELEMETRY_ENABLED: 'false',
  };
}

async function relay(socket: Socket, first: Buffer, gatewayUrl: string): Promise<void> {
  socket.pause();
  const model = (await gatewayModel({ url: gatewayUrl, key: SECRETS.llmKey })) ?? 'default';
  if (socket.destroyed) return;
  const goose: ChildProcess = spawn(GOOSE, ['acp'], { cwd: WORKSPACE, env: gooseEnv(gatewayUrl, model), stdio: ['pipe', 'pipe', 'inherit'] });
  const prompts = new Map<unknown, string>(); // request id -> session id
  const toolCalls = new Map<string, number>(); // session id -> tool calls in its running turn
  const toGoose = (line: string) => {
    const m = parse(line);
    // Extension methods (`_...`) are nobody's to send to goose through nube.
    if (m?.method?.startsWith('_')) return;
    if (m?.method === 'session/prompt' && typeof m.params?.sessionId === 'string') {
      prompts.set(m.id, m.params.sessionId);
      toolCalls.set(m.params.sessionId, 0);
    }
    goose.stdin?.write(`${line}\n`);
  };
  const toNube = (line: string) => {
    const m = parse(line);
    const update = m?.params?.update as { sessionUpdate?: string } | undefined;
    if (m?.method === 'session/update' && update?.sessionUpdate === 'tool_call') {
      const s = String(m.params?.sessionId);
      toolCalls.set(s, (toolCalls.get(s) ?? 0) + 1);
    }
    if (m && m.id !== undefined && !m.method && prompts.has(m.id)) {
      const session = prompts.get(m.id)!;
      prompts.delete(m.id);
      const known = REASONS[m.error?.data?.reason ?? ''];
      if (m.error && known) {
        m.error = { ...m.error, message: `${known.message} (goose: ${m.error.message ?? ''})`, data: { ...m.error.data, code: known.code } };
        line = JSON.stringify(m);
      }
      if (m.result) {
        const u = (m.result.usage ?? {}) as { inputTokens?: number; outputTokens?: number };
        const usage = { model, inputTokens: u.inputTokens ?? 0, outputTokens: u.outputTokens ?? 0, toolCalls: toolCalls.get(session) ?? 0 };
        m.result._meta = { ...((m.result._meta as Record<string, unknown>) ?? {}), usage };
        line = JSON.stringify(m);
      }
    }
    socket.write(`${line}\n`);
  };
  goose.stdout?.on('data', lines(toNube));
  goose.stdin?.on('error', () => {});
  goose.on('error', (e) => {
    process.stderr.write(`goose could not start: ${e.message}\n`);
    socket.destroy();
  });
  goose.on('exit', () => socket.end());
  const fromNube = lines(toGoose);
  if (first.length) fromNube(first);
  socket.on('data', fromNube);
  socket.on('close', () => goose.kill('SIGTERM'));
  socket.resume();
}

listenWithToken(
  PORT,
  TOKEN,
  (socket, first, hello) => {
    // Where the gateway listens now (its port can change across restarts of nube): on the same host only.
    const gateway = hello.gateway && sameGatewayHost(SECRETS.gateway, hello.gateway) ? hello.gateway : SECRETS.gateway;
    relay(socket, first, gateway).catch((e: unknown) => {
      process.stderr.write(`relay: ${(e as Error).message}\n`);
      socket.destroy();
    });
  },
  () => process.stdout.write(`nube goose relay listening on ${PORT}\n`),
);
