// HLS for videos (Mega and Tera, issue 34 item 5): `POST /files/{id}/hls` (or `hls: true` at upload)
// starts a durable job that copies the file to a scratch directory, checks it is a video (ffprobe),
// makes every rendition in one ffmpeg run (hls-transcode.ts) and stores the playlists and segments in
// the file's region under `hls/<owner>/<file>/`, counted in the owner's storage. They are served with the
// file's own access rules: a public file's at `/public/hls/<id>/master.m3u8`, a private file's at a
// signed `/hls/<token>/master.m3u8` valid an hour, whose token also opens every playlist and segment
// below it (players resolve their URIs relative to the playlist). Range and caching as for files.
import { createReadStream, createWriteStream } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { type BlobHttpResponse, type BlobStores, type RequestHeaders, serveBlob } from '../../blob/index.js';
import type { Principal } from '../../platform/auth.js';
import { hmacHex, safeEqual } from '../../platform/crypto.js';
import { errors } from '../../platform/errors.js';
import { cutShort, type JobContext, type JobQueue } from '../../platform/jobs-contract.js';
import { PLANS } from '../../platform/plans.js';
import type { Spool } from '../../platform/spool.js';
import { blobKey } from './blobs.js';
import type { HlsRepo, HlsRow } from './hls-repo.js';
import { NotAVideo, probe, type Rendition, renditionsFor, transcode } from './hls-transcode.js';
import type { FileRow, FilesRepo } from './repo.js';
import type { PlanOf } from './transfers.js';

export const JOB_HLS = 'files.hls';
const URL_SECONDS = 3600;
const TYPES: Record<string, string> = { '.m3u8': 'application/vnd.apple.mpegurl', '.ts': 'video/mp2t' };

export interface HlsDeps {
  files: FilesRepo;
  stores: BlobStores;
  jobs: JobQueue;
  spool: Spool;
  planOf: PlanOf;
  publicUrl: () => string;
  secret: string;
  now: () => number;
  log: { warn(o: object, m: string): void };
}

const prefix = (ownerId: string, fileId: string) => `hls/${ownerId}/${fileId}/`;

export class FileHls {
  private readonly key: string;

  constructor(
    readonly repo: HlsRepo,
    private readonly d: HlsDeps,
  ) {
    this.key = hmacHex(d.secret, 'nube-file-hls');
  }

  assertPlan(p: Principal): void {
    const plan = PLANS[p.plan];
    if (!plan.includes.hlsStreaming) {
      throw errors.paymentRequired(
        `HLS streaming is included in the Mega and Tera plans, not in ${plan.title}`,
        'PlanUpgradeRequired',
      );
    }
  }

  private async ownedDone(p: Principal, fileId: string): Promise<FileRow> {
    const row = await this.d.files.owned(p.ownerId, fileId);
    if (!row) throw errors.notFound('file');
    if (row.status !== 'DONE')
      throw errors.conflict('the file is in the trash; restore it first', 'FileDeleted');
    return row;
  }

  view(file: Pick<FileRow, 'id' | 'owner_id' | 'access'>, h: HlsRow | undefined) {
    const ready = h?.status === 'ready';
    return {
      fileId: file.id,
      status: h?.status ?? ('none' as const),
      progress: h ? Number(h.progress) : 0,
      error: h?.error ?? null,
      bytes: ready ? Number(h.bytes) : 0,
      renditions: ready ? (JSON.parse(h.renditions) as Rendition[]) : [],
      playlistUrl: ready ? this.playlistUrl(file) : null,
      playlistUrlExpiresAt:
        ready && file.access !== 'public' ? new Date(this.d.now() + URL_SECONDS * 1000).toISOString() : null,
    };
  }

  private playlistUrl(file: Pick<FileRow, 'id' | 'access'>): string {
    const base = this.d.publicUrl();
    if (file.access === 'public') return `${base}/public/hls/${file.id}/master.m3u8`;
    const exp = Math.floor(this.d.now() / 1000) + URL_SECONDS;
    return `${base}/hls/${file.id}.${exp}.${this.sign(file.id, exp)}/master.m3u8`;
  }

  private sign(fileId: string, exp: number): string {
    return hmacHex(this.key, `${fileId}.${exp}`).slice(0, 32);
  }

  /** POST /files/{id}/hls: starts the job (idempotent: one that runs or is ready is answered as it is). */
  async start(p: Principal, fileId: string) {
    this.assertPlan(p);
    const file = await this.ownedDone(p, fileId);
    if (await this.repo.request(file.id, file.owner_id, file.region, 'processing'))
      await this.enqueue(file.id);
    return this.view(file, await this.repo.get(file.id));
  }

  /** `hls: true` at POST /files: checked now, started when the bytes arrive. */
  async requestAtUpload(p: Principal, file: Pick<FileRow, 'id' | 'owner_id' | 'region'>): Promise<void> {
    this.assertPlan(p);
    await this.repo.request(file.id, file.owner_id, file.region, 'requested');
  }

  /** After an upload: the HLS it asked for starts. */
  async uploaded(fileId: string): Promise<void> {
    if (await this.repo.start(fileId)) await this.enqueue(fileId);
  }

  private enqueue(fileId: string): Promise<string> {
    return this.d.jobs.enqueue(JOB_HLS, { fileId }, { key: `${JOB_HLS}:${fileId}` });
  }

