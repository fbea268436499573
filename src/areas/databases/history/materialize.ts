// Builds a database file from its history: a generation's snapshot, then its segments in order, each
// applied page by page (the frames as SQLite wrote them). Used by failover, drain and restores.
import { createWriteStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import { createGunzip, gunzip as gunzipCb } from 'node:zlib';
import type { BlobStore } from '../../../blob/index.js';
import type { GenerationRow, HistoryRepo, SegmentRow } from './history-repo.js';
import { applyFrames, WAL_HEADER_BYTES } from './wal-file.js';

const gunzip = promisify(gunzipCb);

/** Up to a named object (the row's head), or up to a time (every segment read at or before it). */
export type HistoryPoint = { key: string } | { at: number };

export interface Materialized {
  /** When the last segment applied was read: the point the file is at. */
  at: number;
  generation: GenerationRow;
  /** The last segment applied: shipping from the restored file may continue after it. */
  last: SegmentRow;
  segments: number;
  /** Compressed bytes downloaded. */
  bytes: number;
}

export class HistoryUnavailable extends Error {}

/** One generation's part of a restore: its segments to apply, in order. */
export interface RestoreStep {
  gen: GenerationRow;
  segs: SegmentRow[];
}

/**
 * The generations and segments that make up `point`, oldest first (a generation begun by a restore
 * stands on the one it restored from), or null when the history does not reach it.
 */
export async function planRestore(repo: HistoryRepo, dbId: string, point: HistoryPoint): Promise<RestoreStep[] | null> {
  let top: RestoreStep;
  if ('key' in point) {
    const seg = await repo.segmentByKey(point.key);
    if (!seg || seg.database_id !== dbId) return null;
    const gen = await repo.generation(seg.generation_id);
    if (!gen) return null;
    top = { gen, segs: (await repo.segments(gen.id)).filter((s) => s.seq <= seg.seq) };
  } else {
    const gen = (await repo.generations(dbId)).filter((g) => g.started_at <= point.at).at(-1);
    if (!gen) return null;
    top = { gen, segs: (await repo.segments(gen.id)).filter((s) => s.at <= point.at) };
  }
  const steps = [top];
  for (let g = top.gen; g.base_generation_id !== null; ) {
    const base = await repo.generation(g.base_generation_id);
    if (!base || steps.length > 1000) return null;
    const upTo = g.base_seq ?? -1;
    steps.unshift({ gen: base, segs: (await repo.segments(base.id)).filter((s) => s.seq <= upTo) });
    g = base;
  }
  return steps;
}

/** Writes the database as of `point` to `target` (a path in the engine's staging directory). */
export async function materialize(store: BlobStore, repo: HistoryRepo, dbId: string, point: HistoryPoint, target: string): Promise<Materialized> {
  const steps = await planRestore(repo, dbId, point);
  if (!steps || steps.some((st) => st.segs[0]?.seq !== 0)) throw new HistoryUnavailable(`the history of ${dbId} does not reach that point`);
  const root = (steps[0] as RestoreStep).gen;
  const snap = await store.get(root.snapshot_key);
  let bytes = snap.contentLength;
  await pipeline(snap.stream, createGunzip(), createWriteStream(target));
  // Segments are fetched a few at a time ahead of applying, in order.
  const all = steps.flatMap((st) => st.segs);
  const fetches = new Map<number, Promise<Buffer>>();
  const fetchAt = (i: number) => {
    const s = all[i];
    if (!s || fetches.has(i)) return;
    fetches.set(
      i,
      store.get(s.key).then(async (g) => gunzip(Buffer.concat(await g.stream.toArray()))),
    );
  };
  const fh = await open(target, 'r+');
  try {
    let prev: SegmentRow | undefined;
    for (let i = 0; i < all.length; i++) {
      for (let j = i; j < i + 8; j++) fetchAt(j);
      const s = all[i] as SegmentRow;
      // Each generation's chain starts again at its segment 0.
      if (s.seq === 0) prev = undefined;
      if (prev && !(s.wal_index === prev.wal_index ? s.offset_start === prev.offset_end : s.wal_index === prev.wal_index + 1 && s.offset_start === WAL_HEADER_BYTES)) {
        throw new HistoryUnavailable(`segment ${s.key} does not follow ${prev.key}`);
      }
      const frames = await (fetches.get(i) as Promise<Buffer>);
      fetches.delete(i);
      bytes += s.bytes;
      await applyFrames(fh, root.page_size, frames);
      prev = s;
    }
    await fh.sync();
  } finally {
    await fh.close();
    // Prefetches past a failure are dropped.
    for (const f of fetches.values()) f.catch(() => {});
  }
  const topStep = steps[steps.length - 1] as RestoreStep;
  const gen = topStep.gen;
  const segs = topStep.segs;
  const last = segs[segs.length - 1] as SegmentRow;
  return { at: last.at, generation: gen, last, segments: all.length, bytes };
}

/**
 * Brings a file built by `materialize` (at `built`) forward to the segment `key` of the same generation:
 * only the segments after `built.last` are fetched and applied (the drain's pause). Null when `key` is
 * not further along that generation (the caller builds from scratch).
 */
export async function extend(store: BlobStore, repo: HistoryRepo, file: string, built: Materialized, key: string): Promise<Materialized | null> {
  const seg = await repo.segmentByKey(key);
  if (!seg || seg.generation_id !== built.generation.id || seg.seq < built.last.seq) return null;
  const segs = (await repo.segments(seg.generation_id)).filter((s) => s.seq > built.last.seq && s.seq <= seg.seq);
  const fh = await open(file, 'r+');
  let prev = built.last;
  let bytes = built.bytes;
  try {
    for (const s of segs) {
      if (!(s.wal_index === prev.wal_index ? s.offset_start === prev.offset_end : s.wal_index === prev.wal_index + 1 && s.offset_start === WAL_HEADER_BYTES)) {
        throw new HistoryUnavailable(`segment ${s.key} does not follow ${prev.key}`);
      }
      const frames = await gunzip(Buffer.concat(await (await store.get(s.key)).stream.toArray()));
      await applyFrames(fh, built.generation.page_size, frames);
      bytes += s.bytes;
      prev = s;
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
  return { at: prev.at, generation: built.generation, last: prev, segments: built.segments + segs.length, bytes };
}
