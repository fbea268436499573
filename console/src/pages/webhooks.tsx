import { useState } from 'preact/hooks';
import { nube } from '../api.js';
import { ConfirmButton, ErrorText, ListTable, Page, ShownOnce, useAction, useCursorPages, useLoad, usePaged } from '../ui.js';

const EVENTS = ['file.created', 'file.updated', 'file.deleted', 'file.restored', 'website.created', 'website.deleted', 'workspace.created', 'workspace.deleted', 'database.created', 'database.deleted', 'form.submitted', 'payment.paid', 'broadcast.sent', 'turn.completed', 'turn.failed'] as const;
type Event = (typeof EVENTS)[number];

function Deliveries({ webhookId }: { webhookId: string }) {
  const pages = useCursorPages();
  const list = useLoad(() => nube.webhooks.deliveries.list(webhookId, { limit: 20, cursor: pages.cursor }), [webhookId, pages.page]);
  const redeliver = useAction();
  const [open, setOpen] = useState<string | null>(null);
  return (
    <div class="card">
      <h3>Deliveries</h3>
      <ErrorText error={list.error ?? redeliver.error} />
      {list.data?.items.length === 0 && <p>No deliveries yet.</p>}
      <ul class="deliveries">
        {list.data?.items.map((d) => (
          <li key={d.id}>
            <button type="button" class="link" aria-expanded={open === d.id} onClick={() => setOpen(open === d.id ? null : d.id)}>
              <span class={`status ${d.status}`}>{d.status}</span> {d.event} · {new Date(d.eventTimestamp).toLocaleString()} · {d.attemptCount} attempt(s)
              {d.lastStatusCode ? ` · HTTP ${d.lastStatusCode}` : ''}
            </button>
            <button
              type="button"
              onClick={async () => {
                await redeliver.run(() => nube.webhooks.deliveries.redeliver(webhookId, d.id));
                list.reload();
              }}
            >
              Redeliver
            </button>
            {open === d.id && (
              <div>
                {d.lastError && <p class="error">{d.lastError}</p>}
                {d.attempts.map((a) => (
                  <pre key={a.attempt}>
                    #{a.attempt} {a.at} · {a.durationMs} ms · {a.statusCode ?? a.error}
                    {a.response ? `\n${a.response}` : ''}
                  </pre>
                ))}
              </div>
            )}
          </li>
        ))}
      </ul>
      {pages.pager(list.data)}
    </div>
  );
}

export function WebhooksPage(_: { sub: string[] }) {
  const hooks = useLoad(() => nube.webhooks.list());
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState<Event[]>(['file.created']);
  const [secret, setSecret] = useState<string | null>(null);
  const [selected, setSelected] = useState<string | null>(null);
  const create = useAction();
  const act = useAction();
  const items = hooks.data?.items;
  const { rows, pager } = usePaged(items);
  return (
    <Page title="Webhooks">
      <form
        class="card"
        onSubmit={async (e) => {
          e.preventDefault();
          const w = await create.run(() => nube.webhooks.create({ url, events }));
          if (w) {
            setSecret(w.secret);
            setUrl('');
            hooks.reload();
          }
        }}
      >
        <h2>New webhook</h2>
        <label for="hook-url">Endpoint URL</label>
        <input id="hook-url" type="url" required value={url} onInput={(e) => setUrl(e.currentTarget.value)} aria-describedby="hook-error" />
        <fieldset>
          <legend>Events</legend>
          <div class="events">
            {EVENTS.map((ev) => (
              <label key={ev} class="check">
                <input
                  type="checkbox"
                  checked={events.includes(ev)}
                  onChange={(e) => setEvents(e.currentTarget.checked ? [...events, ev] : events.filter((x) => x !== ev))}
                />
                {ev}
              </label>
            ))}
          </div>
        </fieldset>
        <button type="submit" disabled={create.busy}>
          Create webhook
        </button>
        <ErrorText error={create.error} id="hook-error" />
      </form>
      <ShownOnce text="Signing secret, shown once: keep it to verify deliveries." secret={secret} onDone={() => setSecret(null)} />
      <ErrorText error={hooks.error ?? act.error} />
      <ListTable caption="Webhooks" headers={['URL', 'Events', 'Status', 'Failures', '']}>
          {rows.map((w) => (
            <tr key={w.id}>
              <td class="wrap">{w.url}</td>
              <td>{w.events.join(', ')}</td>
              <td>{w.status}</td>
              <td>{w.failureCount}</td>
              <td class="actions">
                <button type="button" onClick={() => setSelected(selected === w.id ? null : w.id)} aria-expanded={selected === w.id}>
                  Deliveries
                </button>
                <button
                  type="button"
                  onClick={async () => {
                    await act.run(() => nube.webhooks.update(w.id, { status: w.status === 'ACTIVE' ? 'PAUSED' : 'ACTIVE' }));
                    hooks.reload();
                  }}
                >
                  {w.status === 'ACTIVE' ? 'Pause' : 'Resume'}
                </button>
                <ConfirmButton
                  question={`Delete the webhook to ${w.url}?`}
                  onConfirm={async () => {
                    await act.run(() => nube.webhooks.delete(w.id));
                    hooks.reload();
                  }}
                >
                  Delete
                </ConfirmButton>
              </td>
            </tr>
          ))}
      </ListTable>
      {pager}
      {selected && <Deliveries webhookId={selected} />}
    </Page>
  );
}
