import { useState } from 'preact/hooks';
import { nube } from '../api.js';
import { ConfirmButton, ErrorText, ListTable, Page, useAction, useCursorPages, useLoad } from '../ui.js';

const when = (iso: string | null) => (iso ? new Date(iso).toLocaleString() : '—');

function Submissions({ formId, name, onChange }: { formId: string; name: string; onChange: () => void }) {
  const pages = useCursorPages();
  const list = useLoad(() => nube.forms.submissions.list(formId, { limit: 20, cursor: pages.cursor }), [formId, pages.page]);
  const act = useAction();
  return (
    <div class="card">
      <h3>Submissions of {name}</h3>
      <ErrorText error={list.error ?? act.error} />
      {list.data?.items.length === 0 && <p>No submissions on this page.</p>}
      <ListTable caption={`Submissions of ${name}`} headers={['Received', 'Fields', 'Files', '']}>
        {list.data?.items.map((s) => (
          <tr key={s.id}>
            <td>{when(s.createdAt)}</td>
            <td>
              <dl class="fields">
                {Object.entries(s.fields).map(([k, v]) => (
                  <div key={k}>
                    <dt>{k}</dt>
                    <dd>{Array.isArray(v) ? v.join(', ') : v}</dd>
                  </div>
                ))}
              </dl>
            </td>
            <td>
              {s.files.map((f) => (
                <button
                  type="button"
                  class="link"
                  key={f.fileId}
                  onClick={async () => {
                    const file = await act.run(() => nube.files.get(f.fileId));
                    if (file?.readUrl) window.open(file.readUrl, '_blank', 'noopener');
                  }}
                >
                  {f.name} ({Math.ceil(f.size / 1024)} KB)
                </button>
              ))}
            </td>
            <td>
              <ConfirmButton
                question="Delete this submission? Its files go to the trash."
                label={`Delete the submission of ${when(s.createdAt)}`}
                onConfirm={async () => {
                  await act.run(() => nube.forms.submissions.delete(formId, s.id));
                  list.reload();
                  onChange();
                }}
              >
                Delete
              </ConfirmButton>
            </td>
          </tr>
        ))}
      </ListTable>
      {pages.pager(list.data)}
    </div>
  );
}

export function FormsPage(_: { sub: string[] }) {
  const pages = useCursorPages();
  const forms = useLoad(() => nube.forms.list({ limit: 20, cursor: pages.cursor }), [pages.page]);
  const [open, setOpen] = useState<string | null>(null);
  const act = useAction();
  const selected = forms.data?.items.find((f) => f.id === open);
  return (
    <Page title="Forms">
      <p>
        A site's page declares a form with <code>{'<form data-nube-form="contact">'}</code> (documents have a form section); a
        form shows here from its first submission.
      </p>
      <ErrorText error={forms.error ?? act.error} />
      <ListTable caption="Forms" headers={['Form', 'Site', 'Submissions', 'Last', '']}>
        {forms.data?.items.map((f) => (
          <tr key={f.id}>
            <td>
              <button type="button" class="link" aria-expanded={open === f.id} onClick={() => setOpen(open === f.id ? null : f.id)}>
                {f.name}
              </button>
            </td>
            <td>
              <a href={f.siteUrl} target="_blank" rel="noopener noreferrer">
                {f.siteSlug}
              </a>
            </td>
            <td>{f.submissionCount}</td>
            <td>{when(f.lastSubmissionAt)}</td>
            <td>
              <ConfirmButton
                question={`Delete the form ${f.name} and all its submissions? Their files go to the trash.`}
                label={`Delete the form ${f.name}`}
                onConfirm={async () => {
                  await act.run(() => nube.forms.delete(f.id));
                  if (open === f.id) setOpen(null);
                  forms.reload();
                }}
              >
                Delete
              </ConfirmButton>
            </td>
          </tr>
        ))}
      </ListTable>
      {pages.pager(forms.data)}
      {selected && <Submissions formId={selected.id} name={selected.name} onChange={() => forms.reload()} />}
    </Page>
  );
}
