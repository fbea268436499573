import { useState } from 'preact/hooks';
import { download, nube } from '../api.js';
import { ConfirmButton, ErrorText, ListTable, Page, useAction, useLoad } from '../ui.js';

type Result = Awaited<ReturnType<typeof nube.datasets.query>>;

function Query({ id, name }: { id: string; name: string }) {
  const [sql, setSql] = useState('SELECT * FROM items LIMIT 20');
  const [result, setResult] = useState<Result | null>(null);
  const run = useAction();
  const exp = useAction();
  return (
    <div class="card">
      <h3>{name}</h3>
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          const r = await run.run(() => nube.datasets.query(id, { sql }));
          if (r) setResult(r);
        }}
      >
        <label for="dataset-sql">Read-only SQL (table rows, view items)</label>
        <textarea id="dataset-sql" rows={3} value={sql} onInput={(e) => setSql(e.currentTarget.value)} aria-describedby="dataset-error" />
        <button type="submit" disabled={run.busy}>
          Run
        </button>
        <button type="button" disabled={exp.busy} onClick={() => exp.run(() => download(`/api/v2/datasets/${encodeURIComponent(id)}/export?format=csv`, `${name}.csv`))}>
          Export CSV
        </button>
        <button type="button" disabled={exp.busy} onClick={() => exp.run(() => download(`/api/v2/datasets/${encodeURIComponent(id)}/export`, `${name}.ndjson`))}>
          Export NDJSON
        </button>
      </form>
      <ErrorText error={run.error ?? exp.error} id="dataset-error" />
      {result && (
        <ListTable caption={`Rows of ${name}`} headers={result.columns}>
          {result.rows.map((r, i) => (
            // biome-ignore lint/suspicious/noArrayIndexKey: result rows have no id of their own
            <tr key={i}>
              {r.map((v, j) => (
                // biome-ignore lint/suspicious/noArrayIndexKey: cells are positional
                <td key={j} class="wrap">
                  {v === null ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v)}
                </td>
              ))}
            </tr>
          ))}
        </ListTable>
      )}
    </div>
  );
}

export function DatasetsPage(_: { sub: string[] }) {
  const sets = useLoad(() => nube.datasets.list());
  const [name, setName] = useState('');
  const [selected, setSelected] = useState<{ id: string; name: string } | null>(null);
  const create = useAction();
  const act = useAction();
  return (
    <Page title="Datasets">
      <form
        class="row"
        onSubmit={async (e) => {
          e.preventDefault();
          if (await create.run(() => nube.datasets.create({ name }))) {
            setName('');
            sets.reload();
          }
        }}
      >
        <label for="dataset-name">New dataset</label>
        <input id="dataset-name" required pattern="[A-Za-z0-9-]+" maxLength={56} value={name} onInput={(e) => setName(e.currentTarget.value)} aria-describedby="dataset-create-error" />
        <button type="submit" disabled={create.busy}>
          Create
        </button>
      </form>
      <ErrorText error={create.error} id="dataset-create-error" />
      <p>Web extractions and crawls fill a dataset when given its id as datasetId.</p>
      <ErrorText error={sets.error ?? act.error} />
      <ListTable caption="Datasets" headers={['Name', 'Rows', 'Columns', 'Updated', '']}>
        {sets.data?.items.map((d) => (
          <tr key={d.id}>
            <td>{d.name}</td>
            <td>{d.rowCount}</td>
            <td class="wrap">{d.schema ? Object.keys(d.schema.properties).join(', ') : '(none yet)'}</td>
            <td>{new Date(d.updatedAt).toLocaleString()}</td>
            <td class="actions">
              <button type="button" aria-expanded={selected?.id === d.id} onClick={() => setSelected(selected?.id === d.id ? null : { id: d.id, name: d.name })}>
                Query
              </button>
              <ConfirmButton
                question={`Delete dataset ${d.name} and its ${d.rowCount} rows?`}
                label={`Delete dataset ${d.name}`}
                onConfirm={async () => {
                  await act.run(() => nube.datasets.delete(d.id));
                  if (selected?.id === d.id) setSelected(null);
                  sets.reload();
                }}
              >
                Delete
              </ConfirmButton>
            </td>
          </tr>
        ))}
      </ListTable>
      {selected && <Query key={selected.id} id={selected.id} name={selected.name} />}
    </Page>
  );
}
