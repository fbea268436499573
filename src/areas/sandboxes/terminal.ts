// sandboxes.terminal: an interactive shell with a PTY inside a sandbox, over a WebSocket. The PTY comes
// from the same in-sandbox helper the SSH gateway uses (networking/ssh-helper-script.ts), so there is
// one way to get a terminal into a sandbox. Protocol, after the upgrade:
//   client -> nube: binary = keystrokes (bytes for the PTY); text = JSON control,
//                   {"type":"resize","rows":R,"cols":C} or {"type":"input","data":"..."}
//   nube -> client: binary = PTY output; text = {"type":"exit","code":N} once the shell ends (then close).
import type { WebSocket } from 'ws';
import { z } from 'zod';
import type { Principal } from '../../platform/auth.js';
import type { HelperProcess } from './networking/ssh-helper-client.js';
import type { SandboxesService } from './facade.js';

export const TerminalQuery = z.object({
  rows: z.coerce.number().int().min(2).max(500).default(24).describe('Terminal height in rows'),
  cols: z.coerce.number().int().min(10).max(1000).default(80).describe('Terminal width in columns'),
  term: z.string().regex(/^[A-Za-z0-9._-]{1,40}$/).default('xterm-256color').describe('TERM inside the sandbox'),
});

const Control = z.discriminatedUnion('type', [
  z.object({ type: z.literal('resize'), rows: z.number().int().min(2).max(500), cols: z.number().int().min(10).max(1000) }),
  z.object({ type: z.literal('input'), data: z.string().max(1024 * 1024) }),
]);

/** Opens the shell before the upgrade (errors are still HTTP answers), then wires it to the socket. */
export async function openTerminal(s: SandboxesService, p: Principal, id: string, q: z.output<typeof TerminalQuery>) {
  await s.core.started(p, id);
  const proc = await s.ssh.runAsTemplateUser(id, { mode: 'run', cmd: null, pty: { rows: q.rows, cols: q.cols, term: q.term } });
  return (ws: WebSocket) => wire(ws, proc);
}

function wire(ws: WebSocket, proc: HelperProcess): void {
  const out = (d: Buffer) => {
    if (ws.readyState === ws.OPEN) ws.send(d, { binary: true });
  };
  proc.on('stdout', out);
  proc.on('stderr', out);
  proc.on('exit', (code) => {
    if (ws.readyState === ws.OPEN) {
      ws.send(JSON.stringify({ type: 'exit', code }));
      ws.close(1000, 'shell exited');
    }
  });
  proc.on('close', () => {
    if (ws.readyState === ws.OPEN) ws.close(1011, 'sandbox went away');
  });
  ws.on('message', (data, isBinary) => {
    const buf = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
    if (isBinary) return proc.write(buf);
    let msg: z.output<typeof Control>;
    try {
      msg = Control.parse(JSON.parse(buf.toString('utf8')));
    } catch {
      ws.send(JSON.stringify({ type: 'error', error: 'text messages are JSON: {"type":"resize","rows":R,"cols":C} or {"type":"input","data":"..."}' }));
      return;
    }
    if (msg.type === 'resize') proc.resize(msg.rows, msg.cols);
    else proc.write(Buffer.from(msg.data, 'utf8'));
  });
  ws.on('close', () => proc.close());
  ws.on('error', () => proc.close());
}
