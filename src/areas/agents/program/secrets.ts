// nube's secrets for the agent program (the connection token nube's lines must carry, and its LLM
// gateway credential) arrive in a file nube writes just before starting the program: read once at start
// and removed. They are never in the program's environment, which every tool the agent runs inherits and
// `/proc/<pid>/environ` shows to anything in the sandbox. (Root inside can still read the program's
// memory: the credential is bound to this sandbox's address by the gateway, so it is worth nothing
// elsewhere.)
import { readFileSync, rmSync } from 'node:fs';

export interface ProgramSecrets {
  token: string;
  llmKey: string;
  /** The LLM gateway's URL when the program started (on the sandbox bridge's host address). */
  gateway: string;
}

export function takeSecrets(path: string): ProgramSecrets {
  let j: Partial<Record<keyof ProgramSecrets, unknown>> = {};
  try {
    j = JSON.parse(readFileSync(path, 'utf8')) as typeof j;
  } catch {}
  rmSync(path, { force: true });
  const s = (v: unknown) => (typeof v === 'string' ? v : '');
  return { token: s(j.token), llmKey: s(j.llmKey), gateway: s(j.gateway) };
}

/**
 * A gateway URL a connection's first line proposes is taken only on the host the program started with
 * (the sandbox bridge's host address: only the port changes across restarts of nube), so nothing that
 * learns the connection token can send the agent's LLM calls, and the owner's messages in them, elsewhere.
 */
export function sameGatewayHost(current: string, proposed: string): boolean {
  try {
    const a = new URL(current);
    const b = new URL(proposed);
    return a.protocol === b.protocol && a.hostname === b.hostname && b.username === '' && b.password === '';
  } catch {
    return false;
  }
}
