// wsUrl: ACP (JSON-RPC) over WebSocket through nube to the agent, so an ACP client (an editor) drives the
// agent directly. Each WebSocket gets its own connection to the agent program (nube's line first, with
// its token and the gateway's URL): one text message per JSON-RPC message each way. Only the owner's key
// opens it (`Authorization: Bearer`, or `?token=` for browsers, which cannot set headers on a
// WebSocket): a raw ACP connection can start MCP servers (commands) in the agent's box and open any of
// its sessions, which is the owner's to do, never an embed token's (a page's visitors message and try
// only). What the client sends is filtered to ACP's client-side vocabulary (acp-filter.ts).
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { WebSocketServer } from 'ws';
import type { Authenticator } from '../../platform/auth.js';
import { ApiError } from '../../platform/errors.js';
import { claimedUpgrades } from '../../platform/websocket.js';
import { filterClientMessage } from './acp-filter.js';
import { AGENT_PORT, connectWithRetry } from './connection.js';
import type { AgentsCore } from './service.js';

const PATH = /^\/api\/v2\/agents\/([^/?]+)\/acp(?:\?.*)?$/;

function refuse(socket: Socket, status: number, message: string) {
  socket.end(`HTTP/1.1 ${status} ${message}\r\nconnection: close\r\ncontent-type: application/json\r\n\r\n${JSON.stringify({ error: message })}`);
}

export function installAgentSocket(app: FastifyInstance, core: AgentsCore, auth: Authenticator): void {
  const wss = new WebSocketServer({ noServer: true, maxPayload: 16 * 1024 * 1024 });
  app.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    if (!req.url?.startsWith('/api/')) return; // the sandboxes' port proxy takes the others
    const m = PATH.exec(req.url);
    if (!m) {
      // The registry's WebSocket operations (platform/websocket.ts) took theirs already.
      if (!claimedUpgrades.has(req)) refuse(socket, 404, 'Not Found');
      return;
    }
    const id = decodeURIComponent(m[1]!);
    const token = new URL(req.url, 'http://x').searchParams.get('token') ?? undefined;
    (async () => {
      const p = await auth.authenticate({ authorization: req.headers.authorization ?? (token ? `Bearer ${token}` : undefined), apiKey: req.headers['x-api-key'] }, ['owner']);
      let row = await core.own(p, id);
      row = await core.refresh(row);
      if (row.status !== 'running' || !row.sandbox_id) throw new ApiError(409, 'AgentNotRunning', `the agent is ${row.status}`);
      const address = await core.s.sandboxes.addressOf(await core.principalOf(row), row.sandbox_id);
      const upstream = await connectWithRetry(address, AGENT_PORT, 2_000);
      upstream.setNoDelay(true);
      // The gateway's current URL too: the goose relay starts goose with it for this connection.
      const gateway = await core.s.llm.gatewayUrl();
      upstream.write(`${JSON.stringify({ nube: core.secrets(row).token, gateway })}\n`);
      wss.handleUpgrade(req, socket, head, (ws) => {
        let pending = '';
        upstream.on('data', (d: Buffer) => {
          pending += d.toString('utf8');
          let nl = pending.indexOf('\n');
          while (nl >= 0) {
            const line = pending.slice(0, nl).trim();
            pending = pending.slice(nl + 1);
            if (line) ws.send(line);
            nl = pending.indexOf('\n');
          }
        });
        ws.on('message', (data) => {
          const out = filterClientMessage(String(data));
          if ('forward' in out) upstream.write(`${out.forward}\n`);
          else if ('reply' in out) ws.send(out.reply);
        });
        ws.on('close', () => upstream.destroy());
        upstream.on('close', () => ws.close());
        upstream.on('error', () => ws.close());
      });
    })().catch((e: unknown) => {
      if (e instanceof ApiError) refuse(socket, e.status, e.message);
      else refuse(socket, 502, 'the agent cannot be reached');
    });
  });
}
