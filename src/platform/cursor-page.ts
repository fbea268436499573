// Lists paged by an opaque cursor over time-ordered ids (newest first): the envelope every such list
// answers, the cursor's check, and the page cut from `limit + 1` rows.
import { z } from 'zod';
import { errors } from './errors.js';
import { idCursor, idFromCursor } from './ids.js';

/** `{ items, nextCursor, hasMore }` of `item`. */
export const CursorPage = <T extends z.ZodType>(item: T) =>
  z.object({
    items: z.array(item),
    nextCursor: z.string().nullable().describe('Pass as `cursor` for the next page; null on the last page'),
    hasMore: z.boolean(),
  });

/** The id a list's `cursor` carries (undefined: the first page); 400 when it is not one of this list's. */
export function cursorAfter(cursor: string | undefined, prefix: string): string | undefined {
  if (cursor === undefined) return undefined;
  const id = idFromCursor(cursor, prefix);
  if (!id)
    throw errors.badRequest('invalid cursor', [{ path: ['cursor'], message: 'not a cursor from this list' }]);
  return id;
}

/** The page of `rows` (read as `limit + 1`, so a next page shows), each shown by `view`. */
export function pageOf<R extends { id: string }, V>(rows: R[], limit: number, view: (r: R) => V) {
  const items = rows.slice(0, limit);
  const hasMore = rows.length > limit;
  return { items: items.map(view), nextCursor: hasMore ? idCursor(items.at(-1)!.id) : null, hasMore };
}
