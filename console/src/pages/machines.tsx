// Machines: tiers catalogue, list with status/tier/URL, launch from an archive URL or a git repo, and per
// machine its secrets (names only; values are write-only), backups with restore, logs, releases with
// rollback, restart and delete. A `checkoutUrl` answer is shown as a link.
import { useState } from 'preact/hooks';
import { nube } from '../api.js';
import { navigate } from '../app.js';
import { ConfirmButton, ErrorText, ListTable, Notice, Page, useAction, useLoad, usePaged } from '../ui.js';

function Checkout({ url }: { url: string | null }) {
  if (!url) return null;
  return (
    <p class="notice" role="status">
      This account has no active plan, so the machine starts once it is paid: <a href={url}>pay for the machine on the checkout page</a>.
    </p>
  );
}

function Tiers() {
  const tiers = useLoad(() => nube.machines.tiers());
  return (
    <details class="card">
      <summary>Tiers and monthly prices</summary>
      <ErrorText error={tiers.error} />
      <ListTable caption="Machine tiers" headers={['Tier', 'vCPUs', 'Memory', 'Disk', 'MXN / month', 'Reserved CPU', 'Notes']}>
        {tiers.data?.tiers.map((t) => (
          <tr key={t.name}>
            <td>{t.name}</td>
            <td>{t.vcpus}</td>
            <td>{t.memoryMB} MB</td>
            <td>{t.diskGB} GB</td>
            <td>{t.monthlyMxn}</td>
            <td>{t.reservedMonthlyMxn ?? '—'}</td>
            <td class="wrap">{[t.canBuild ? '' : 'cannot build', t.notes ?? ''].filter(Boolean).join('; ')}</td>
          </tr>
        ))}
      </ListTable>
    </details>
  );
}

function Logs({ id }: { id: string }) {
  const [grep, setGrep] = useState('');
  const [filter, setFilter] = useState('');
  const logs = useLoad(() => nube.machines.logs(id, { lines: 200, ...(filter ? { grep: filter } : {}) }), [id, filter]);
  return (
    <div class="card">
      <h2>Logs</h2>
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          setFilter(grep);
          logs.reload();
        }}
      >
        <label for="log-grep">Only lines containing</label>
        <input id="log-grep" value={grep} onInput={(e) => setGrep(e.currentTarget.value)} />
        <button type="submit">Refresh logs</button>
      </form>
      <ErrorText error={logs.error} />
      <pre class="logs" aria-label="Log lines">{logs.data ? logs.data.lines.join('\n') || '(no lines)' : 'Loading…'}</pre>
    </div>
  );
}

function Releases({ id, onChange }: { id: string; onChange: () => void }) {
  const releases = useLoad(() => nube.machines.releases.list(id), [id]);
  const [message, setMessage] = useState('');
  const act = useAction();
  return (
    <div class="card">
      <h2>Releases</h2>
      <form
        class="row"
        onSubmit={async (e) => {
          e.preventDefault();
          const r = await act.run(() => nube.machines.releases.create(id, message ? { message } : {}));
          if (r) setMessage('');
          releases.reload();
        }}
      >
        <label for="release-message">Release note</label>
        <input id="release-message" value={message} onInput={(e) => setMessage(e.currentTarget.value)} />
        <button type="submit" disabled={act.busy}>
          Publish a release
        </button>
      </form>
      <ErrorText error={releases.error ?? act.error} />
      <ListTable caption="Releases" headers={['Version', 'Status', 'Source', 'Note', 'Created', '']}>
        {releases.data?.releases.map((r) => (
          <tr key={r.id}>
            <td>
              v{r.version}
              {r.current ? ' (running)' : ''}
            </td>
            <td>
              <span class={`status ${r.status}`}>{r.status}</span>
            </td>
            <td>{r.source}</td>
            <td class="wrap">{r.message ?? ''}</td>
            <td>{new Date(r.createdAt).toLocaleString()}</td>
            <td>
              {!r.current && r.status === 'ready' && (
                <ConfirmButton
                  question={`Roll back to release v${r.version}?`}
                  onConfirm={async () => {
                    await act.run(() => nube.machines.rollback(id, { releaseId: r.id }));
                    releases.reload();
                    onChange();
                  }}
                >
                  Roll back to v{r.version}
                </ConfirmButton>
              )}
            </td>
          </tr>
        ))}
      </ListTable>
      {releases.data?.releases.length === 0 && <p>No releases yet.</p>}
    </div>
  );
}

