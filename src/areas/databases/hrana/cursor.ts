import type { HranaError, HranaStepResponse, HranaValue } from '../engine/index.js';

/**
 * Hrana 3 cursor entries (HRANA_3_SPEC.md, "Cursor entries"): a batch's results as a sequence,
 * what `/v3/cursor` streams as lines and WebSocket `fetch_cursor` hands out in chunks. The engine
 * runs the batch as a whole (under the result caps of every statement), so the entries of a cursor
 * are all there once its batch has run.
 */
export type CursorEntry =
  | { type: 'step_begin'; step: number; cols: { name: string; decltype: string | null }[] }
  | { type: 'step_end'; affected_row_count: number; last_insert_rowid: string | null }
  | { type: 'step_error'; step: number; error: HranaError }
  | { type: 'row'; row: HranaValue[] }
  | { type: 'error'; error: HranaError };

type BatchResponse = Extract<HranaStepResponse, { type: 'batch' }>;

/** A batch step's outcome -> the cursor's entries; a failure of the whole batch is one `error` entry. */
export function cursorEntries(
  outcome: { type: 'ok'; response: unknown } | { type: 'error'; error: HranaError },
): CursorEntry[] {
  if (outcome.type === 'error') return [{ type: 'error', error: outcome.error }];
  const { step_results, step_errors } = (outcome.response as BatchResponse).result;
  const out: CursorEntry[] = [];
  step_results.forEach((r, step) => {
    const error = step_errors[step];
    if (error) {
      out.push({ type: 'step_error', step, error });
      return;
    }
    if (!r) return; // skipped: its condition did not hold
    out.push({ type: 'step_begin', step, cols: r.cols });
    for (const row of r.rows) out.push({ type: 'row', row });
    out.push({
      type: 'step_end',
      affected_row_count: r.affected_row_count,
      last_insert_rowid: r.last_insert_rowid,
    });
  });
  return out;
}
