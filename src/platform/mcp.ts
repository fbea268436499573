import type { FastifyInstance } from 'fastify';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { REPLAY_HEADER, type ReplayOrigin, withReplayOrigin } from './audit-context.js';
import type { Authenticator, SchemeName } from './auth.js';
import { boxSource } from './box-source.js';
import { describe } from './catalog.js';
import { errors } from './errors.js';
import { type AnyOperation, toolName } from './operation.js';
import { API_PREFIX } from './rest.js';
import { toolInputSchema, toolRequest } from './tool-input.js';

const ANY_CREDENTIAL: SchemeName[] = ['owner', 'agent', 'fleetAgent', 'fleetPublic', 'client'];

/**
 * MCP over Streamable HTTP at /api/mcp, stateless: every registry operation is a tool, and a tool
 * call is replayed in process through the REST route with the caller's own credential, so auth,
 * validation, rate limits and errors are exactly those of REST.
 */
export function mountMcp(app: FastifyInstance, ops: AnyOperation[], auth: Authenticator, version: string): void {
  const byName = new Map(ops.map((op) => [toolName(op), op]));
  // Built on the first MCP request, not at every start.
  let tools: { name: string; description: string; inputSchema: ReturnType<typeof toolInputSchema> }[] | undefined;
  const allTools = () => (tools ??= ops.map((op) => ({ name: toolName(op), description: describe(op), inputSchema: toolInputSchema(op) })));

  app.all('/api/mcp', async (req, reply) => {
    // A scoped key opens MCP: each tool call replays through REST, which checks the tool's operation.
    const principal = await auth.authenticate({ authorization: req.headers.authorization, apiKey: req.headers['x-api-key'] }, ANY_CREDENTIAL, {
      anyScope: true,
      ip: req.ip,
      box: boxSource(req.raw),
    });
    const allowed = principal.scope?.allowed;
    if (req.method !== 'POST') throw errors.methodNotAllowed(['POST']);
    const credentialHeaders: Record<string, string> = {};
    for (const h of ['authorization', 'x-api-key'] as const) {
      const v = req.headers[h];
      if (typeof v === 'string') credentialHeaders[h] = v;
    }

    const server = new Server({ name: 'nube', version }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: allowed ? allTools().filter((t) => allowed.has(byName.get(t.name)!.id)) : allTools() }));
    server.setRequestHandler(CallToolRequestSchema, async (call) => {
      const op = byName.get(call.params.name);
      if (!op) {
        return { isError: true, content: [{ type: 'text' as const, text: `unknown tool ${call.params.name}` }] };
      }
      const r = toolRequest(op, API_PREFIX, (call.params.arguments ?? {}) as Record<string, unknown>);
      // The replayed request's audit entry names this request's caller (platform/audit-context.ts).
      const box = boxSource(req.raw);
      const origin: ReplayOrigin = { via: 'mcp', ip: req.ip, userAgent: req.headers['user-agent'], requestId: req.id, ...(box ? { box } : {}) };
      const res = await withReplayOrigin(origin, (handle) =>
        app.inject({
          method: r.method as 'GET',
          // The caller's own address, so a key's allowedIps reads the same through MCP as through REST.
          remoteAddress: req.ip,
          url: r.url,
          headers: { ...credentialHeaders, [REPLAY_HEADER]: handle, ...(r.body !== undefined ? { 'content-type': 'application/json' } : {}) },
          ...(r.body !== undefined ? { payload: JSON.stringify(r.body) } : {}),
        }),
      );
      const type = String(res.headers['content-type'] ?? '');
      let structured: Record<string, unknown> | undefined;
      if (type.startsWith('application/json')) {
        const parsed = res.json() as unknown;
        structured = parsed && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : { value: parsed };
      }
      const text = structured ? JSON.stringify(structured) : type.startsWith('text/') ? res.body : `${type} response of ${res.rawPayload.length} bytes, base64: ${res.rawPayload.toString('base64')}`;
      return {
        isError: res.statusCode >= 400,
        content: [{ type: 'text' as const, text }],
        ...(structured ? { structuredContent: structured } : {}),
      };
    });

    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    reply.hijack();
    reply.raw.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req.raw, reply.raw, req.body);
  });
}
