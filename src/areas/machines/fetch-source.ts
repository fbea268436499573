// Fetching a launch's source on the host, only through the outbound client (pinned DNS, private
// addresses refused unless allowed, every redirect checked): an archive's bytes, or a git repository
// over smart HTTP (protocol v0: the ref advertisement, then one upload-pack request for a pack). The
// bytes go to nube's spool on disk under a size cap (never whole into memory) until they are written
// into the box; the pack is unpacked and checked out inside the box.
import { errors } from '../../platform/errors.js';
import type { OutboundBody, OutboundClient } from '../../platform/outbound.js';
import { OutboundBlockedError, OutboundError } from '../../platform/outbound-address.js';
import type { Spool, SpooledFile } from '../../platform/spool.js';

export const MAX_SOURCE_BYTES = 200 * 1024 * 1024;
/** A repository's ref advertisement is read into memory: it is text, one line per ref. */
const MAX_REFS_BYTES = 32 * 1024 * 1024;
const TIMEOUT_MS = 120_000;

export type Source = { kind: 'archive'; url: string } | { kind: 'git'; url: string; ref: string | null };
export interface Fetched {
  kind: 'zip' | 'tar.gz' | 'tar' | 'git-pack';
  /** The bytes as received, in the spool: the caller removes it once they are in the box. */
  file: SpooledFile;
  /** Where the bytes to deliver start in the file (a git answer's pack follows its NAK line). */
  start: number;
  /** The commit a git fetch checked out. */
  commit?: string;
}

const tooLarge = (what: string, max: number) => () =>
  errors.badRequest(`${what} is larger than ${max / 1024 / 1024} MB`, undefined, 'SourceTooLarge');

async function readAll(body: OutboundBody, what: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_REFS_BYTES) throw tooLarge(what, MAX_REFS_BYTES)();
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** Outbound failures as 400s the caller can act on (a refused address says so). */
function refused(e: unknown, url: string, field: string): never {
  if (e instanceof OutboundBlockedError) {
    throw errors.validation([{ path: ['body', field], message: `refused: ${url} resolves to an address nube may not reach (${e.message})` }]);
  }
  if (e instanceof OutboundError) throw errors.badRequest(`could not fetch ${url}: ${e.message}`, undefined, 'SourceUnreachable');
  throw e;
}

export async function fetchSource(outbound: OutboundClient, spool: Spool, src: Source): Promise<Fetched> {
  return src.kind === 'archive' ? fetchArchive(outbound, spool, src.url) : fetchGit(outbound, spool, src.url, src.ref);
}

async function fetchArchive(outbound: OutboundClient, spool: Spool, url: string): Promise<Fetched> {
  let file: SpooledFile;
  try {
    const res = await outbound.request(url, { timeoutMs: TIMEOUT_MS, maxRedirects: 5 });
    if (res.status !== 200) {
      res.discard();
      throw errors.badRequest(`${url} answered ${res.status}`, undefined, 'SourceUnreachable');
    }
    file = await spool.take(res.body, MAX_SOURCE_BYTES, tooLarge(url, MAX_SOURCE_BYTES));
  } catch (e) {
    refused(e, url, 'archiveUrl');
  }
  const head = file.head;
  if (head[0] === 0x1f && head[1] === 0x8b) return { kind: 'tar.gz', file, start: 0 };
  if (head[0] === 0x50 && head[1] === 0x4b) return { kind: 'zip', file, start: 0 };
  if (head.subarray(257, 262).toString('latin1') === 'ustar') return { kind: 'tar', file, start: 0 };
  await file.remove();
  throw errors.validation([{ path: ['body', 'archiveUrl'], message: 'not a .tar.gz, .tar or .zip archive' }]);
}

/** pkt-lines of a buffer (flush packets as null); stops at the end or where raw data begins. */
function pktLines(buf: Buffer, from = 0): { lines: (string | null)[]; end: number } {
  const lines: (string | null)[] = [];
  let i = from;
  while (i + 4 <= buf.length) {
    const len = Number.parseInt(buf.subarray(i, i + 4).toString('latin1'), 16);
    if (Number.isNaN(len)) break;
    if (len === 0) {
      lines.push(null);
      i += 4;
      continue;
    }
    if (len < 4 || i + len > buf.length) break;
    lines.push(buf.subarray(i + 4, i + len).toString('utf8'));
    i += len;
  }
  return { lines, end: i };
}

const pkt = (s: string) => `${(s.length + 4).toString(16).padStart(4, '0')}${s}`;

/** The commit `ref` names among the advertised refs (HEAD by default; a peeled tag's commit). */
export function pickRef(refs: Map<string, string>, ref: string | null): string | null {
  if (ref === null) return refs.get('HEAD') ?? null;
  if (/^[0-9a-f]{40}$/.test(ref)) return ref;
  for (const name of [`refs/tags/${ref}^{}`, `refs/tags/${ref}`, `refs/heads/${ref}`, ref]) {
    const sha = refs.get(name);
    if (sha) return sha;
  }
  return null;
}

async function fetchGit(outbound: OutboundClient, spool: Spool, repo: string, ref: string | null): Promise<Fetched> {
  const base = repo.replace(/\/+$/, '');
  if (!/^https?:\/\//.test(base)) {
    throw errors.validation([{ path: ['body', 'repo'], message: 'an http(s) git URL (smart HTTP), e.g. https://host/owner/app.git' }]);
  }
  try {
    const adv = await outbound.request(`${base}/info/refs?service=git-upload-pack`, { timeoutMs: TIMEOUT_MS, maxRedirects: 5 });
    if (adv.status !== 200) {
      adv.discard();
      throw errors.badRequest(`${repo} answered ${adv.status}: not a git repository over smart HTTP`, undefined, 'SourceUnreachable');
    }
    const { lines } = pktLines(await readAll(adv.body, repo));
    const refs = new Map<string, string>();
    for (const line of lines) {
      if (line === null || line.startsWith('#')) continue;
      const [sha, rest] = [line.slice(0, 40), line.slice(41).replace(/\n$/, '')];
      refs.set(rest.split('\0')[0]!, sha);
    }
    const commit = pickRef(refs, ref);
    if (!commit) throw errors.validation([{ path: ['body', 'ref'], message: `no ref ${ref ?? 'HEAD'} in ${repo}` }]);
    const body = `${pkt(`want ${commit} ofs-delta no-progress\n`)}0000${pkt('done\n')}`;
    const res = await outbound.request(`${base}/git-upload-pack`, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/x-git-upload-pack-request', accept: 'application/x-git-upload-pack-result' },
      timeoutMs: TIMEOUT_MS,
    });
    if (res.status !== 200) {
      res.discard();
      throw errors.badRequest(`${repo} refused the fetch (${res.status})`, undefined, 'SourceUnreachable');
    }
    const file = await spool.take(res.body, MAX_SOURCE_BYTES, tooLarge(repo, MAX_SOURCE_BYTES));
    // Without side-band the pack follows the NAK line at once: it starts within the first bytes.
    const start = file.head.indexOf('PACK');
    if (start < 0) {
      await file.remove();
      throw errors.badRequest(`${repo} sent no pack`, undefined, 'SourceUnreachable');
    }
    return { kind: 'git-pack', file, start, commit };
  } catch (e) {
    refused(e, repo, 'repo');
  }
}
