// The caller's MCP servers (from session/new): stdio ones started inside the sandbox, http ones
// reached from it; their tools join the agent's own, named `<server>__<tool>`.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Tool } from './tools.js';

export type AcpMcpServer =
  | { name: string; command: string; args?: string[]; env?: { name: string; value: string }[] }
  | { type: 'http'; name: string; url: string; headers?: { name: string; value: string }[] }
  | { type: 'sse'; name: string; url: string; headers?: { name: string; value: string }[] };

export interface McpSet {
  tools: Tool[];
  /** Servers that could not be reached, with why (the agent says so instead of failing the session). */
  failures: string[];
  close(): Promise<void>;
}

const toolName = (server: string, tool: string) => `${server}__${tool}`.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 64);

export async function connectMcp(servers: AcpMcpServer[], cwd: string): Promise<McpSet> {
  const clients: Client[] = [];
  const tools: Tool[] = [];
  const failures: string[] = [];
  await Promise.all(
    servers.map(async (s) => {
      const client = new Client({ name: 'nube-acp-agent', version: '1.0.0' });
      try {
        if ('command' in s) {
          const env: Record<string, string> = {};
          for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('NUBE_')) env[k] = v;
          for (const e of s.env ?? []) env[e.name] = e.value;
          await client.connect(new StdioClientTransport({ command: s.command, args: s.args ?? [], env, cwd, stderr: 'ignore' }));
        } else if (s.type === 'http') {
          const headers = Object.fromEntries((s.headers ?? []).map((h) => [h.name, h.value]));
          await client.connect(new StreamableHTTPClientTransport(new URL(s.url), { requestInit: { headers } }));
        } else {
          throw new Error('SSE MCP servers are not supported; use http (Streamable HTTP)');
        }
        clients.push(client);
        const listed = await client.listTools();
        for (const t of listed.tools) {
          tools.push({
            name: toolName(s.name, t.name),
            description: `${t.description ?? t.name} (MCP server ${s.name})`,
            parameters: (t.inputSchema as Record<string, unknown>) ?? { type: 'object' },
            kind: 'other',
            asks: true,
            title: () => `${s.name}: ${t.name}`,
            run: async (args) => {
              const r = await client.callTool({ name: t.name, arguments: args });
              const parts = (r.content as { type: string; text?: string }[] | undefined) ?? [];
              const text = parts.map((p) => (p.type === 'text' ? p.text : `[${p.type}]`)).join('\n');
              if (r.isError) throw new Error(text || 'the MCP tool failed');
              return text;
            },
          });
        }
      } catch (e) {
        failures.push(`${s.name}: ${(e as Error).message}`);
        await client.close().catch(() => {});
      }
    }),
  );
  return {
    tools,
    failures,
    close: async () => {
      await Promise.all(clients.map((c) => c.close().catch(() => {})));
    },
  };
}
