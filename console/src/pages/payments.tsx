import { useState } from 'preact/hooks';
import { nube } from '../api.js';
import { ConfirmButton, ErrorText, ListTable, Page, useAction, useCursorPages, useLoad } from '../ui.js';

const mxn = (centavos: number) => `$${(centavos / 100).toFixed(2)} MXN`;

function Payments({ linkId }: { linkId: string }) {
  const pages = useCursorPages();
  const list = useLoad(() => nube.paymentLinks.payments(linkId, { limit: 20, cursor: pages.cursor }), [linkId, pages.page]);
  return (
    <div class="card">
      <h3>Payments</h3>
      <ErrorText error={list.error} />
      {list.data?.items.length === 0 && <p>No payments yet.</p>}
      <ul>
        {list.data?.items.map((p) => (
          <li key={p.id}>
            {mxn(p.amountCentavos)} · {p.provider} · {p.email ?? 'no email'} · {p.paidAt ? new Date(p.paidAt).toLocaleString() : 'pending'}
          </li>
        ))}
      </ul>
      {pages.pager(list.data)}
    </div>
  );
}

export function PaymentsPage(_: { sub: string[] }) {
  const pages = useCursorPages();
  const links = useLoad(() => nube.paymentLinks.list({ limit: 20, cursor: pages.cursor }), [pages.page]);
  const [amount, setAmount] = useState('100.00');
  const [description, setDescription] = useState('');
  const [unlimited, setUnlimited] = useState(false);
  const [selected, setSelected] = useState<string | null>(null);
  const create = useAction();
  const act = useAction();
  return (
    <Page title="Payment links">
      <form
        class="card"
        onSubmit={async (e) => {
          e.preventDefault();
          const made = await create.run(() =>
            nube.paymentLinks.create({ amountCentavos: Math.round(Number(amount) * 100), description, maxPayments: unlimited ? null : 1 }),
          );
          if (made) {
            setDescription('');
            pages.reset();
            links.reload();
          }
        }}
      >
        <h2>New payment link</h2>
        <label for="pay-amount">Amount (MXN)</label>
        <input id="pay-amount" type="number" min="10" step="0.01" required value={amount} onInput={(e) => setAmount(e.currentTarget.value)} />
        <label for="pay-description">What it is for (the payer sees it)</label>
        <input id="pay-description" required maxLength={500} value={description} onInput={(e) => setDescription(e.currentTarget.value)} aria-describedby="pay-error" />
        <label class="check">
          <input type="checkbox" checked={unlimited} onChange={(e) => setUnlimited(e.currentTarget.checked)} />
          Takes any number of payments (otherwise one)
        </label>
        <button type="submit" disabled={create.busy}>
          Create link
        </button>
        <ErrorText error={create.error} id="pay-error" />
      </form>
      <ErrorText error={links.error ?? act.error} />
      <ListTable caption="Payment links" headers={['Description', 'Amount', 'Payments', 'Status', 'Link', '']}>
        {links.data?.items.map((l) => (
          <tr key={l.id}>
            <td class="wrap">{l.description}</td>
            <td>{mxn(l.amountCentavos)}</td>
            <td>
              {l.paymentsCount}
              {l.maxPayments === null ? '' : ` of ${l.maxPayments}`}
            </td>
            <td>{l.status}</td>
            <td class="wrap">
              <a href={l.url} target="_blank" rel="noreferrer">
                {l.url}
              </a>
            </td>
            <td class="actions">
              <button type="button" aria-expanded={selected === l.id} onClick={() => setSelected(selected === l.id ? null : l.id)}>
                Payments
              </button>
              <ConfirmButton
                question={`Delete the link for "${l.description}"? Its page stops taking payments at once.`}
                label={`Delete the link for ${l.description}`}
                onConfirm={async () => {
                  await act.run(() => nube.paymentLinks.delete(l.id));
                  links.reload();
                }}
              >
                Delete
              </ConfirmButton>
            </td>
          </tr>
        ))}
      </ListTable>
      {pages.pager(links.data)}
      {selected && <Payments linkId={selected} />}
    </Page>
  );
}
