// A template build's log as Server-Sent Events: every line written so far (after `Last-Event-ID` or
// `after`), then new ones as the build writes them, then `done` with how it ended. Lines are rows of
// the metadata DB, so a build that ran in another process or before a restart reads the same.
import type { TemplatesRepo } from './repo.js';

const POLL_MS = 250;

export async function* buildLogEvents(
  repo: TemplatesRepo,
  id: string,
  after: number,
  signal: AbortSignal,
): AsyncGenerator<string> {
  let seq = after;
  yield ': build log\n\n';
  while (!signal.aborted) {
    // The status is read before the lines: a build that ended meanwhile has written its last line.
    const row = await repo.get(id);
    for (;;) {
      const lines = await repo.logsAfter(id, seq);
      for (const l of lines) {
        seq = l.seq;
        yield `id: ${l.seq}\nevent: log\ndata: ${JSON.stringify({ seq: l.seq, at: new Date(l.at).toISOString(), line: l.line })}\n\n`;
      }
      if (lines.length < 500) break;
    }
    if (row?.status !== 'building') {
      const end = row
        ? { status: row.status, error: row.error, errorCode: row.error_code }
        : { status: 'deleted', error: null, errorCode: null };
      yield `event: done\ndata: ${JSON.stringify(end)}\n\n`;
      return;
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
