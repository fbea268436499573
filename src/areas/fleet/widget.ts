// The web channel's embeddable chat widget, served by nube at GET /fleet-widget.js:
//   <script src="https://nube.example/fleet-widget.js" data-fleet-agent="flt_..." data-token="flt_tk_..."></script>
// The page's conversation is `web-<uuid>` kept in localStorage; the widget reads it with an ephemeral
// public key (`flt_pk_`, minted with the token and renewed before it expires), sends with the message
// stream (chunks shown as they come, `done.value` replacing them), and says when the fleet is full.
// The fleet routes answer any origin (CORS) because the widget runs on the owner's site; the token is
// the fleet agent's MESSAGE token, meant for public pages like an agent's embed token.
import type { FastifyInstance } from 'fastify';

const CORS_PATH = /^\/api\/v2\/fleet-agents\/[^/?]+\/(message|message-stream|messages|public-keys)(\?|$)/;
const CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-headers': 'authorization, content-type',
  'access-control-allow-methods': 'GET, POST, OPTIONS',
  'access-control-max-age': '600',
};

const WIDGET = String.raw`(() => {
  const me = document.currentScript;
  const base = new URL(me.src).origin + '/api/v2/fleet-agents/' + encodeURIComponent(me.dataset.fleetAgent);
  const token = me.dataset.token;
  const storeKey = 'nube-fleet:' + me.dataset.fleetAgent;
  let groupId = localStorage.getItem(storeKey);
  if (!groupId) { groupId = 'web-' + crypto.randomUUID(); localStorage.setItem(storeKey, groupId); }
  const box = document.createElement('div');
  box.className = 'nube-fleet';
  box.innerHTML = '<div class="nube-fleet-log" style="max-height:320px;overflow:auto"></div>' +
    '<form class="nube-fleet-form"><input class="nube-fleet-input" autocomplete="off" placeholder="..."><button>Send</button></form>' +
    '<div class="nube-fleet-status" aria-live="polite"></div>';
  (me.dataset.target ? document.querySelector(me.dataset.target) : document.body).appendChild(box);
  const log = box.querySelector('.nube-fleet-log');
  const status = box.querySelector('.nube-fleet-status');
  const line = (role, text) => { const d = document.createElement('div'); d.className = 'nube-fleet-msg nube-fleet-' + role; d.textContent = text; log.appendChild(d); log.scrollTop = log.scrollHeight; return d; };
  let key = null, keyUntil = 0, cursor = null;
  const publicKey = async () => {
    if (key && Date.now() < keyUntil - 60000) return key;
    const r = await fetch(base + '/public-keys', { method: 'POST', headers: { authorization: 'Bearer ' + token, 'content-type': 'application/json' }, body: JSON.stringify({ groupId }) });
    const j = await r.json(); key = j.key; keyUntil = Date.parse(j.expiresAt); return key;
  };
  const load = async () => {
    const q = new URLSearchParams({ groupId, limit: '200' });
    if (cursor) q.set('since', cursor);
    const r = await fetch(base + '/messages?' + q, { headers: { authorization: 'Bearer ' + (await publicKey()) } });
    const j = await r.json();
    if (j.gap) { log.textContent = ''; cursor = null; return load(); }
    for (const m of j.items) line(m.role, m.text);
    if (j.cursor) cursor = j.cursor;
  };
  const send = async (text) => {
    line('user', text);
    const out = line('assistant', '');
    status.textContent = '';
    const r = await fetch(base + '/message-stream', { method: 'POST', headers: { authorization: 'Bearer ' + token, 'content-type': 'application/json' }, body: JSON.stringify({ groupId, text }) });
    const reader = r.body.getReader(); const dec = new TextDecoder(); let buf = '';
    for (;;) {
      const { value, done } = await reader.read(); if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i); buf = buf.slice(i + 2);
        const data = block.split('\n').find((l) => l.startsWith('data:'));
        if (!data) continue;
        const e = JSON.parse(data.slice(5));
        if (e.type === 'chunk') out.textContent += e.value;
        else if (e.type === 'done') { out.textContent = e.value; out.dataset.turnId = e.turnId; if (e.cursor) cursor = e.cursor; }
        else if (e.type === 'capacity') status.textContent = e.queued ? 'Waiting for a free agent...' : 'All agents are busy; try again in ' + e.retryAfter + ' s';
        else if (e.type === 'error') status.textContent = e.message;
      }
    }
    if (!out.textContent) out.remove();
  };
  box.querySelector('form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = box.querySelector('input'); const text = input.value.trim(); if (!text) return;
    input.value = ''; send(text).catch((e) => { status.textContent = String(e); });
  });
  load().catch((e) => { status.textContent = String(e); });
})();
`;

export function installWidget(app: FastifyInstance): void {
  app.get('/fleet-widget.js', (_req, reply) =>
    reply.header('content-type', 'text/javascript; charset=utf-8').header('cache-control', 'public, max-age=300').header('access-control-allow-origin', '*').send(WIDGET),
  );
  app.addHook('onSend', (req, reply, payload, done) => {
    if (req.url.startsWith('/api/v2/fleet-agents/') && CORS_PATH.test(req.url)) reply.headers(CORS);
    done(null, payload);
  });
  for (const p of ['message', 'message-stream', 'messages', 'public-keys']) {
    app.options(`/api/v2/fleet-agents/:id/${p}`, (_req, reply) => reply.code(204).headers(CORS).send());
  }
}