function Secrets({ id, onChange }: { id: string; onChange: () => void }) {
  const secrets = useLoad(() => nube.machines.secrets.get(id), [id]);
  const [name, setName] = useState('');
  const [value, setValue] = useState('');
  const [restart, setRestart] = useState(true);
  const [note, setNote] = useState<string | null>(null);
  const act = useAction();
  // Stored: a value is in the vault; applied: the running app was started with it.
  const stored = new Set(secrets.data?.inVault ?? []);
  const applied = new Set(secrets.data?.secretNames ?? []);
  const names = [...new Set([...stored, ...applied])].sort();
  return (
    <div class="card">
      <h2>Secrets</h2>
      <p>Environment variables of the app, stored encrypted. Their values are never shown again; setting a name again replaces its value.</p>
      <form
        class="row"
        onSubmit={async (e) => {
          e.preventDefault();
          setNote(null);
          const r = await act.run(() => nube.machines.secrets.set(id, { body: { [name]: value }, query: { restart: restart ? 'true' : 'false' } }));
          if (r) {
            setNote(r.pendingRestart ? `${name} is set; the app gets it at its next restart.` : `${name} is set; the app restarted with it.`);
            setName('');
            setValue('');
          }
          secrets.reload();
          onChange();
        }}
      >
        <label for="secret-name">Name</label>
        <input
          id="secret-name"
          required
          pattern="[A-Za-z_][A-Za-z0-9_]{0,127}"
          title="Letters, digits and _, not starting with a digit"
          value={name}
          onInput={(e) => setName(e.currentTarget.value)}
        />
        <label for="secret-value">Value</label>
        <input id="secret-value" type="password" autocomplete="off" value={value} onInput={(e) => setValue(e.currentTarget.value)} />
        <label class="check">
          <input type="checkbox" checked={restart} onChange={(e) => setRestart(e.currentTarget.checked)} />
          Restart the app now to apply
        </label>
        <button type="submit" disabled={act.busy}>
          Set secret
        </button>
      </form>
      <ErrorText error={secrets.error ?? act.error} />
      <Notice text={note} />
      <ListTable caption="Secrets" headers={['Name', 'Value', 'Running app']}>
        {names.map((n) => (
          <tr key={n}>
            <td>{n}</td>
            <td>{stored.has(n) ? 'stored (encrypted)' : 'not stored'}</td>
            <td>{applied.has(n) ? 'has it' : 'gets it at the next restart'}</td>
          </tr>
        ))}
      </ListTable>
      {secrets.data && names.length === 0 && <p>No secrets yet.</p>}
    </div>
  );
}

