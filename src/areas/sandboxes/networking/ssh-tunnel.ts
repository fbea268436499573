// The node end of an SSH session served by another node's gateway: that gateway opens an internal
// tunnel (NodeForwarder.tunnel) to this node, which connects it to the sandbox's helper (started when
// nothing listens) and splices the bytes. Under /api/ so the port proxy leaves it alone, outside
// /api/v2/sandboxes so no locator forwards a client's request for it (with a node's credential).
import type { FastifyInstance } from 'fastify';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { isRelayed } from '../../../platform/node-forward.js';
import { claimedUpgrades } from '../../../platform/websocket.js';

export const HELPER_TUNNEL_PATH = '/api/internal/ssh-helper/';

export function installHelperTunnel(app: FastifyInstance, helper: { dialHere(sandboxId: string): Promise<Socket> }): void {
  app.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    if (!req.url?.startsWith(HELPER_TUNNEL_PATH)) return;
    // Ours: the other /api/ upgrade listeners (agents' sockets) leave it alone.
    claimedUpgrades.add(req);
    const refuse = (status: string, body = '') =>
      socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    const id = req.url.slice(HELPER_TUNNEL_PATH.length);
    // Only another node opens it (its credential was checked and taken off by the forwarder).
    if (!isRelayed(req) || !/^sbx_[A-Za-z0-9]{1,40}$/.test(id)) return refuse('404 Not Found');
    socket.on('error', () => socket.destroy());
    helper.dialHere(id).then(
      (h) => {
        socket.write('HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: nube-tunnel\r\n\r\n');
        if (head.length) h.write(head);
        h.on('error', () => h.destroy());
        h.pipe(socket);
        socket.pipe(h);
        h.on('close', () => socket.destroy());
        socket.on('close', () => h.destroy());
      },
      (e: unknown) => refuse('502 Bad Gateway', (e as Error).message),
    );
  });
}
