import { useEffect, useState } from 'preact/hooks';
import { nube } from '../api.js';
import { ErrorText, Page, useAction, useLoad } from '../ui.js';

type Fetched = Awaited<ReturnType<typeof nube.web.fetch>>;
type ExtractJob = Awaited<ReturnType<typeof nube.web.extract.get>>;

/** An extraction job over URLs, its items appended to a dataset when one is chosen. */
function Extract() {
  const datasets = useLoad(() => nube.datasets.list(), []);
  const [urls, setUrls] = useState('');
  const [source, setSource] = useState('page');
  const [datasetId, setDatasetId] = useState('');
  const [job, setJob] = useState<ExtractJob | null>(null);
  const act = useAction();
  const running = job !== null && (job.status === 'queued' || job.status === 'running');
  useEffect(() => {
    if (!running || !job) return;
    const t = setTimeout(async () => {
      const next = await act.run(() => nube.web.extract.get(job.jobId));
      if (next) setJob(next);
    }, 1000);
    return () => clearTimeout(t);
  }, [running, job]);
  return (
    <form
      class="card"
      onSubmit={async (e) => {
        e.preventDefault();
        const input = urls.split(/\s+/).filter(Boolean);
        const started = await act.run(() => nube.web.extract({ input, source, ...(datasetId ? { datasetId } : {}) }));
        if (started) setJob({ ...started, data: undefined, itemCount: null, error: null, createdAt: new Date().toISOString(), finishedAt: null });
      }}
    >
      <h2>Extract</h2>
      <label for="extract-urls">Pages to extract from (one address per line)</label>
      <textarea id="extract-urls" rows={3} required value={urls} onInput={(e) => setUrls(e.currentTarget.value)} aria-describedby="extract-error" />
      <label for="extract-source">Source</label>
      <select id="extract-source" value={source} onChange={(e) => setSource(e.currentTarget.value)}>
        <option value="page">page (structured data)</option>
        <option value="links">links</option>
        <option value="sitemap">sitemap</option>
        <option value="feed">feed</option>
      </select>
      <label for="extract-dataset">Append the items to a dataset</label>
      <select id="extract-dataset" value={datasetId} onChange={(e) => setDatasetId(e.currentTarget.value)}>
        <option value="">No dataset (only the answer)</option>
        {datasets.data?.items.map((d) => (
          <option key={d.id} value={d.id}>
            {d.name}
          </option>
        ))}
      </select>
      <button type="submit" disabled={act.busy || running}>
        {running ? 'Extracting…' : 'Extract'}
      </button>
      <ErrorText error={act.error ?? datasets.error} id="extract-error" />
      {job && (
        <div role="status">
          <p>
            Job {job.jobId}: {job.status}
            {job.itemCount !== null ? ` · ${job.itemCount} queries used` : ''}
          </p>
          {job.error && <ErrorText error={job.error} />}
          {job.dataset && job.dataset.added !== undefined && (
            <p>
              Dataset: {job.dataset.added} rows added, {job.dataset.rejected ?? 0} rejected
            </p>
          )}
          {job.status === 'completed' && <pre class="extracted">{JSON.stringify(job.data, null, 2)}</pre>}
        </div>
      )}
    </form>
  );
}

export function WebPage(_: { sub: string[] }) {
  const [url, setUrl] = useState('https://example.com');
  const [result, setResult] = useState<{ md: Fetched; html: Fetched } | null>(null);
  const act = useAction();
  return (
    <Page title="Web fetch playground">
      <form
        class="row"
        onSubmit={async (e) => {
          e.preventDefault();
          const r = await act.run(async () => {
            const [md, html] = await Promise.all([nube.web.fetch({ url }), nube.web.fetch({ url, asMarkdown: false })]);
            return { md, html };
          });
          if (r) setResult(r);
        }}
      >
        <label for="fetch-url">URL</label>
        <input id="fetch-url" type="url" required value={url} onInput={(e) => setUrl(e.currentTarget.value)} aria-describedby="fetch-error" />
        <button type="submit" disabled={act.busy}>
          {act.busy ? 'Fetching…' : 'Fetch'}
        </button>
      </form>
      <ErrorText error={act.error} id="fetch-error" />
      {result && (
        <>
          <p>
            {result.md.status} · {result.md.title ?? '(no title)'} · {result.md.queriesUsed} queries used
            {result.md.truncated ? ' · truncated' : ''}
          </p>
          <div class="split">
            <div>
              <h2>Markdown</h2>
              <pre class="markdown">{result.md.markdown ?? result.md.text}</pre>
            </div>
            <div>
              <h2>Page</h2>
              {/* No scripts, no same origin: the fetched page is only shown. */}
              <iframe title="Fetched page" sandbox="" srcdoc={result.html.html ?? result.html.text ?? ''} />
            </div>
          </div>
        </>
      )}
      <Extract />
    </Page>
  );
}
