// The console talks to nube only through the public SDK, like any user: same-origin requests carry the
// HttpOnly session cookie (the key is never in the page), and the browser adds Origin to every POST.
import { Nube, NubeError } from '../../packages/sdk/src/index.js';

export const nube = new Nube({ baseUrl: location.origin, maxRetries: 1 });

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
  if (!res.ok) {
    const body = (await res.json().catch(() => ({}))) as { error?: string };
    throw new Error(body.error ?? `sign-in failed (${res.status})`);
  }
}

export async function signOut(): Promise<void> {
  await fetch('/console/session', { method: 'DELETE' });
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
