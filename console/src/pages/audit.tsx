import { useState } from 'preact/hooks';
import { nube } from '../api.js';
import { ErrorText, ListTable, Page, useCursorPages, useLoad } from '../ui.js';

/** The filters GET /account/audit takes, as the form holds them (times as datetime-local text). */
interface Filters {
  since: string;
  until: string;
  operation: string;
  keyId: string;
  resourceId: string;
}

const NONE: Filters = { since: '', until: '', operation: '', keyId: '', resourceId: '' };
const PER_PAGE = 25;

/** The account's audit log: every change and every refused credential, newest first, filtered and paged by cursor. */
export function AuditPage(_: { sub: string[] }) {
  const [form, setForm] = useState<Filters>(NONE);
  const [applied, setApplied] = useState<Filters>(NONE);
  const pages = useCursorPages();
  const keys = useLoad(() => nube.account.keys.list());
  const list = useLoad(
    () =>
      nube.account.audit({
        limit: PER_PAGE,
        cursor: pages.cursor,
        ...(applied.since ? { since: new Date(applied.since).toISOString() } : {}),
        ...(applied.until ? { until: new Date(applied.until).toISOString() } : {}),
        ...(applied.operation.trim() ? { operation: applied.operation.trim() } : {}),
        ...(applied.keyId ? { keyId: applied.keyId } : {}),
        ...(applied.resourceId.trim() ? { resourceId: applied.resourceId.trim() } : {}),
      }),
    [applied, pages.page],
  );
  const field = (name: keyof Filters) => ({
    value: form[name],
    onInput: (e: { currentTarget: { value: string } }) => setForm({ ...form, [name]: e.currentTarget.value }),
  });
  const keyName = (id: string | null, name: string | null) => name ?? keys.data?.items.find((k) => k.id === id)?.name ?? id ?? '—';
  return (
    <Page title="Audit log">
      <form
        class="card filters"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          pages.reset();
          setApplied({ ...form });
        }}
      >
        <div class="row">
          <label for="audit-since">From</label>
          <input id="audit-since" type="datetime-local" {...field('since')} />
          <label for="audit-until">To</label>
          <input id="audit-until" type="datetime-local" {...field('until')} />
        </div>
        <div class="row">
          <label for="audit-operation">Operation</label>
          <input id="audit-operation" {...field('operation')} placeholder="databases.query" />
          <label for="audit-key">Key</label>
          <select id="audit-key" value={form.keyId} onChange={(e) => setForm({ ...form, keyId: e.currentTarget.value })}>
            <option value="">Any key</option>
            {(keys.data?.items ?? []).map((k) => (
              <option key={k.id} value={k.id}>
                {k.name} ({k.preview})
              </option>
            ))}
          </select>
          <label for="audit-resource">Resource</label>
          <input id="audit-resource" {...field('resourceId')} placeholder="db_..." />
        </div>
        <div class="row">
          <button type="submit">Filter</button>
          <button
            type="button"
            onClick={() => {
              pages.reset();
              setForm(NONE);
              setApplied(NONE);
            }}
          >
            Clear
          </button>
        </div>
      </form>
      <ErrorText error={list.error ?? keys.error} />
      <ListTable caption="Audit entries" headers={['Time', 'Operation', 'Resource', 'Key', 'Result', 'From', 'Request']}>
        {(list.data?.items ?? []).map((a) => (
          <tr key={a.id}>
            <td>{new Date(a.time).toLocaleString()}</td>
            <td>
              <code>{a.operation}</code> <span class="hint">{a.method}{a.via === 'mcp' ? ' (MCP)' : ''}</span>
            </td>
            <td class="wrap">{a.resourceId ?? '—'}</td>
            <td>{a.credential === 'owner' || a.keyName ? keyName(a.keyId, a.keyName) : `${a.credential ?? 'none'}${a.keyId ? ` ${a.keyId}` : ''}`}</td>
            <td>
              {a.status}
              {a.errorCode ? ` ${a.errorCode}` : ''}
            </td>
            <td class="wrap">{a.sourceIp ?? '—'}</td>
            <td>
              <code>{a.requestId}</code>
            </td>
          </tr>
        ))}
      </ListTable>
      {list.data && list.data.items.length === 0 && <p>No entries match.</p>}
      {pages.pager(list.data)}
    </Page>
  );
}
