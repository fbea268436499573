import { errors } from '../../platform/errors.js';

// Agent templates: what runs in the agent's sandbox. `acp` and `code-agent` are nube's own ACP agent
// (program/) on the `base` sandbox template; `goose` is AAIF's goose (`goose acp`) behind our relay
// (program/goose-relay.ts) on the `goose` sandbox template (base plus the goose binary, one shared
// read-only layer).

export type AgentKind = 'acp' | 'code-agent' | 'goose';

/** Where the program is copied in the agent's sandbox, and the workspace (seed files, the agent's cwd). */
export const PROGRAM_PATH = '/opt/nube/agent.js';
/** nube's secrets for the program (connection token, gateway credential): read and removed at its start. */
export const PROGRAM_SECRETS = '/opt/nube/agent.secrets';
export const WORKSPACE = '/root/workspace';

export interface AgentTemplate {
  name: string;
  kind: AgentKind;
  /** Whether the caller's mcpServers apply (the spec: ACP templates only). */
  acceptsMcp: boolean;
  sandboxTemplate: string;
}

const TEMPLATES: Record<string, AgentTemplate> = {
  acp: { name: 'acp', kind: 'acp', acceptsMcp: true, sandboxTemplate: 'base' },
  'code-agent': { name: 'code-agent', kind: 'code-agent', acceptsMcp: false, sandboxTemplate: 'base' },
  // goose is an ACP agent too: the caller's mcpServers reach it through session/new.
  goose: { name: 'goose', kind: 'goose', acceptsMcp: true, sandboxTemplate: 'goose' },
};

export function templateFor(name: string): AgentTemplate {
  const t = TEMPLATES[name];
  if (t) return t;
  throw errors.badRequest(`unknown template ${name}; available: ${Object.keys(TEMPLATES).join(', ')}`, [
    { path: ['body', 'template'], message: 'unknown template' },
  ]);
}

/** Seed file names are paths inside the workspace: relative, no `..`, no empty segments, no NUL. */
export function seedPath(name: string): string | null {
  if (name.startsWith('/') || name.includes('\0') || name.includes('\\')) return null;
  const parts = name.split('/');
  if (parts.some((p) => p === '' || p === '.' || p === '..')) return null;
  return parts.join('/');
}
