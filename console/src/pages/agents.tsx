// Agents: list with status, create from a template, delete, revive; open one to send a message and read
// its reply as it streams (POST /agents/{id}/message, Server-Sent Events), with the transcript below.
import { useState } from 'preact/hooks';
import { describeError, nube } from '../api.js';
import { navigate } from '../app.js';
import { ConfirmButton, ErrorText, ListTable, Page, ShownOnce, useAction, useLoad, usePaged } from '../ui.js';

/** `KEY=value` lines into an env map; blank lines and lines without `=` are skipped. */
function parseEnv(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const eq = line.indexOf('=');
    if (eq > 0) env[line.slice(0, eq).trim()] = line.slice(eq + 1);
  }
  return env;
}

function Chat({ id }: { id: string }) {
  const [text, setText] = useState('');
  const [reply, setReply] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const turns = useLoad(() => nube.agents.turns(id, { limit: 50 }), [id]);
  return (
    <div class="card">
      <h2>Talk to the agent</h2>
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          setBusy(true);
          setError(null);
          setReply('');
          try {
            const stream = await nube.agents.message(id, { content: text });
            let out = '';
            for await (const ev of stream) {
              const data = ev.json<{ type: string; value?: string; message?: string }>();
              if (data.type === 'chunk' && data.value) {
                out += data.value;
                setReply(out);
              } else if (data.type === 'error') setError(data.message ?? 'the agent failed');
              else if (data.type === 'done') break;
            }
            setText('');
          } catch (err) {
            setError(describeError(err));
          } finally {
            setBusy(false);
            turns.reload();
          }
        }}
      >
        <label for="agent-message">Message</label>
        <textarea id="agent-message" rows={3} required value={text} onInput={(e) => setText(e.currentTarget.value)} aria-describedby="agent-chat-error" />
        <button type="submit" disabled={busy}>
          {busy ? 'The agent is answering…' : 'Send'}
        </button>
      </form>
      <ErrorText error={error} id="agent-chat-error" />
      {(reply || busy) && (
        <pre class="logs" aria-live="polite" aria-label="Reply">
          {reply || '…'}
        </pre>
      )}
      <h3>Transcript</h3>
      <ErrorText error={turns.error} />
      {turns.data?.turns.length === 0 && <p>No turns yet.</p>}
      <ul class="entries">
        {turns.data?.turns.map((t, i) => (
          // biome-ignore lint/suspicious/noArrayIndexKey: turns come in order and are not edited
          <li key={i}>
            <p>
              <strong>You:</strong> {t.input}
            </p>
            {t.output && (
              <p>
                <strong>Agent:</strong> {t.output}
              </p>
            )}
            {t.error && <p class="error">{t.error.message}</p>}
          </li>
        ))}
      </ul>
    </div>
  );
}

function AgentDetail({ id }: { id: string }) {
  const a = useLoad(() => nube.agents.get(id), [id]);
  const act = useAction();
  const d = a.data;
  return (
    <Page
      title={d ? `Agent ${d.name ?? d.id}` : 'Agent'}
      actions={
        <a
          href="/console/agents"
          onClick={(e) => {
            e.preventDefault();
            navigate('agents');
          }}
        >
          ← All agents
        </a>
      }
    >
      <ErrorText error={a.error ?? act.error} />
      {d && (
        <>
          <div class="card">
            <p>
              <span class={`status ${d.status}`}>{d.status}</span> · template {d.template}
              {d.status === 'building' ? ' · wait until it runs before the first message' : ''}
            </p>
            {d.error && <p class="error">{d.error}</p>}
            <div class="row">
              <button type="button" onClick={a.reload}>
                Refresh
              </button>
              {d.status === 'lost' && (
                <button
                  type="button"
                  disabled={act.busy}
                  onClick={async () => {
                    await act.run(() => nube.agents.revive(id));
                    a.reload();
                  }}
                >
                  {act.busy ? 'Reviving… (10-60 s)' : 'Revive'}
                </button>
              )}
            </div>
          </div>
          {d.status !== 'building' && <Chat id={id} />}
        </>
      )}
    </Page>
  );
}

export function AgentsPage({ sub }: { sub: string[] }) {
  const list = useLoad(() => nube.agents.list());
  const [template, setTemplate] = useState('goose');
  const [name, setName] = useState('');
  const [env, setEnv] = useState('');
  const [token, setToken] = useState<string | null>(null);
  const create = useAction();
  const act = useAction();
  const { rows, pager } = usePaged(list.data?.agents);
  if (sub[0]) return <AgentDetail id={sub[0]} />;
  return (
    <Page title="Agents">
      <form
        class="card"
        onSubmit={async (e) => {
          e.preventDefault();
          const a = await create.run(() => nube.agents.create({ template, env: parseEnv(env), ...(name ? { name } : {}) }));
          if (a) {
            setToken(a.embedToken);
            setName('');
            list.reload();
          }
        }}
      >
        <h2>New agent</h2>
        <div class="row">
          <label for="agent-template">Template</label>
          <input id="agent-template" required value={template} onInput={(e) => setTemplate(e.currentTarget.value)} aria-describedby="agent-error" />
          <label for="agent-name">Name</label>
          <input id="agent-name" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        </div>
        <label for="agent-env">Environment (one KEY=value a line)</label>
        <textarea id="agent-env" rows={2} value={env} onInput={(e) => setEnv(e.currentTarget.value)} />
        <button type="submit" disabled={create.busy}>
          {create.busy ? 'Creating…' : 'Create agent'}
        </button>
        <ErrorText error={create.error} id="agent-error" />
      </form>
      <ShownOnce text="The agent's own token (agt_), shown once: browsers can message this agent with it." secret={token} onDone={() => setToken(null)} />
      <ErrorText error={list.error ?? act.error} />
      <ListTable caption="Agents" headers={['Agent', 'Status', 'Template', 'Created', '']}>
        {rows.map((a) => (
          <tr key={a.id}>
            <td>
              <a
                href={`/console/agents/${a.id}`}
                onClick={(e) => {
                  e.preventDefault();
                  navigate(`agents/${a.id}`);
                }}
              >
                {a.name ?? a.id}
              </a>
            </td>
            <td>
              <span class={`status ${a.status}`}>{a.status}</span>
              {a.error ? ` ${a.error}` : ''}
            </td>
            <td>{a.template}</td>
            <td>{new Date(a.createdAt).toLocaleString()}</td>
            <td class="actions">
              <ConfirmButton
                question={`Delete the agent ${a.name ?? a.id}? Its box, sessions and transcript go with it.`}
                onConfirm={async () => {
                  await act.run(() => nube.agents.delete(a.id));
                  list.reload();
                }}
              >
                Delete
              </ConfirmButton>
            </td>
          </tr>
        ))}
      </ListTable>
      {list.data?.agents.length === 0 && <p>No agents yet.</p>}
      {pager}
    </Page>
  );
}
