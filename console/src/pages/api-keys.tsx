import { useState } from 'preact/hooks';
import { nube } from '../api.js';
import { ConfirmButton, ErrorText, ListTable, Page, ShownOnce, useAction, useLoad, usePaged } from '../ui.js';

type Caps = { aiCredits?: number; webQueries?: number; llmTokens?: number; sandboxCpuSeconds?: number };
type CapName = keyof Caps;

/** The caps a key may carry, in the words the form shows. */
const CAPS: { name: CapName; label: string; unit: string }[] = [
  { name: 'aiCredits', label: 'AI credits', unit: 'credits' },
  { name: 'webQueries', label: 'Web queries', unit: 'queries' },
  { name: 'llmTokens', label: 'LLM tokens', unit: 'tokens' },
  { name: 'sandboxCpuSeconds', label: 'Sandbox CPU seconds', unit: 'CPU s' },
];

/** What a key reaches, in a line: its scopes and the resources it is narrowed to. */
function scopeText(k: { scopes: string[] | null; resourceIds: string[] | null; holder: string | null }): string {
  if (!k.scopes) return 'Full access';
  const parts = [k.scopes.join(', ')];
  if (k.resourceIds) parts.push(`only ${k.resourceIds.join(', ')}`);
  if (k.holder) parts.push(`held by ${k.holder}`);
  return parts.join('; ');
}

/** Its other limits: expiry, monthly caps, source addresses. */
function limitsText(k: { expiresAt: string | null; caps: Caps | null; allowedIps: string[] | null }): string {
  const parts: string[] = [];
  if (k.expiresAt) parts.push(`expires ${new Date(k.expiresAt).toLocaleString()}`);
  for (const c of CAPS) {
    const v = k.caps?.[c.name];
    if (v !== undefined) parts.push(`${v.toLocaleString()} ${c.unit}/month`);
  }
  if (k.allowedIps) parts.push(`from ${k.allowedIps.join(', ')}`);
  return parts.join('; ') || '—';
}

export function ApiKeysPage(_: { sub: string[] }) {
  const keys = useLoad(() => nube.account.keys.list());
  const catalog = useLoad(() => nube.account.scopes());
  const [name, setName] = useState('');
  const [scoped, setScoped] = useState(false);
  const [scopes, setScopes] = useState<string[]>([]);
  const [expires, setExpires] = useState('');
  const [caps, setCaps] = useState<Partial<Record<CapName, string>>>({});
  const [ips, setIps] = useState('');
  const [secret, setSecret] = useState<string | null>(null);
  const create = useAction();
  const revoke = useAction();
  const { rows, pager } = usePaged(keys.data?.items);
  const toggle = (scope: string, on: boolean) => setScopes(on ? [...scopes, scope] : scopes.filter((s) => s !== scope));
  const body = () => {
    if (!scoped) return { name: name || 'api' };
    const capsOut: Caps = {};
    for (const c of CAPS) {
      const v = caps[c.name]?.trim();
      // Sent as typed: the API answers 400 for what is not a whole number, and the form shows why.
      if (v) capsOut[c.name] = Number(v);
    }
    const allowed = ips.split(/[\s,]+/).filter(Boolean);
    return {
      name: name || 'api',
      scopes,
      ...(expires ? { expiresAt: new Date(expires).toISOString() } : {}),
      ...(Object.keys(capsOut).length ? { caps: capsOut } : {}),
      ...(allowed.length ? { allowedIps: allowed } : {}),
    };
  };
  return (
    <Page title="API keys">
      <form
        class="card"
        onSubmit={async (e) => {
          e.preventDefault();
          const k = await create.run(() => nube.account.keys.create(body()));
          if (k) {
            setSecret(k.secret);
            setName('');
            setScopes([]);
            setExpires('');
            setCaps({});
            setIps('');
            keys.reload();
          }
        }}
      >
        <h2>New key</h2>
        <div class="row">
          <label for="key-name">Name</label>
          <input id="key-name" value={name} onInput={(e) => setName(e.currentTarget.value)} placeholder="api" />
        </div>
        <fieldset>
          <legend>Access</legend>
          <label class="check">
            <input type="radio" name="key-access" checked={!scoped} onChange={() => setScoped(false)} />
            Full access (every right of the account)
          </label>
          <label class="check">
            <input type="radio" name="key-access" checked={scoped} onChange={() => setScoped(true)} />
            Scoped (only what is ticked below)
          </label>
        </fieldset>
        {scoped && (
          <>
            <ErrorText error={catalog.error} />
            <table class="scopes">
              <caption>Scopes: an area's write includes its reads</caption>
              <thead>
                <tr>
                  <th scope="col">Area</th>
                  <th scope="col">Read</th>
                  <th scope="col">Write</th>
                </tr>
              </thead>
              <tbody>
                {(catalog.data?.areas ?? []).map((a) => (
                  <tr key={a.area}>
                    <th scope="row">{a.area}</th>
                    {(['read', 'write'] as const).map((acc) => {
                      const scope = `${a.area}:${acc}`;
                      const ops = a[acc];
                      return (
                        <td key={acc}>
                          {ops.length > 0 && (
                            <label class="check" title={ops.join(', ')}>
                              <input type="checkbox" aria-label={scope} checked={scopes.includes(scope)} onChange={(e) => toggle(scope, e.currentTarget.checked)} />
                              {ops.length} {ops.length === 1 ? 'operation' : 'operations'}
                            </label>
                          )}
                        </td>
                      );
                    })}
                  </tr>
                ))}
              </tbody>
            </table>
            <div class="row">
              <label for="key-expires">Expires</label>
              <input id="key-expires" type="datetime-local" value={expires} onInput={(e) => setExpires(e.currentTarget.value)} />
            </div>
            <fieldset>
              <legend>Monthly caps (empty: none)</legend>
              <div class="caps">
                {CAPS.map((c) => (
                  <label key={c.name} class="cap">
                    {c.label}
                    <input
                      type="number"
                      min={0}
                      step={1}
                      inputMode="numeric"
                      value={caps[c.name] ?? ''}
                      onInput={(e) => setCaps({ ...caps, [c.name]: e.currentTarget.value })}
                    />
                  </label>
                ))}
              </div>
            </fieldset>
            <div class="row">
              <label for="key-ips">Allowed addresses</label>
              <input id="key-ips" value={ips} onInput={(e) => setIps(e.currentTarget.value)} placeholder="203.0.113.7, 10.0.0.0/8 (empty: any)" />
            </div>
          </>
        )}
        <button type="submit" disabled={create.busy || (scoped && scopes.length === 0)}>
          Create key
        </button>
        <ErrorText error={create.error} />
      </form>
      <ShownOnce text="Copy this key now: it is shown once." secret={secret} onDone={() => setSecret(null)} />
      <ErrorText error={keys.error ?? revoke.error} />
      <ListTable caption="API keys" headers={['Name', 'Key', 'Scope', 'Limits', 'Created', 'Status', '']}>
          {rows.map((k) => (
            <tr key={k.id}>
              <td>{k.name}</td>
              <td>
                <code>{k.preview}</code>
              </td>
              <td>{scopeText(k)}</td>
              <td>{limitsText(k)}</td>
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
