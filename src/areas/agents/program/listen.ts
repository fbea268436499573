// The agent's TCP listener, shared by nube's ACP agent (main.ts) and the goose relay: each connection
// first sends one line `{"nube":"<connection token>","gateway":"<LLM gateway URL>"}`; a connection whose
// token is wrong is closed. `first` is what followed the line in the same read.
import { timingSafeEqual } from 'node:crypto';
import { createServer, type Socket } from 'node:net';

export interface Hello {
  /** Where nube's LLM gateway listens now (its port can change across restarts of nube). */
  gateway?: string;
}

export function listenWithToken(port: number, token: Buffer, onConnection: (socket: Socket, first: Buffer, hello: Hello) => void, ready: () => void): void {
  // One failing tool or connection must not end the agent (and every session with it): log and go on.
  process.on('uncaughtException', (e) => process.stderr.write(`uncaught: ${e.stack ?? e}\n`));
  process.on('unhandledRejection', (e) => process.stderr.write(`unhandled rejection: ${(e as Error)?.stack ?? e}\n`));
  const server = createServer((socket) => {
    socket.setNoDelay(true);
    let head = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      head = Buffer.concat([head, d]);
      const nl = head.indexOf(10);
      if (nl < 0) {
        if (head.length > 4096) socket.destroy();
        return;
      }
      socket.off('data', onData);
      let line: { nube?: unknown; gateway?: unknown } = {};
      try {
        line = JSON.parse(head.subarray(0, nl).toString('utf8')) as typeof line;
      } catch {}
      const given = Buffer.from(String(line.nube ?? ''));
      if (token.length === 0 || given.length !== token.length || !timingSafeEqual(given, token)) {
        socket.destroy();
        return;
      }
      onConnection(socket, head.subarray(nl + 1), typeof line.gateway === 'string' ? { gateway: line.gateway } : {});
    };
    socket.on('data', onData);
    socket.on('error', () => {});
  });
  server.listen(port, '0.0.0.0', ready);
}
