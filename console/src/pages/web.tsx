import { useState } from 'preact/hooks';
import { nube } from '../api.js';
import { ErrorText, Page, useAction } from '../ui.js';

type Fetched = Awaited<ReturnType<typeof nube.web.fetch>>;

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
    </Page>
  );
}
