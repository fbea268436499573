import { useState } from 'preact/hooks';
import { nube } from '../api.js';
import { ConfirmButton, ErrorText, ListTable, Page, ShownOnce, useAction, useLoad, usePaged } from '../ui.js';

export function ApiKeysPage(_: { sub: string[] }) {
  const keys = useLoad(() => nube.account.keys.list());
  const [name, setName] = useState('');
  const [secret, setSecret] = useState<string | null>(null);
  const create = useAction();
  const revoke = useAction();
  const { rows, pager } = usePaged(keys.data?.items);
  return (
    <Page title="API keys">
      <form
        class="row"
        onSubmit={async (e) => {
          e.preventDefault();
          const k = await create.run(() => nube.account.keys.create({ name: name || 'api' }));
          if (k) {
            setSecret(k.secret);
            setName('');
            keys.reload();
          }
        }}
      >
        <label for="key-name">Name</label>
        <input id="key-name" value={name} onInput={(e) => setName(e.currentTarget.value)} placeholder="api" />
        <button type="submit" disabled={create.busy}>
          Create key
        </button>
      </form>
      <ErrorText error={create.error} />
      <ShownOnce text="Copy this key now: it is shown once." secret={secret} onDone={() => setSecret(null)} />
      <ErrorText error={keys.error ?? revoke.error} />
      <ListTable caption="API keys" headers={['Name', 'Key', 'Created', 'Status', '']}>
          {rows.map((k) => (
            <tr key={k.id}>
              <td>{k.name}</td>
              <td>
                <code>{k.preview}</code>
              </td>
              <td>{new Date(k.createdAt).toLocaleString()}</td>
              <td>{k.revokedAt ? `revoked ${new Date(k.revokedAt).toLocaleDateString()}` : 'active'}</td>
              <td>
                {!k.revokedAt && (
                  <ConfirmButton
                    question={`Revoke ${k.name}? Programs using it stop working.`}
                    onConfirm={async () => {
                      await revoke.run(() => nube.account.keys.revoke(k.id));
                      keys.reload();
                    }}
                  >
                    Revoke
                  </ConfirmButton>
                )}
              </td>
            </tr>
          ))}
      </ListTable>
      {pager}
    </Page>
  );
}
