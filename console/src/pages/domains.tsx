// Custom domains: add one (the DNS records to create are listed with it), verify it (why not, in words),
// point it at one of the account's sites or machines, detach it, delete it; its certificate's status.
import { useState } from 'preact/hooks';
import { nube } from '../api.js';
import { ConfirmButton, ErrorText, ListTable, Notice, Page, useAction, useLoad } from '../ui.js';

type Domain = Awaited<ReturnType<typeof nube.domains.list>>['domains'][number];

/** Where a domain can point: "machine:<id>" or "site:<id>", named for people. */
interface Choice {
  value: string;
  label: string;
}

function Targets({ d, choices, onAttach, busy }: { d: Domain; choices: Choice[]; onAttach: (value: string) => void; busy: boolean }) {
  const [value, setValue] = useState('');
  if (choices.length === 0) return null;
  const id = `attach-${d.domain}`;
  return (
    <span class="row">
      <label for={id} class="sr-only">
        Point {d.domain} at
      </label>
      <select id={id} value={value} onChange={(e) => setValue(e.currentTarget.value)}>
        <option value="">choose…</option>
        {choices.map((c) => (
          <option key={c.value} value={c.value}>
            {c.label}
          </option>
        ))}
      </select>
      <button type="button" disabled={busy || !value} onClick={() => onAttach(value)} aria-label={`Point ${d.domain} here`}>
        Point here
      </button>
    </span>
  );
}

export function DomainsPage(_: { sub: string[] }) {
  const list = useLoad(() => nube.domains.list());
  const machines = useLoad(() => nube.machines.list());
  const sites = useLoad(() => nube.websites.list());
  const [domain, setDomain] = useState('');
  const [note, setNote] = useState<string | null>(null);
  const act = useAction();
  const choices: Choice[] = [
    ...(machines.data?.machines ?? []).map((m) => ({ value: `machine:${m.id}`, label: `machine ${m.name}` })),
    ...(sites.data?.items ?? []).map((s) => ({ value: `site:${s.id}`, label: `site ${s.name} (${s.slug})` })),
  ];
  const serves = (d: Domain) => {
    const t = d.target;
    if (t.kind === 'none') return 'nothing yet';
    const c = choices.find((x) => x.value === `${t.kind}:${t.id}`);
    if (c) return c.label;
    return t.kind === 'sandbox' ? `sandbox ${t.id} port ${t.port}` : `${t.kind} ${t.id}`;
  };
  const run = async <T,>(fn: () => Promise<T>, said: (r: T) => string) => {
    setNote(null);
    const r = await act.run(fn);
    // The list first: the note ("… is verified.") must not come before the row that shows it.
    await list.reload();
    if (r) setNote(said(r));
  };
  return (
    <Page title="Domains">
      <form
        class="card"
        onSubmit={async (e) => {
          e.preventDefault();
          const name = domain.trim();
          await run(
            () => nube.domains.create({ domain: name }),
            (d) => `${d.domain} added. Create its DNS records (listed below), then verify it.`,
          );
          setDomain('');
        }}
      >
        <h2>Add a domain</h2>
        <p>A domain of yours for one of your sites or machines. Once its TXT record proves it is yours, nube serves it, with a certificate when an ACME CA is configured.</p>
        <div class="row">
          <label for="domain-name">Domain</label>
          <input id="domain-name" required placeholder="www.example.com" value={domain} onInput={(e) => setDomain(e.currentTarget.value)} aria-describedby="domain-error" />
          <button type="submit" disabled={act.busy}>
            Add domain
          </button>
        </div>
      </form>
      <ErrorText error={act.error ?? list.error} id="domain-error" />
      <Notice text={note} />
      <ListTable caption="Domains" headers={['Domain', 'Verified', 'Serves', 'Certificate', '']}>
        {list.data?.domains.map((d) => (
          <tr key={d.domain}>
            <td>{d.domain}</td>
            <td>{d.verified ? `yes, ${new Date(d.verifiedAt ?? '').toLocaleDateString()}` : 'not yet'}</td>
            <td>
              {serves(d)}
              <Targets
                d={d}
                choices={choices}
                busy={act.busy}
                onAttach={(value) => {
                  const [kind, id] = value.split(/:(.*)/s) as ['site' | 'machine', string];
                  const label = choices.find((c) => c.value === value)?.label ?? `${kind} ${id}`;
                  run(
                    () => nube.domains.attach(d.domain, { kind, id }),
                    (a) => `${a.domain} now serves ${label}${a.verified ? '.' : ' once verified.'}`,
                  );
                }}
              />
            </td>
            <td>
              {d.certificate.status}
              {d.certificate.notAfter ? ` until ${new Date(d.certificate.notAfter).toLocaleDateString()}` : ''}
            </td>
            <td class="actions">
              {!d.verified && (
                <button
                  type="button"
                  aria-label={`Verify ${d.domain}`}
                  disabled={act.busy}
                  onClick={() =>
                    run(
                      () => nube.domains.verify(d.domain),
                      (v) => (v.verified ? `${v.domain} is verified.` : `${v.domain} is not verified yet: ${v.reason ?? 'the TXT record was not found'}.`),
                    )
                  }
                >
                  Verify
                </button>
              )}
              {d.target.kind !== 'none' && (
                <button
                  type="button"
                  aria-label={`Detach ${d.domain}`}
                  disabled={act.busy}
                  onClick={() => run(() => nube.domains.detach(d.domain), (a) => `${a.domain} serves nothing now.`)}
                >
                  Detach
                </button>
              )}
              <ConfirmButton
                question={`Remove ${d.domain}? It stops serving and its certificate is dropped.`}
                label={`Remove ${d.domain}`}
                disabled={act.busy}
                onConfirm={() => run(() => nube.domains.delete(d.domain), () => `${d.domain} removed.`)}
              >
                Remove
              </ConfirmButton>
            </td>
          </tr>
        ))}
      </ListTable>
      {list.data && list.data.domains.length > 0 && (
        <div class="card">
          <h2>DNS records to create</h2>
          <p>At your DNS provider: the TXT record proves the domain is yours (then press Verify); the CNAME sends its traffic to nube.</p>
          <ListTable caption="DNS records" headers={['Domain', 'Type', 'Name', 'Value']}>
            {list.data.domains.flatMap((d) =>
              d.records.map((r) => (
                <tr key={`${d.domain}:${r.type}:${r.name}`}>
                  <td>{d.domain}</td>
                  <td>{r.type}</td>
                  <td class="wrap">
                    <code>{r.name}</code>
                  </td>
                  <td class="wrap">
                    <code>{r.value}</code>
                  </td>
                </tr>
              )),
            )}
          </ListTable>
        </div>
      )}
      {list.data?.domains.length === 0 && <p>No domains yet.</p>}
    </Page>
  );
}
