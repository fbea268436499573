import { useState } from 'preact/hooks';
import { download, formatBytes, nube } from '../api.js';
import { navigate } from '../app.js';
import { ConfirmButton, ErrorText, ListTable, Page, useAction, useLoad, usePaged } from '../ui.js';

type Cell = null | number | string | { integer: string } | { real: number | string } | { base64: string };
interface Result {
  columns: string[];
  rows: Cell[][];
  rowsAffected: number;
  durationMs: number;
}

const show = (c: Cell): string =>
  c === null ? 'NULL' : typeof c === 'object' ? ('integer' in c ? c.integer : 'real' in c ? String(c.real) : `<blob ${c.base64.length * 0.75} bytes>`) : String(c);

/** A small CSV reader (quotes, doubled quotes, CRLF): the first line names the columns. */
export function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (ch === '"') quoted = false;
      else cell += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ',') {
      row.push(cell);
      cell = '';
    } else if (ch === '\n' || ch === '\r') {
      if (ch === '\r' && text[i + 1] === '\n') i++;
      row.push(cell);
      rows.push(row);
      row = [];
      cell = '';
    } else cell += ch;
  }
  if (cell !== '' || row.length) {
    row.push(cell);
    rows.push(row);
  }
  return rows.filter((r) => r.length > 1 || r[0] !== '');
}

const quoteId = (s: string) => `"${s.replace(/"/g, '""')}"`;

