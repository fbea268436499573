// A local server speaking the part of Telegram's Bot API nube uses (setWebhook, deleteWebhook,
// sendMessage), recording every call; `refuse` makes it answer as Telegram does when it limits a bot.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface BotCall {
  token: string;
  method: string;
  body: Record<string, unknown>;
  at: number;
}

export interface BotApi {
  url: string;
  calls: BotCall[];
  /** A refusal for a call (429 with retry_after, 403 a blocked bot...), or nothing to answer it as Telegram does. */
  refuse?: (c: BotCall) => { status: number; description: string; retryAfter?: number } | undefined;
  close(): Promise<void>;
}

export async function startBotApi(): Promise<BotApi> {
  const calls: BotCall[] = [];
  const api: BotApi = { url: '', calls, close: () => new Promise((r) => server.close(() => r())) };
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const m = /^\/bot([^/]+)\/(\w+)$/.exec(req.url ?? '');
    res.setHeader('content-type', 'application/json');
    if (!m || req.method !== 'POST') {
      res.statusCode = 404;
      res.end(JSON.stringify({ ok: false, error_code: 404, description: 'Not Found' }));
      return;
    }
    const body = chunks.length ? (JSON.parse(Buffer.concat(chunks).toString()) as Record<string, unknown>) : {};
    calls.push({ token: m[1]!, method: m[2]!, body, at: Date.now() });
    const refusal = api.refuse?.({ token: m[1]!, method: m[2]!, body, at: Date.now() });
    if (refusal) {
      res.statusCode = refusal.status;
      res.end(JSON.stringify({ ok: false, error_code: refusal.status, description: refusal.description, ...(refusal.retryAfter ? { parameters: { retry_after: refusal.retryAfter } } : {}) }));
      return;
    }
    if (m[1] === '111:bad-token-bad-token-bad-token') {
      res.statusCode = 401;
      res.end(JSON.stringify({ ok: false, error_code: 401, description: 'Unauthorized' }));
      return;
    }
    const result = m[2] === 'sendMessage' ? { message_id: calls.length, chat: { id: Number(body.chat_id) }, text: body.text } : true;
    res.end(JSON.stringify({ ok: true, result }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  api.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return api;
}

