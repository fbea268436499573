// A fleet agent's broadcasts: one message to every conversation of its channels, and the ones sent
// with their counts. Fleet agents are listed only to a client credential (GET /fleet-agents), not to
// an owner's session: the page opens one by its id (`/console/fleet/<fleetAgentId>`).
import { useEffect, useState } from 'preact/hooks';
import { nube } from '../api.js';
import { navigate } from '../app.js';
import { ErrorText, ListTable, Notice, Page, useAction, useLoad } from '../ui.js';

function Broadcasts({ fleetAgentId }: { fleetAgentId: string }) {
  const agent = useLoad(() => nube.fleet.get(fleetAgentId), [fleetAgentId]);
  const list = useLoad(() => nube.fleet.broadcasts(fleetAgentId), [fleetAgentId]);
  const [text, setText] = useState('');
  const [notice, setNotice] = useState<string | null>(null);
  const send = useAction();
  const sending = list.data?.items.some((b) => b.status === 'sending') ?? false;
  // While one is sending, its counts move: read them again every second.
  useEffect(() => {
    if (!sending) return;
    const t = setTimeout(() => void list.reload(), 1000);
    return () => clearTimeout(t);
  }, [sending, list.data]);
  if (agent.error) return <ErrorText error={agent.error} />;
  return (
    <>
      {agent.data && (
        <p>
          Fleet agent <strong>{agent.data.name}</strong> · channels {agent.data.channels.join(', ')}
        </p>
      )}
      <form
        class="card"
        onSubmit={async (e) => {
          e.preventDefault();
          setNotice(null);
          const b = await send.run(() => nube.fleet.broadcast(fleetAgentId, { text }));
          if (b) {
            setText('');
            setNotice(`Sending to ${b.total} conversation${b.total === 1 ? '' : 's'}.`);
            void list.reload();
          }
        }}
      >
        <h2>New broadcast</h2>
        <label for="broadcast-text">Message to every conversation</label>
        <textarea id="broadcast-text" rows={3} required maxLength={32000} value={text} onInput={(e) => setText(e.currentTarget.value)} aria-describedby="broadcast-error" />
        <button type="submit" disabled={send.busy}>
          Send broadcast
        </button>
        <ErrorText error={send.error} id="broadcast-error" />
        <Notice text={notice} />
      </form>
      <ErrorText error={list.error} />
      {list.data?.items.length === 0 && <p>No broadcasts yet.</p>}
      {list.data && list.data.items.length > 0 && (
        <ListTable caption="Broadcasts" headers={['Message', 'Status', 'Conversations', 'Sent', 'Failed', 'Sent at']}>
          {list.data.items.map((b) => (
            <tr key={b.id}>
              <td class="wrap">{b.text}</td>
              <td>{b.status}</td>
              <td>{b.total}</td>
              <td>{b.sent}</td>
              <td>{b.failed}</td>
              <td>{new Date(b.finishedAt ?? b.createdAt).toLocaleString()}</td>
            </tr>
          ))}
        </ListTable>
      )}
    </>
  );
}

export function FleetPage({ sub }: { sub: string[] }) {
  const [id, setId] = useState(sub[0] ?? '');
  return (
    <Page title="Fleet broadcasts">
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          if (id.trim()) navigate(`fleet/${encodeURIComponent(id.trim())}`);
        }}
      >
        <label for="fleet-agent-id">Fleet agent id</label>
        <input id="fleet-agent-id" required value={id} onInput={(e) => setId(e.currentTarget.value)} />
        <button type="submit">Open</button>
      </form>
      {sub[0] ? <Broadcasts fleetAgentId={sub[0]} /> : <p>Fleet agents are listed to client credentials only; open one by its id.</p>}
    </Page>
  );
}
