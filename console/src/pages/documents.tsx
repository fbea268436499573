// Documents: list, create from Markdown sections or from a prompt (an LLM writes the pages as a job; the
// list follows it until done, or says why it failed), edit one (name, theme, prompt, sections), deploy as
// a site (its link), PDF export, unpublish, delete.
import { useEffect, useState } from 'preact/hooks';
import { nube, openInTab } from '../api.js';
import { ConfirmButton, ErrorText, ListTable, Notice, Page, useAction, useLoad, usePaged } from '../ui.js';

const THEMES = ['classic', 'modern', 'dark', 'minimal'] as const;
type Theme = (typeof THEMES)[number];
interface Section {
  heading: string;
  body: string;
  /** What the editor does not show (id, format, images), sent back as it came. */
  rest?: Record<string, unknown>;
}
const EMPTY: Section[] = [{ heading: '', body: '' }];

/** A stored section as the editor holds it (heading/body, or their aliases title/content). */
function editable(s: Record<string, unknown>): Section {
  const { heading, title, body, content, ...rest } = s;
  const text = (v: unknown) => (typeof v === 'string' ? v : '');
  return { heading: text(heading ?? title), body: text(body ?? content), rest };
}

/** Sections with something in them, as the API takes them (Markdown unless a section came as HTML). */
function toApi(sections: Section[]) {
  return sections
    .filter((s) => s.heading.trim() || s.body.trim())
    .map((s) => ({ format: 'markdown' as const, ...s.rest, heading: s.heading, body: s.body }));
}

function SectionsEditor({ sections, onChange }: { sections: Section[]; onChange: (s: Section[]) => void }) {
  const set = (i: number, patch: Partial<Section>) => onChange(sections.map((s, j) => (j === i ? { ...s, ...patch } : s)));
  return (
    <fieldset>
      <legend>Sections (Markdown)</legend>
      {sections.map((s, i) => (
        // biome-ignore lint/suspicious/noArrayIndexKey: sections are positional while edited
        <div key={i} class="section-edit">
          <label for={`doc-heading-${i}`}>Heading of section {i + 1}</label>
          <input id={`doc-heading-${i}`} value={s.heading} onInput={(e) => set(i, { heading: e.currentTarget.value })} />
          <label for={`doc-body-${i}`}>
            Body of section {i + 1} ({s.rest?.format === 'html' ? 'HTML' : 'Markdown'})
          </label>
          <textarea id={`doc-body-${i}`} rows={5} value={s.body} onInput={(e) => set(i, { body: e.currentTarget.value })} />
          {sections.length > 1 && (
            <button type="button" onClick={() => onChange(sections.filter((_, j) => j !== i))}>
              Remove section {i + 1}
            </button>
          )}
        </div>
      ))}
      <button type="button" onClick={() => onChange([...sections, { heading: '', body: '' }])}>
        Add a section
      </button>
    </fieldset>
  );
}

type Generation = { status: 'queued' | 'running' | 'done' | 'failed'; error: string | null } | null;

/** A document's state in words: its pages being written, why writing them failed, or draft/published. */
function StatusCell({ status, generation }: { status: string; generation: Generation }) {
  if (generation?.status === 'queued' || generation?.status === 'running') return <span class="status pending">writing pages…</span>;
  return (
    <>
      <span class={`status ${status}`}>{status}</span>
      {generation?.status === 'failed' && <p class="error">Writing the pages failed: {generation.error ?? 'no reason given'}</p>}
    </>
  );
}

