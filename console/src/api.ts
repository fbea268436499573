// The console talks to nube only through the public SDK, like any user: same-origin requests carry the
// HttpOnly session cookie (the key is never in the page) and the session's CSRF token, which the sign-in
// answer gave this page; the browser adds Origin to every POST. The cookie alone opens nothing: a
// browser sends it to every port of this host, the token stays in this origin's storage.
import { Nube, NubeError } from '../../packages/sdk/src/index.js';

const CSRF_KEY = 'nube.console.csrf';
const csrfToken = () => localStorage.getItem(CSRF_KEY) ?? '';

/** fetch with the session's CSRF token on requests to nube itself (never to presigned blob URLs elsewhere). */
export const apiFetch: typeof fetch = (input, init) => {
  const url = new URL(input instanceof Request ? input.url : String(input), location.href);
  if (url.origin !== location.origin || !csrfToken()) return fetch(input, init);
  const headers = new Headers(init?.headers);
  headers.set('x-nube-csrf', csrfToken());
  return fetch(input, { ...init, headers });
};

export const nube = new Nube({ baseUrl: location.origin, maxRetries: 1, fetch: apiFetch });

/** The terminal's WebSocket cannot send headers: the token goes as a subprotocol. */
export const terminalProtocols = (): string[] => (csrfToken() ? [`nube-csrf.${csrfToken()}`] : []);

/** An error from the API in words: the message, then each issue with where it points. */
export function describeError(e: unknown): string {
  if (e instanceof NubeError) {
    const body = e.body as { error?: string } | undefined;
    const base = body?.error ?? e.message;
    const issues = e.issues.map((i) => `${i.path.filter((p) => p !== 'body').join('.') || 'input'}: ${i.message}`);
    return [base, ...issues].join(' — ');
  }
  return e instanceof Error ? e.message : String(e);
}

export async function signIn(key: string): Promise<void> {
  const res = await fetch('/console/session', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ key }),
  });
  const body = (await res.json().catch(() => ({}))) as { error?: string; csrfToken?: string };
  if (!res.ok || !body.csrfToken) throw new Error(body.error ?? `sign-in failed (${res.status})`);
  localStorage.setItem(CSRF_KEY, body.csrfToken);
}

export async function signOut(): Promise<void> {
  await fetch('/console/session', { method: 'DELETE' });
  localStorage.removeItem(CSRF_KEY);
}

async function fetchBlob(path: string): Promise<{ blob: Blob; res: Response }> {
  const res = await apiFetch(path);
  if (!res.ok) {
    const body = (await res.json().catch(() => ({}))) as { error?: string };
    throw new Error(body.error ?? `${res.status} ${res.statusText}`);
  }
  return { blob: await res.blob(), res };
}

/** Saves a blob as a file through a temporary link. */
export function saveBlob(blob: Blob, name: string): void {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
}

/** Downloads an API answer as a file (a plain link would carry the cookie without the token: refused). */
export async function download(path: string, fallbackName: string): Promise<void> {
  const { blob, res } = await fetchBlob(path);
  const named = /filename="?([^";]+)"?/.exec(res.headers.get('content-disposition') ?? '')?.[1];
  saveBlob(blob, named ?? fallbackName);
}

/** Opens an API answer (a PDF) in a new tab: the tab opens at the click, its content once fetched. */
export async function openInTab(path: string): Promise<void> {
  const tab = window.open('', '_blank');
  if (tab) tab.opener = null;
  try {
    const { blob } = await fetchBlob(path);
    const url = URL.createObjectURL(blob);
    if (tab) tab.location.href = url;
    else location.href = url;
  } catch (e) {
    tab?.close();
    throw e;
  }
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KB', 'MB', 'GB', 'TB'];
  let v = n;
  let i = -1;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}