function size(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

function Backups({ id, onChange }: { id: string; onChange: () => void }) {
  const backups = useLoad(() => nube.machines.backups.list(id), [id]);
  const [note, setNote] = useState<string | null>(null);
  const act = useAction();
  return (
    <div class="card">
      <h2>Backups</h2>
      <p>
        A copy of the app's data paths (<code>dataPaths</code> in its <code>nube.json</code>, not the whole disk) every day, kept 7 days. A
        restore stops the app, puts the copied paths back and starts it again.
      </p>
      <div class="row">
        <button type="button" onClick={() => backups.reload()}>
          Refresh backups
        </button>
      </div>
      <ErrorText error={backups.error ?? act.error} />
      <Notice text={note} />
      <ListTable caption="Backups" headers={['Taken', 'Status', 'Paths', 'Size', 'Consistency', 'Kept until', '']}>
        {backups.data?.backups.map((b) => (
          <tr key={b.id}>
            <td>{new Date(b.createdAt).toLocaleString()}</td>
            <td class="wrap">
              <span class={`status ${b.status}`}>{b.status}</span>
              {b.error ? ` ${b.error}` : ''}
            </td>
            <td class="wrap">{b.paths.join(', ')}</td>
            <td>{size(b.sizeBytes)}</td>
            <td>
              {b.consistency} ({b.method})
            </td>
            <td>{new Date(b.expiresAt).toLocaleDateString()}</td>
            <td>
              {b.status === 'completed' && (
                <ConfirmButton
                  question={`Restore the backup of ${new Date(b.createdAt).toLocaleString()}? The app stops meanwhile and ${b.paths.join(', ')} are replaced.`}
                  disabled={act.busy}
                  onConfirm={async () => {
                    setNote(null);
                    const r = await act.run(() => nube.machines.backups.restore(id, b.id));
                    if (r) setNote(`Restored ${r.restoredPaths.join(', ') || 'nothing (the backup held no paths)'}; the app started again.`);
                    onChange();
                  }}
                >
                  Restore
                </ConfirmButton>
              )}
            </td>
          </tr>
        ))}
      </ListTable>
      {backups.data?.backups.length === 0 && <p>No backups yet: the first is taken within a day of the machine's start, when its nube.json names dataPaths.</p>}
    </div>
  );
}

function MachineDetail({ id }: { id: string }) {
  const m = useLoad(() => nube.machines.get(id), [id]);
  const act = useAction();
  const [note, setNote] = useState<string | null>(null);
  const d = m.data;
  return (
    <Page
      title={d ? `Machine ${d.name}` : 'Machine'}
      actions={
        <a
          href="/console/machines"
          onClick={(e) => {
            e.preventDefault();
            navigate('machines');
          }}
        >
          ← All machines
        </a>
      }
    >
      <ErrorText error={m.error ?? act.error} />
      <Notice text={note} />
      {d && (
        <>
          <div class="card">
            <p>
              <span class={`status ${d.status}`}>{d.status}</span> {d.phase ? `(${d.phase}) ` : ''}· tier {d.tier} ({d.cpuMode} CPU) · {d.monthlyMxn} MXN a month
              {d.pendingRestart ? ' · secrets wait for a restart' : ''}
            </p>
            <p>
              URL: {d.url ? <a href={d.url}>{d.url}</a> : 'not exposed yet'}
              {d.domains.length > 0 ? ` · domains: ${d.domains.join(', ')}` : ''}
            </p>
            {d.app && (d.app.restarts > 0 || d.app.lastExit) && (
              <p>
                App: restarted {d.app.restarts} {d.app.restarts === 1 ? 'time' : 'times'}
                {d.app.lastExit ? ` · last exit code ${d.app.lastExit.code}${d.app.lastExit.oom ? ' (killed for memory)' : ''} at ${new Date(d.app.lastExit.at).toLocaleString()}` : ''}
                {d.app.oomKills > 0 ? ` · ${d.app.oomKills} OOM kills` : ''}
              </p>
            )}
            {d.lastError && <p class="error">Last error: {d.lastError}</p>}
            <div class="row">
              <button
                type="button"
                disabled={act.busy}
                onClick={async () => {
                  const r = await act.run(() => nube.machines.restart(id));
                  if (r) setNote(`Restarted; the app answered after ${(r.servingAfterMs / 1000).toFixed(1)} s.`);
                  m.reload();
                }}
              >
                Restart
              </button>
              <ConfirmButton
                question={`Delete the machine ${d.name}? Billing stops and its VM is destroyed.`}
                disabled={act.busy}
                onConfirm={async () => {
                  const r = await act.run(() => nube.machines.delete(id));
                  if (r) navigate('machines');
                }}
              >
                Delete machine
              </ConfirmButton>
            </div>
          </div>
          <Secrets id={id} onChange={m.reload} />
          <Backups id={id} onChange={m.reload} />
          <Releases id={id} onChange={m.reload} />
          <Logs id={id} />
        </>
      )}
    </Page>
  );
}

function Launch({ onDone }: { onDone: () => void }) {
  const [kind, setKind] = useState<'archiveUrl' | 'repo'>('archiveUrl');
  const [source, setSource] = useState('');
  const [ref, setRef] = useState('');
  const [tier, setTier] = useState('micro');
  const [name, setName] = useState('');
  const [checkout, setCheckout] = useState<string | null>(null);
  const [result, setResult] = useState<string | null>(null);
  const act = useAction();
  return (
    <form
      class="card"
      onSubmit={async (e) => {
        e.preventDefault();
        setCheckout(null);
        setResult(null);
        const input = { [kind]: source, tier, ...(name ? { name } : {}), ...(kind === 'repo' && ref ? { ref } : {}) };
        const r = await act.run(() => nube.machines.launch(input));
        if (!r) return;
        if ('checkoutUrl' in r) setCheckout(r.checkoutUrl);
        else setResult(r.status === 'failed' ? `The launch failed: ${r.error ?? 'see the build log'}\n${r.buildLog}` : `Launched (${r.status})${r.url ? ` at ${r.url}` : ''}.`);
        onDone();
      }}
    >
      <h2>Launch an app</h2>
      <fieldset>
        <legend>Source</legend>
        <label class="check">
          <input type="radio" name="launch-kind" checked={kind === 'archiveUrl'} onChange={() => setKind('archiveUrl')} />
          From an archive (.tar.gz or .zip)
        </label>{' '}
        <label class="check">
          <input type="radio" name="launch-kind" checked={kind === 'repo'} onChange={() => setKind('repo')} />
          From a git repository
        </label>
      </fieldset>
      <div class="row">
        <label for="launch-source">{kind === 'repo' ? 'Repository URL' : 'Archive URL'}</label>
        <input id="launch-source" type="url" required value={source} onInput={(e) => setSource(e.currentTarget.value)} aria-describedby="launch-error" />
        {kind === 'repo' && (
          <>
            <label for="launch-ref">Branch, tag or commit</label>
            <input id="launch-ref" value={ref} onInput={(e) => setRef(e.currentTarget.value)} />
          </>
        )}
      </div>
      <div class="row">
        <label for="launch-tier">Tier</label>
        <input id="launch-tier" required value={tier} onInput={(e) => setTier(e.currentTarget.value)} />
        <label for="launch-name">Name</label>
        <input id="launch-name" value={name} onInput={(e) => setName(e.currentTarget.value)} />
        <button type="submit" disabled={act.busy}>
          {act.busy ? 'Launching… (building can take minutes)' : 'Launch'}
        </button>
      </div>
      <ErrorText error={act.error} id="launch-error" />
      <Checkout url={checkout} />
      {result && <pre class="logs">{result}</pre>}
    </form>
  );
}

export function MachinesPage({ sub }: { sub: string[] }) {
  const list = useLoad(() => nube.machines.list());
  const { rows, pager } = usePaged(list.data?.machines);
  if (sub[0]) return <MachineDetail id={sub[0]} />;
  return (
    <Page title="Machines">
      <Tiers />
      <Launch onDone={list.reload} />
      <ErrorText error={list.error} />
      <ListTable caption="Machines" headers={['Machine', 'Status', 'Tier', 'URL', 'MXN / month']}>
        {rows.map((m) => (
          <tr key={m.id}>
            <td>
              <a
                href={`/console/machines/${m.id}`}
                onClick={(e) => {
                  e.preventDefault();
                  navigate(`machines/${m.id}`);
                }}
              >
                {m.name}
              </a>
            </td>
            <td>
              <span class={`status ${m.status}`}>{m.status}</span>
              {m.phase ? ` (${m.phase})` : ''}
            </td>
            <td>{m.tier}</td>
            <td class="wrap">{m.url ? <a href={m.url}>{m.url}</a> : '—'}</td>
            <td>{m.monthlyMxn}</td>
          </tr>
        ))}
      </ListTable>
      {list.data?.machines.length === 0 && <p>No machines yet.</p>}
      {pager}
    </Page>
  );
}
