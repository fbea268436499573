// The shell of the console: sign-in, the navigation and which page shows (from the URL under /console).
import { useEffect, useState } from 'preact/hooks';
import { nube, signIn, signOut } from './api.js';
import { AgentsPage } from './pages/agents.js';
import { ApiKeysPage } from './pages/api-keys.js';
import { AuditPage } from './pages/audit.js';
import { DatabasesPage } from './pages/databases.js';
import { DatasetsPage } from './pages/datasets.js';
import { DocumentsPage } from './pages/documents.js';
import { DomainsPage } from './pages/domains.js';
import { FilesPage } from './pages/files.js';
import { FleetPage } from './pages/fleet.js';
import { FormsPage } from './pages/forms.js';
import { MachinesPage } from './pages/machines.js';
import { OverviewPage } from './pages/overview.js';
import { PaymentsPage } from './pages/payments.js';
import { SandboxesPage } from './pages/sandboxes.js';
import { WebPage } from './pages/web.js';
import { WebhooksPage } from './pages/webhooks.js';
import { ErrorText } from './ui.js';

const PAGES = [
  { path: 'overview', title: 'Overview', view: OverviewPage },
  { path: 'sandboxes', title: 'Sandboxes', view: SandboxesPage },
  { path: 'databases', title: 'Databases', view: DatabasesPage },
  { path: 'files', title: 'Files', view: FilesPage },
  { path: 'agents', title: 'Agents', view: AgentsPage },
  { path: 'fleet', title: 'Fleet broadcasts', view: FleetPage },
  { path: 'machines', title: 'Machines', view: MachinesPage },
  { path: 'documents', title: 'Documents', view: DocumentsPage },
  { path: 'domains', title: 'Domains', view: DomainsPage },
  { path: 'forms', title: 'Forms', view: FormsPage },
  { path: 'webhooks', title: 'Webhooks', view: WebhooksPage },
  { path: 'web', title: 'Web', view: WebPage },
  { path: 'datasets', title: 'Datasets', view: DatasetsPage },
  { path: 'payments', title: 'Payment links', view: PaymentsPage },
  { path: 'keys', title: 'API keys', view: ApiKeysPage },
  { path: 'audit', title: 'Audit log', view: AuditPage },
] as const;

function currentPath(): string[] {
  return location.pathname.replace(/^\/console\/?/, '').split('/').filter(Boolean);
}

export function navigate(to: string): void {
  history.pushState(null, '', `/console/${to}`);
  dispatchEvent(new PopStateEvent('popstate'));
}

function useRoute(): string[] {
  const [path, setPath] = useState(currentPath());
  useEffect(() => {
    const on = () => setPath(currentPath());
    addEventListener('popstate', on);
    return () => removeEventListener('popstate', on);
  }, []);
  return path;
}

function SignIn({ onDone }: { onDone: () => void }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  return (
    <main class="signin">
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          setBusy(true);
          setError(null);
          try {
            await signIn(key.trim());
            setKey('');
            onDone();
          } catch (err) {
            setError((err as Error).message);
          } finally {
            setBusy(false);
          }
        }}
      >
        <h1>nube console</h1>
        <p>Sign in with an owner API key. It is exchanged for a session cookie and not kept in this browser.</p>
        <label for="key">API key</label>
        <input id="key" name="key" type="password" autocomplete="off" required value={key} onInput={(e) => setKey(e.currentTarget.value)} aria-describedby="signin-error" placeholder="nube_sk_live_…" />
        <button type="submit" disabled={busy}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
        <ErrorText error={error} id="signin-error" />
      </form>
    </main>
  );
}

export function App() {
  const [state, setState] = useState<'checking' | 'out' | 'in'>('checking');
  const [account, setAccount] = useState<{ name: string; plan: string } | null>(null);
  const [menu, setMenu] = useState(false);
  const route = useRoute();
  const check = () =>
    nube.account.get().then(
      (a) => {
        setAccount({ name: a.name, plan: a.plan.title });
        setState('in');
      },
      () => setState('out'),
    );
  useEffect(() => {
    void check();
  }, []);
  useEffect(() => {
    // When the first real screen is on and takes input (the speed test reads this mark).
    if (state !== 'checking' && performance.getEntriesByName('console-interactive').length === 0) performance.mark('console-interactive');
  }, [state]);
  if (state === 'checking') return <p class="loading">Loading…</p>;
  if (state === 'out') return <SignIn onDone={check} />;
  const page = PAGES.find((p) => p.path === route[0]) ?? PAGES[0];
  const View = page.view;
  return (
    <div class="layout">
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <button type="button" class="menu-toggle" aria-expanded={menu} aria-controls="nav" onClick={() => setMenu(!menu)}>
          Menu
        </button>
        <strong>nube</strong>
        <span class="who">
          {account?.name} · {account?.plan}
        </span>
        <button
          type="button"
          onClick={async () => {
            await signOut();
            setState('out');
          }}
        >
          Sign out
        </button>
      </header>
      <nav id="nav" class={menu ? 'open' : ''} aria-label="Sections">
        <ul>
          {PAGES.map((p) => (
            <li key={p.path}>
              <a
                href={`/console/${p.path}`}
                aria-current={p === page ? 'page' : undefined}
                onClick={(e) => {
                  e.preventDefault();
                  setMenu(false);
                  navigate(p.path);
                }}
              >
                {p.title}
              </a>
            </li>
          ))}
        </ul>
      </nav>
      <main id="main" tabIndex={-1}>
        <View key={route.join('/')} sub={route.slice(1)} />
      </main>
    </div>
  );
}
