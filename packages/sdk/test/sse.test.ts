import { describe, expect, it } from 'vitest';
import { EventStream } from '../src/index.js';

function streamOf(chunks: string[]): Response {
  const enc = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      for (const x of chunks) c.enqueue(enc.encode(x));
      c.close();
    },
  });
  return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
}

describe('EventStream', () => {
  it('parses events split across chunks, CRLF, comments, multi-line data and discards an unterminated last event as the SSE spec says', async () => {
    const res = streamOf([': hello\n\nevent: tok', 'en\ndata: {"t":"a"}\r', '\n\r\ndata: line1\ndata: line2\nid: 7\n\n', 'data: tail']);
    const events = [];
    for await (const e of new EventStream(res)) events.push(e);
    expect(events.map((e) => [e.event, e.data, e.id])).toEqual([
      ['token', '{"t":"a"}', undefined],
      ['message', 'line1\nline2', '7'],
    ]);
    expect(events[0]!.json()).toEqual({ t: 'a' });
  });
});