  async status(p: Principal, fileId: string) {
    const file = await this.d.files.owned(p.ownerId, fileId);
    if (!file) throw errors.notFound('file');
    return this.view(file, await this.repo.get(file.id));
  }

  async remove(p: Principal, fileId: string) {
    const file = await this.d.files.owned(p.ownerId, fileId);
    if (!file) throw errors.notFound('file');
    await this.purge(file.id);
    return { ok: true as const };
  }

  /** The renditions go (the file was purged, or the owner removed them): row first, then the objects. */
  async purge(fileId: string): Promise<void> {
    const row = await this.repo.remove(fileId);
    if (!row) return;
    await this.d.jobs.cancel({ key: `${JOB_HLS}:${fileId}` });
    await this.deleteObjects(row.region, prefix(row.owner_id, fileId));
  }

  private async deleteObjects(region: string, keyPrefix: string): Promise<void> {
    const store = this.d.stores.at(region);
    for await (const o of store.list(keyPrefix)) await store.delete(o.key);
  }

  /** The job. A file that is not a video fails it in words; nube's own stop hands it back. */
  async run(fileId: string, job: JobContext): Promise<void> {
    const h = await this.repo.get(fileId);
    const file = await this.d.files.byId(fileId);
    if (h?.status !== 'processing') return;
    if (!file || file.status !== 'DONE') {
      await this.repo.fail(fileId, 'the file is no longer there (deleted before its renditions were made)');
      return;
    }
    const scratch = await this.d.spool.scratch();
    try {
      const input = join(scratch.dir, 'source');
      const got = await this.d.stores.at(file.region).get(blobKey(file.access, file.owner_id, file.id));
      await pipeline(got.stream, createWriteStream(input));
      const p = await probe(input, job.signal);
      const renditions = renditionsFor(p);
      const out = join(scratch.dir, 'out');
      let reported = 0;
      await transcode(input, out, p, renditions, job.signal, (f) => {
        if (f - reported >= 0.02) {
          reported = f;
          void this.repo.progress(fileId, f).catch(() => {});
        }
      });
      // A run cut and run again left objects of its own: the prefix starts empty.
      const keyPrefix = prefix(file.owner_id, file.id);
      await this.deleteObjects(h.region, keyPrefix);
      const store = this.d.stores.at(h.region);
      let bytes = 0;
      for (const path of await walk(out)) {
        const rel = relative(out, path);
        const size = (await stat(path)).size;
        await store.put(`${keyPrefix}${rel}`, createReadStream(path), {
          contentType: TYPES[rel.slice(rel.lastIndexOf('.'))] ?? 'application/octet-stream',
          expectedSize: size,
        });
        bytes += size;
      }
      if (!(await this.repo.ready({ file_id: fileId, owner_id: file.owner_id }, bytes, renditions)))
        await this.deleteObjects(h.region, keyPrefix);
    } catch (e) {
      if (cutShort(job)) throw e;
      if (e instanceof NotAVideo) {
        await this.repo.fail(fileId, e.message);
        return;
      }
      throw e;
    } finally {
      await scratch.remove();
    }
  }

  /** GET of `/hls/<token>/<path>`: the token names the file and when it ends. */
  async serveSigned(
    token: string,
    path: string,
    headers: RequestHeaders,
    method: string,
  ): Promise<BlobHttpResponse> {
    const [fileId, expRaw, sig] = token.split('.');
    const exp = Number(expRaw);
    if (!fileId || !sig || !Number.isInteger(exp) || !safeEqual(sig, this.sign(fileId, exp)))
      throw errors.forbidden('this HLS link is not valid', 'BadSignature');
    if (exp * 1000 < this.d.now())
      throw errors.forbidden(
        'this HLS link has expired (links last an hour; GET /files/{id}/hls gives a new one)',
        'Expired',
      );
    return this.serve(fileId, path, headers, method, 'private, max-age=3600');
  }

  /** GET of `/public/hls/<id>/<path>`: a public file's renditions; a private file's are the same 404 as none. */
  async servePublic(
    fileId: string,
    path: string,
    headers: RequestHeaders,
    method: string,
  ): Promise<BlobHttpResponse> {
    const file = await this.d.files.byId(fileId);
    if (file?.access !== 'public') throw errors.notFound('file');
    return this.serve(fileId, path, headers, method, 'public, max-age=3600');
  }

  private async serve(
    fileId: string,
    path: string,
    headers: RequestHeaders,
    method: string,
    cacheControl: string,
  ): Promise<BlobHttpResponse> {
    const [file, h] = await Promise.all([this.d.files.byId(fileId), this.repo.get(fileId)]);
    if (file?.status !== 'DONE' || h?.status !== 'ready') throw errors.notFound('file');
    if (!/^(master\.m3u8|v\d+\/(index\.m3u8|seg_\d+\.ts))$/.test(path)) throw errors.notFound('file');
    const out = await serveBlob(
      this.d.stores.at(h.region),
      `${prefix(file.owner_id, file.id)}${path}`,
      headers,
      method,
    );
    // A VOD rendition never changes once made: caches may keep it (the signed URL's own life for a private one).
    out.headers['cache-control'] = cacheControl;
    out.headers['access-control-allow-origin'] = '*';
    return out;
  }
}

async function walk(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await walk(p)));
    else out.push(p);
  }
  return out.sort();
}