export function DocumentsPage(_: { sub: string[] }) {
  const docs = useLoad(() => nube.documents.list());
  // While an LLM writes some document's pages, the list is read again every two seconds.
  const writing = docs.data?.items.some((d) => d.generation?.status === 'queued' || d.generation?.status === 'running');
  useEffect(() => {
    if (!writing) return;
    const t = setTimeout(docs.reload, 2000);
    return () => clearTimeout(t);
  }, [docs.data]);
  const [name, setName] = useState('');
  const [prompt, setPrompt] = useState('');
  const [theme, setTheme] = useState<Theme>('classic');
  const [sections, setSections] = useState<Section[]>(EMPTY);
  const [editing, setEditing] = useState<{ id: string; name: string; published: boolean; hadSections: boolean; prompt: string } | null>(null);
  const [note, setNote] = useState<string | null>(null);
  const [deployed, setDeployed] = useState<string | null>(null);
  const create = useAction();
  const act = useAction();
  const { rows, pager } = usePaged(docs.data?.items);
  const run = async (fn: () => Promise<unknown>) => {
    await act.run(fn);
    docs.reload();
  };
  const reset = () => {
    setEditing(null);
    setName('');
    setPrompt('');
    setTheme('classic');
    setSections(EMPTY);
  };
  return (
    <Page title="Documents">
      <form
        class="card"
        onSubmit={async (e) => {
          e.preventDefault();
          setNote(null);
          const filled = toApi(sections);
          const wanted = prompt.trim();
          // A prompt is sent when given (new) or changed (edit): with no sections, an LLM writes the pages from it.
          const promptPart = wanted && wanted !== editing?.prompt ? { prompt: wanted } : {};
          // A document whose pages an LLM wrote has no sections: left empty, they are not sent (its pages stay),
          // nor are empty sections sent with a prompt (the LLM writes the pages).
          const keepPages = filled.length === 0 && ((editing && !editing.hadSections) || wanted !== '');
          const input = { name, theme, ...promptPart, ...(keepPages ? {} : { sections: filled }) };
          const r = await create.run<unknown>(() => (editing ? nube.documents.update(editing.id, input) : nube.documents.create(input)));
          if (r) {
            if ('prompt' in promptPart && !('sections' in input)) setNote(`An LLM is writing the pages of ${name}; the list shows when they are done.`);
            else if (editing) setNote(editing.published ? `Saved ${name}. Its site shows the change once deployed again.` : `Saved ${name}.`);
            reset();
            docs.reload();
          }
        }}
      >
        <h2>{editing ? `Edit ${editing.name}` : 'New document'}</h2>
        <div class="row">
          <label for="doc-name">Name</label>
          <input id="doc-name" required value={name} onInput={(e) => setName(e.currentTarget.value)} aria-describedby="doc-error" />
          <label for="doc-theme">Theme</label>
          <select id="doc-theme" value={theme} onChange={(e) => setTheme(e.currentTarget.value as Theme)}>
            {THEMES.map((t) => (
              <option key={t} value={t}>
                {t}
              </option>
            ))}
          </select>
        </div>
        <label for="doc-prompt">Describe it, and an LLM writes the pages (when no section below is filled)</label>
        <textarea id="doc-prompt" rows={3} value={prompt} onInput={(e) => setPrompt(e.currentTarget.value)} />
        <SectionsEditor sections={sections} onChange={setSections} />
        <div class="row">
          <button type="submit" disabled={create.busy}>
            {editing ? (create.busy ? 'Saving…' : 'Save changes') : create.busy ? 'Creating…' : 'Create document'}
          </button>
          {editing && (
            <button type="button" onClick={reset}>
              Cancel editing
            </button>
          )}
        </div>
        <ErrorText error={create.error} id="doc-error" />
      </form>
      <Notice text={note} />
      {deployed && (
        <p class="notice" role="status">
          Published: <a href={deployed}>open the site</a> ({deployed})
        </p>
      )}
      <ErrorText error={docs.error ?? act.error} />
      <ListTable caption="Documents" headers={['Name', 'Status', 'Pages', 'Site', 'Updated', '']}>
        {rows.map((d) => (
          <tr key={d.id}>
            <td>{d.name}</td>
            <td>
              <StatusCell status={d.status} generation={d.generation} />
            </td>
            <td>{d.pageCount}</td>
            <td>{d.url ? <a href={d.url}>Open the site of {d.name}</a> : 'not published'}</td>
            <td>{new Date(d.updatedAt).toLocaleString()}</td>
            <td class="actions">
              <button
                type="button"
                onClick={() => {
                  setNote(null);
                  setEditing({ id: d.id, name: d.name, published: d.status === 'published', hadSections: d.sections.length > 0, prompt: d.prompt ?? '' });
                  setName(d.name);
                  setPrompt(d.prompt ?? '');
                  setTheme((THEMES as readonly string[]).includes(d.theme) ? (d.theme as Theme) : 'classic');
                  setSections(d.sections.length > 0 ? d.sections.map(editable) : EMPTY);
                  globalThis.scrollTo?.({ top: 0 });
                }}
              >
                Edit
              </button>
              <button
                type="button"
                onClick={async () => {
                  const r = await act.run(() => nube.documents.deploy(d.id));
                  if (r) setDeployed(r.url);
                  docs.reload();
                }}
              >
                {d.status === 'published' ? 'Deploy again' : 'Deploy as a site'}
              </button>
              {d.status === 'published' && (
                <button type="button" onClick={() => run(() => nube.documents.unpublish(d.id))}>
                  Unpublish
                </button>
              )}
              <button type="button" onClick={() => act.run(() => openInTab(`/api/v2/documents/${encodeURIComponent(d.id)}/pdf?inline=1`))}>
                PDF
              </button>
              <ConfirmButton
                question={`Delete the document ${d.name}? Its site goes with it.`}
                onConfirm={async () => {
                  await run(() => nube.documents.delete(d.id));
                }}
              >
                Delete
              </ConfirmButton>
            </td>
          </tr>
        ))}
      </ListTable>
      {docs.data?.items.length === 0 && <p>No documents yet.</p>}
      {pager}
    </Page>
  );
}
