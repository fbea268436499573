import { useEffect, useState } from 'preact/hooks';
import { formatBytes, nube } from '../api.js';
import { ErrorText, ListTable, Page, Progress, useAction, useCursorPages, useLoad } from '../ui.js';

type FileRow = Awaited<ReturnType<typeof nube.files.get>>;

/** PUT to the presigned URL with XMLHttpRequest: fetch cannot report upload progress. */
function put(url: string, file: File, contentType: string, onProgress: (f: number) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('PUT', url);
    xhr.setRequestHeader('content-type', contentType);
    xhr.upload.onprogress = (e) => e.lengthComputable && onProgress(e.loaded / e.total);
    xhr.onload = () => (xhr.status < 300 ? resolve() : reject(new Error(`upload failed: HTTP ${xhr.status} ${xhr.responseText.slice(0, 200)}`)));
    xhr.onerror = () => reject(new Error('upload failed: the connection dropped'));
    xhr.send(file);
  });
}

function Upload({ onDone }: { onDone: () => void }) {
  const [progress, setProgress] = useState<number | null>(null);
  const act = useAction();
  return (
    <div class="card">
      <label for="upload">Upload a file</label>
      <input
        id="upload"
        type="file"
        disabled={progress !== null}
        aria-describedby="upload-error"
        onChange={async (e) => {
          const input = e.currentTarget;
          const file = input.files?.[0];
          if (!file) return;
          setProgress(0);
          await act.run(async () => {
            const type = file.type || 'application/octet-stream';
            const created = await nube.files.create({ fileName: file.name, contentType: type, size: file.size });
            await put(created.putUrl, file, type, setProgress);
          });
          setProgress(null);
          input.value = '';
          onDone();
        }}
      />
      {progress !== null && <Progress value={progress} label="Upload progress" />}
      <ErrorText error={act.error} id="upload-error" />
    </div>
  );
}

/** A video's HLS renditions: start them, follow the job's progress, then the playlist's URL. */
function Hls({ fileId }: { fileId: string }) {
  const hls = useLoad(() => nube.files.hlsGet(fileId), [fileId]);
  const start = useAction();
  const status = hls.data?.status;
  const running = status === 'requested' || status === 'processing';
  useEffect(() => {
    if (!running) return;
    const t = setTimeout(() => void hls.reload(), 1000);
    return () => clearTimeout(t);
  }, [running, hls.data]);
  return (
    <div class="card" role="region" aria-label="HLS streaming">
      <h3>HLS streaming</h3>
      <ErrorText error={hls.error ?? start.error} />
      {hls.data && <p>Status: {status}</p>}
      {running && <Progress value={hls.data?.progress ?? 0} label="HLS progress" />}
      {status === 'failed' && <ErrorText error={hls.data?.error ?? 'the renditions could not be made'} />}
      {status === 'ready' && hls.data?.playlistUrl && (
        <p>
          {hls.data.renditions.map((r) => `${r.height}p`).join(', ')} · playlist: <code class="secret">{hls.data.playlistUrl}</code>
          {hls.data.playlistUrlExpiresAt && ` (valid until ${new Date(hls.data.playlistUrlExpiresAt).toLocaleString()})`}
        </p>
      )}
      {(status === 'none' || status === 'failed') && (
        <button
          type="button"
          disabled={start.busy}
          onClick={async () => {
            const r = await start.run(() => nube.files.hls(fileId));
            if (r) hls.setData(r);
          }}
        >
          Make HLS renditions
        </button>
      )}
    </div>
  );
}

function Preview({ file, onClose }: { file: FileRow; onClose: () => void }) {
  const share = useAction();
  const [link, setLink] = useState<string | null>(null);
  return (
    <div class="card" role="region" aria-label={`Preview of ${file.name}`}>
      <h2>{file.name}</h2>
      <p>
        {file.contentType} · {formatBytes(file.size)} · {file.access}
      </p>
      {file.contentType.startsWith('image/') && file.readUrl && <img class="preview" src={file.readUrl} alt={file.name} />}
      <div class="row">
        {file.readUrl && (
          <a href={file.readUrl} download={file.name}>
            Download
          </a>
        )}
        <button
          type="button"
          onClick={async () => {
            const t = await share.run(() => nube.shareTokens.create({ fileId: file.id, expiresInSeconds: 86400 }));
            if (t) setLink(t.url);
          }}
        >
          Make a share link (24 h)
        </button>
        <button type="button" onClick={onClose}>
          Close
        </button>
      </div>
      {link && (
        <p>
          Share link: <code class="secret">{link}</code>
        </p>
      )}
      <ErrorText error={share.error} />
      {file.contentType.startsWith('video/') && <Hls fileId={file.id} />}
    </div>
  );
}

export function FilesPage(_: { sub: string[] }) {
  const [trash, setTrash] = useState(false);
  const [q, setQ] = useState('');
  const [search, setSearch] = useState('');
  const pages = useCursorPages();
  const [preview, setPreview] = useState<FileRow | null>(null);
  const act = useAction();
  const list = useLoad(async () => {
    if (search) {
      const r = await nube.files.search({ q: search, limit: 50 });
      return { items: (r as { items: FileRow[] }).items, hasMore: false, nextCursor: null };
    }
    return nube.files.list({ limit: 20, cursor: pages.cursor, status: trash ? 'DELETED' : undefined });
  }, [trash, search, pages.page]);
  const reset = pages.reset;
  return (
    <Page title="Files">
      {!trash && <Upload onDone={list.reload} />}
      <div class="row">
        <form
          class="row"
          role="search"
          onSubmit={(e) => {
            e.preventDefault();
            reset();
            setSearch(q.trim());
          }}
        >
          <label for="file-search">Search</label>
          <input id="file-search" type="search" value={q} onInput={(e) => setQ(e.currentTarget.value)} />
          <button type="submit">Search</button>
        </form>
        <label class="check">
          <input
            type="checkbox"
            checked={trash}
            onChange={(e) => {
              reset();
              setTrash(e.currentTarget.checked);
            }}
          />
          Trash
        </label>
      </div>
      <ErrorText error={list.error ?? act.error} />
      <ListTable caption={trash ? 'Files in the trash' : 'Files'} headers={['Name', 'Size', trash ? 'Purged in' : 'Status', '']}>
          {list.data?.items.map((f) => (
            <tr key={f.id}>
              <td class="wrap">{f.name}</td>
              <td>{formatBytes(f.size)}</td>
              <td>{trash ? `${f.daysUntilPurge ?? '?'} days` : f.status}</td>
              <td class="actions">
                {trash ? (
                  <button
                    type="button"
                    onClick={async () => {
                      await act.run(() => nube.files.restore(f.id));
                      list.reload();
                    }}
                  >
                    Restore
                  </button>
                ) : (
                  <>
                    <button type="button" onClick={() => setPreview(f)}>
                      Open
                    </button>
                    <button
                      type="button"
                      onClick={async () => {
                        await act.run(() => nube.files.delete(f.id));
                        list.reload();
                      }}
                    >
                      Delete
                    </button>
                  </>
                )}
              </td>
            </tr>
          ))}
      </ListTable>
      {list.data?.items.length === 0 && <p>{trash ? 'The trash is empty.' : 'No files.'}</p>}
      {pages.pager(list.data)}
      {preview && <Preview file={preview} onClose={() => setPreview(null)} />}
    </Page>
  );
}