function Grid({ result }: { result: Result }) {
  const { rows, pager } = usePaged(result.rows, 50);
  return (
    <div class="grid-wrap">
      <p>
        {result.rows.length} row(s) · {result.rowsAffected} affected · {result.durationMs.toFixed(1)} ms
      </p>
      {result.columns.length > 0 && (
        <div class="scroll">
          <table class="grid">
            <caption class="sr-only">Query results</caption>
            <thead>
              <tr>
                {result.columns.map((c) => (
                  <th key={c}>{c}</th>
                ))}
              </tr>
            </thead>
            <tbody>
              {rows.map((r, i) => (
                // biome-ignore lint/suspicious/noArrayIndexKey: result rows have no identity
                <tr key={i}>
                  {r.map((c, j) => (
                    // biome-ignore lint/suspicious/noArrayIndexKey: columns are positional
                    <td key={j} class={c === null ? 'null' : ''}>
                      {show(c)}
                    </td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {pager}
    </div>
  );
}

function Database({ id }: { id: string }) {
  const db = useLoad(() => nube.databases.get(id), [id]);
  const [sql, setSql] = useState('SELECT name FROM sqlite_master WHERE type = \'table\';');
  const [result, setResult] = useState<Result | null>(null);
  const query = useAction();
  const imp = useAction();
  const exp = useAction();
  const [imported, setImported] = useState<string | null>(null);
  const [table, setTable] = useState('imported');
  const tables = useLoad(async () => {
    const r = (await nube.databases.query(id, { sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name" })) as Result;
    const names = r.rows.map((x) => String(x[0]));
    const cols = await Promise.all(names.map((n) => nube.databases.query(id, { sql: `SELECT name, type FROM pragma_table_info(${`'${n.replace(/'/g, "''")}'`})` }) as Promise<Result>));
    return names.map((n, i) => ({ name: n, columns: cols[i].rows.map((c) => `${show(c[0])} ${show(c[1])}`.trim()) }));
  }, [id]);
  const run = async () => {
    const r = await query.run(() => nube.databases.query(id, { sql }) as Promise<Result>);
    if (r) {
      setResult(r);
      tables.reload();
    }
  };
  return (
    <Page
      title={db.data ? `Database ${db.data.name}` : 'Database'}
      actions={
        <button type="button" disabled={exp.busy} onClick={() => exp.run(() => download(`/api/v2/databases/${encodeURIComponent(id)}/export`, `${db.data?.name ?? id}.sqlite`))}>
          {exp.busy ? 'Exporting…' : 'Export'}
        </button>
      }
    >
      <ErrorText error={db.error ?? exp.error} />
      {db.data && (
        <p>
          {formatBytes(db.data.sizeBytes)} · {db.data.rowsRead} rows read · {db.data.rowsWritten} written
        </p>
      )}
      <div class="split">
        <div>
          <label for="sql">SQL</label>
          <textarea
            id="sql"
            rows={6}
            spellcheck={false}
            value={sql}
            onInput={(e) => setSql(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
                e.preventDefault();
                void run();
              }
            }}
            aria-describedby="sql-help sql-error"
          />
          <p id="sql-help" class="hint">
            Ctrl+Enter runs it.
          </p>
          <button type="button" onClick={run} disabled={query.busy}>
            {query.busy ? 'Running…' : 'Run'}
          </button>
          <ErrorText error={query.error} id="sql-error" />
          {result && <Grid result={result} />}
        </div>
        <aside>
          <h2>Tables</h2>
          <ErrorText error={tables.error} />
          <ul class="tables">
            {tables.data?.map((t) => (
              <li key={t.name}>
                <button type="button" class="link" onClick={() => setSql(`SELECT * FROM ${quoteId(t.name)} LIMIT 100;`)}>
                  {t.name}
                </button>
                <small>{t.columns.join(', ')}</small>
              </li>
            ))}
          </ul>
          <h2>Import a CSV</h2>
          <label for="csv-table">Into table</label>
          <input id="csv-table" value={table} onInput={(e) => setTable(e.currentTarget.value)} />
          <label for="csv-file">CSV file (first line: column names)</label>
          <input
            id="csv-file"
            type="file"
            accept=".csv,text/csv"
            aria-describedby="csv-error"
            onChange={async (e) => {
              const input = e.currentTarget;
              const f = input.files?.[0];
              if (!f) return;
              const r = await imp.run(async () => {
                const [head, ...rows] = parseCsv(await f.text());
                if (!head) throw new Error('the file is empty');
                await nube.databases.query(id, { sql: `CREATE TABLE IF NOT EXISTS ${quoteId(table)} (${head.map(quoteId).join(', ')})` });
                let done = 0;
                for (let i = 0; i < rows.length; i += 10_000) {
                  const part = rows.slice(i, i + 10_000);
                  const out = (await nube.databases.query(id, { table, columns: head, rows: part } as never)) as { imported: number };
                  done += out.imported;
                  setImported(`Importing… ${done} of ${rows.length} rows`);
                }
                return done;
              });
              input.value = '';
              if (r !== undefined) {
                setImported(`Imported ${r} row(s) into ${table}.`);
                tables.reload();
              }
            }}
          />
          {imported && <p role="status">{imported}</p>}
          <ErrorText error={imp.error} id="csv-error" />
        </aside>
      </div>
    </Page>
  );
}

export function DatabasesPage({ sub }: { sub: string[] }) {
  const list = useLoad(() => nube.databases.list());
  const [name, setName] = useState('');
  const create = useAction();
  const del = useAction();
  const items = list.data?.items;
  const { rows, pager } = usePaged(items);
  if (sub[0]) return <Database id={sub[0]} />;
  return (
    <Page title="Databases">
      <form
        class="row"
        onSubmit={async (e) => {
          e.preventDefault();
          const d = await create.run(() => nube.databases.create({ name }));
          if (d) {
            setName('');
            list.reload();
          }
        }}
      >
        <label for="db-name">Name</label>
        <input id="db-name" required value={name} onInput={(e) => setName(e.currentTarget.value)} aria-describedby="db-error" />
        <button type="submit" disabled={create.busy}>
          Create database
        </button>
      </form>
      <ErrorText error={create.error} id="db-error" />
      <ErrorText error={list.error ?? del.error} />
      <ListTable caption="Databases" headers={['Name', 'Size', 'Created', '']}>
          {rows.map((d) => (
            <tr key={d.id}>
              <td>
                <a
                  href={`/console/databases/${d.id}`}
                  onClick={(e) => {
                    e.preventDefault();
                    navigate(`databases/${d.id}`);
                  }}
                >
                  {d.name}
                </a>
              </td>
              <td>{formatBytes(d.sizeBytes)}</td>
              <td>{new Date(d.createdAt).toLocaleString()}</td>
              <td>
                <ConfirmButton
                  question={`Delete database ${d.name}? Its data is lost.`}
                  onConfirm={async () => {
                    await del.run(() => nube.databases.delete(d.id));
                    list.reload();
                  }}
                >
                  Delete
                </ConfirmButton>
              </td>
            </tr>
          ))}
      </ListTable>
      {pager}
    </Page>
  );
}
