import { useEffect, useState } from 'preact/hooks';
import { formatBytes, nube, saveBlob } from '../api.js';
import { navigate } from '../app.js';
import { TerminalView } from '../terminal.js';
import { ConfirmButton, ErrorText, ListTable, Page, Progress, useAction, useLoad, usePaged } from '../ui.js';

type Sandbox = Awaited<ReturnType<typeof nube.sandboxes.get>>;
interface Entry {
  name: string;
  type: string;
  size: number;
}

const join = (dir: string, name: string) => `${dir.replace(/\/+$/, '')}/${name}`;

function toBase64(buf: ArrayBuffer): string {
  let s = '';
  const bytes = new Uint8Array(buf);
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function FileBrowser({ id }: { id: string }) {
  const [dir, setDir] = useState('/root');
  const list = useLoad(() => nube.sandboxes.files.get(id, 'list', { path: dir }) as Promise<{ entries: Entry[] }>, [id, dir]);
  const act = useAction();
  const entries = [...(list.data?.entries ?? [])].sort((a, b) => (a.type === b.type ? a.name.localeCompare(b.name) : a.type === 'dir' ? -1 : 1));
  const { rows, pager } = usePaged(entries, 50);
  return (
    <div class="card">
      <h2>Files</h2>
      <div class="row">
        <label for="sbx-dir">Folder</label>
        <input id="sbx-dir" value={dir} onChange={(e) => setDir(e.currentTarget.value || '/')} />
        <button type="button" onClick={() => setDir(dir.replace(/\/[^/]+\/?$/, '') || '/')}>
          Up
        </button>
        <label for="sbx-upload">Upload here</label>
        <input
          id="sbx-upload"
          type="file"
          onChange={async (e) => {
            const input = e.currentTarget;
            const f = input.files?.[0];
            if (!f) return;
            await act.run(async () => nube.sandboxes.files.post(id, 'write', { path: join(dir, f.name), content: toBase64(await f.arrayBuffer()), encoding: 'base64' }));
            input.value = '';
            list.reload();
          }}
        />
      </div>
      <ErrorText error={list.error ?? act.error} />
      <ul class="entries">
        {rows.map((e) => (
          <li key={e.name}>
            {e.type === 'dir' ? (
              <button type="button" class="link" onClick={() => setDir(join(dir, e.name))}>
                📁 {e.name}/
              </button>
            ) : (
              <button
                type="button"
                class="link"
                title="Download"
                onClick={async () => {
                  const r = (await act.run(() => nube.sandboxes.files.get(id, 'read', { path: join(dir, e.name), encoding: 'base64' }))) as { content: string } | undefined;
                  if (!r) return;
                  saveBlob(new Blob([Uint8Array.from(atob(r.content), (c) => c.charCodeAt(0))]), e.name);
                }}
              >
                {e.name}
              </button>
            )}{' '}
            <small>{e.type === 'dir' ? '' : formatBytes(e.size)}</small>
          </li>
        ))}
      </ul>
      {pager}
    </div>
  );
}

function SandboxDetail({ id }: { id: string }) {
  const sbx = useLoad(() => nube.sandboxes.get(id), [id]);
  const act = useAction();
  const [port, setPort] = useState('8000');
  useEffect(() => {
    if (sbx.data?.status !== 'starting') return;
    const t = setTimeout(sbx.reload, 1000);
    return () => clearTimeout(t);
  }, [sbx.data]);
  const s = sbx.data;
  const action = async (name: string, body: Record<string, unknown> = {}) => {
    const r = await act.run(() => nube.sandboxes.action(id, name as never, body as never));
    sbx.reload();
    return r;
  };
  return (
    <Page title={`Sandbox ${s?.name ?? id}`}>
      <ErrorText error={sbx.error} />
      {s && (
        <>
          <p>
            <span class={`status ${s.status}`}>{s.status}</span> · template {s.template} · {s.cpuCount} CPU · {s.memoryMB} MB
            {s.expiresAt ? ` · expires ${new Date(s.expiresAt).toLocaleString()}` : ''}
          </p>
          {s.status === 'starting' && s.progress && <Progress value={s.progress.percent / 100} label={`Template build: ${s.progress.step}`} />}
          {s.error && <p class="error">{s.error}</p>}
          <div class="row">
            {s.status === 'running' && (
              <button type="button" onClick={() => action('suspend')}>
                Suspend
              </button>
            )}
            {s.status === 'suspended' && (
              <button type="button" onClick={() => action('resume')}>
                Resume
              </button>
            )}
            <button
              type="button"
              onClick={async () => {
                const r = (await action('fork', { count: 1 })) as { sandboxes?: { id: string }[] } | undefined;
                const child = r?.sandboxes?.[0]?.id;
                if (child) navigate(`sandboxes/${child}`);
              }}
            >
              Fork
            </button>
            <ConfirmButton
              question={'Delete this sandbox? Its disk is lost.'}
              onConfirm={async () => {
                if (await act.run(() => nube.sandboxes.delete(id))) navigate('sandboxes');
              }}
            >
              Delete
            </ConfirmButton>
          </div>
          <ErrorText error={act.error} />
          <div class="card">
            <h2>Exposed URLs</h2>
            <ul>
              {s.urls.map((u) => (
                <li key={u.port}>
                  {u.port}: <a href={u.url}>{u.url}</a>
                </li>
              ))}
            </ul>
            <form
              class="row"
              onSubmit={async (e) => {
                e.preventDefault();
                await action('expose', { port: Number(port) });
              }}
            >
              <label for="expose-port">Port</label>
              <input id="expose-port" inputMode="numeric" value={port} onInput={(e) => setPort(e.currentTarget.value)} />
              <button type="submit">Expose</button>
            </form>
          </div>
          {s.status === 'running' && <TerminalView sandboxId={id} />}
          {s.status === 'running' && <FileBrowser id={id} />}
        </>
      )}
    </Page>
  );
}

export function SandboxesPage({ sub }: { sub: string[] }) {
  const list = useLoad(() => nube.sandboxes.list());
  const [template, setTemplate] = useState('base');
  const [timeout, setTimeoutS] = useState('3600');
  const create = useAction();
  const { rows, pager } = usePaged(list.data?.sandboxes as Sandbox[] | undefined);
  if (sub[0]) return <SandboxDetail id={sub[0]} />;
  return (
    <Page title="Sandboxes">
      <form
        class="row card"
        onSubmit={async (e) => {
          e.preventDefault();
          const s = await create.run(() => nube.sandboxes.create({ template, timeoutSeconds: Number(timeout) }));
          if (s) navigate(`sandboxes/${s.id}`);
        }}
      >
        <label for="sbx-template">Template</label>
        <input id="sbx-template" required value={template} onInput={(e) => setTemplate(e.currentTarget.value)} aria-describedby="sbx-error" />
        <label for="sbx-timeout">Timeout (seconds)</label>
        <input id="sbx-timeout" inputMode="numeric" value={timeout} onInput={(e) => setTimeoutS(e.currentTarget.value)} />
        <button type="submit" disabled={create.busy}>
          {create.busy ? 'Creating…' : 'Create sandbox'}
        </button>
      </form>
      <ErrorText error={create.error} id="sbx-error" />
      <ErrorText error={list.error} />
      <ListTable caption="Sandboxes" headers={['Sandbox', 'Status', 'Template', 'Created']}>
          {rows.map((s) => (
            <tr key={s.id}>
              <td>
                <a
                  href={`/console/sandboxes/${s.id}`}
                  onClick={(e) => {
                    e.preventDefault();
                    navigate(`sandboxes/${s.id}`);
                  }}
                >
                  {s.name ?? s.id}
                </a>
              </td>
              <td>
                <span class={`status ${s.status}`}>{s.status}</span>
              </td>
              <td>{s.template}</td>
              <td>{new Date(s.createdAt).toLocaleString()}</td>
            </tr>
          ))}
      </ListTable>
      {list.data?.sandboxes.length === 0 && <p>No sandboxes yet.</p>}
      {pager}
    </Page>
  );
}
