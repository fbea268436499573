// Small pieces every page uses: loading a resource with its error, an error in words, a pager, a bar.
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { describeError } from './api.js';

export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []) {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  /** Resolves once the new data (or error) is in place. */
  const reload = useCallback((): Promise<void> => {
    setLoading(true);
    return load().then(
      (d) => {
        setData(d);
        setError(null);
        setLoading(false);
      },
      (e: unknown) => {
        setError(describeError(e));
        setLoading(false);
      },
    );
    // biome-ignore lint/correctness/useExhaustiveDependencies: callers pass their own deps
  }, deps);
  useEffect(() => {
    reload();
  }, [reload]);
  return { data, error, loading, reload, setData };
}

/** Runs an action, keeping its error (in words) to show beside the control that caused it. */
export function useAction() {
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const run = async <T,>(fn: () => Promise<T>): Promise<T | undefined> => {
    setBusy(true);
    setError(null);
    try {
      return await fn();
    } catch (e) {
      setError(describeError(e));
      return undefined;
    } finally {
      setBusy(false);
    }
  };
  return { error, busy, run, setError };
}

export function ErrorText({ error, id }: { error: string | null | undefined; id?: string }) {
  if (!error) return null;
  return (
    <p class="error" role="alert" id={id}>
      {error}
    </p>
  );
}

export function Page({ title, children, actions }: { title: string; children: ComponentChildren; actions?: ComponentChildren }) {
  return (
    <section aria-labelledby="page-title">
      <header class="page-head">
        <h1 id="page-title">{title}</h1>
        {actions}
      </header>
      {children}
    </section>
  );
}

export const PAGE_SIZE = 20;

/** Client-side pages of a list the API returns whole. */
export function usePaged<T>(items: T[] | undefined, size = PAGE_SIZE) {
  const [page, setPage] = useState(0);
  const all = items ?? [];
  const pages = Math.max(1, Math.ceil(all.length / size));
  const current = Math.min(page, pages - 1);
  return { rows: all.slice(current * size, current * size + size), pager: <Pager page={current} pages={pages} onPage={setPage} /> };
}

export function Pager({ page, pages, onPage, hasMore }: { page: number; pages?: number; onPage: (p: number) => void; hasMore?: boolean }) {
  const canNext = pages !== undefined ? page < pages - 1 : !!hasMore;
  if (pages === 1 && page === 0) return null;
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" disabled={page === 0} onClick={() => onPage(page - 1)}>
        ← Previous
      </button>
      <span>
        Page {page + 1}
        {pages !== undefined ? ` of ${pages}` : ''}
      </span>
      <button type="button" disabled={!canNext} onClick={() => onPage(page + 1)}>
        Next →
      </button>
    </nav>
  );
}

/** A usage bar: used against the allowance, labelled for screen readers. */
export function UsageBar({ label, used, limit, format }: { label: string; used: number; limit: number | null; format: (n: number) => string }) {
  const pct = limit ? Math.min(100, (used / limit) * 100) : 0;
  return (
    <div class="usage">
      <div class="usage-label">
        <span>{label}</span>
        <span>
          {format(used)} {limit === null ? '(no limit)' : `of ${format(limit)}`}
        </span>
      </div>
      <div class="bar" role="meter" aria-label={label} aria-valuemin={0} aria-valuemax={limit ?? used} aria-valuenow={used}>
        <div class={`fill${pct > 90 ? ' hot' : ''}`} style={{ width: `${limit === null ? 0 : Math.max(pct, used > 0 ? 1 : 0)}%` }} />
      </div>
    </div>
  );
}

export function Progress({ value, label }: { value: number; label: string }) {
  return (
    <div class="progress">
      <progress max={100} value={Math.round(value * 100)} aria-label={label} />
      <span>{Math.round(value * 100)}%</span>
    </div>
  );
}

/** A short outcome in words (what an action did), announced to screen readers; nothing when null. */
export function Notice({ text }: { text: string | null }) {
  if (!text) return null;
  return (
    <p class="notice" role="status">
      {text}
    </p>
  );
}

/** A secret the API shows once (a new key, a webhook's signing secret). */
export function ShownOnce({ text, secret, onDone }: { text: string; secret: string | null; onDone: () => void }) {
  if (!secret) return null;
  return (
    <div class="notice" role="status">
      <p>{text}</p>
      <code class="secret">{secret}</code>
      <button type="button" onClick={onDone}>
        Done
      </button>
    </div>
  );
}

/** A list as a table with a caption for screen readers; an empty header is an actions column. */
export function ListTable({ caption, headers, children }: { caption: string; headers: string[]; children: ComponentChildren }) {
  return (
    <table>
      <caption class="sr-only">{caption}</caption>
      <thead>
        <tr>
          {headers.map((h, i) => (
            // biome-ignore lint/suspicious/noArrayIndexKey: headers are positional
            <th key={i}>{h}</th>
          ))}
        </tr>
      </thead>
      <tbody>{children}</tbody>
    </table>
  );
}

/** Pages of a list the API pages with cursors: the cursor of each page seen, to go back and forth. */
export function useCursorPages() {
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const [page, setPage] = useState(0);
  return {
    page,
    cursor: cursors[page],
    reset: () => {
      setCursors([undefined]);
      setPage(0);
    },
    pager: (data: { hasMore: boolean; nextCursor: string | null } | undefined) => (
      <Pager
        page={page}
        hasMore={data?.hasMore}
        onPage={(p) => {
          if (p > page && data?.nextCursor) setCursors([...cursors.slice(0, p), data.nextCursor]);
          setPage(p);
        }}
      />
    ),
  };
}

/** A button that asks `question` first and runs `onConfirm` only when the user agrees. */
export function ConfirmButton({
  question,
  onConfirm,
  disabled,
  label,
  children,
}: { question: string; onConfirm: () => Promise<unknown>; disabled?: boolean; /** The accessible name, when the text alone is too short. */ label?: string; children: ComponentChildren }) {
  return (
    <button
      type="button"
      disabled={disabled}
      aria-label={label}
      onClick={async () => {
        if (confirm(question)) await onConfirm();
      }}
    >
      {children}
    </button>
  );
}
