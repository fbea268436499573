/** One Server-Sent Event. `data` is the joined data lines; `json()` parses it. */
export interface SseEvent {
  event: string;
  data: string;
  id?: string;
  retry?: number;
  json<J = unknown>(): J;
}

/** A `text/event-stream` response: iterate it for events, or read `response` yourself. */
export class EventStream implements AsyncIterable<SseEvent> {
  constructor(readonly response: Response) {}

  async *[Symbol.asyncIterator](): AsyncIterator<SseEvent> {
    const body = this.response.body;
    if (!body) return;
    const decoder = new TextDecoder();
    let buffer = '';
    let fields: { event?: string; data: string[]; id?: string; retry?: number } = { data: [] };
    const reader = body.getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
        let nl = buffer.search(/\r\n|\r|\n/);
        while (nl >= 0) {
          // A lone trailing \r may be the first half of \r\n: wait for the next chunk.
          if (!done && nl === buffer.length - 1 && buffer[nl] === '\r') break;
          const line = buffer.slice(0, nl);
          buffer = buffer.slice(nl + (buffer.startsWith('\r\n', nl) ? 2 : 1));
          if (line === '') {
            if (fields.data.length > 0 || fields.event) yield toEvent(fields);
            fields = { data: [] };
          } else if (!line.startsWith(':')) {
            const colon = line.indexOf(':');
            const name = colon < 0 ? line : line.slice(0, colon);
            const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
            if (name === 'data') fields.data.push(value);
            else if (name === 'event') fields.event = value;
            else if (name === 'id') fields.id = value;
            else if (name === 'retry' && /^\d+$/.test(value)) fields.retry = Number(value);
          }
          nl = buffer.search(/\r\n|\r|\n/);
        }
        if (done) break;
      }
      // An event not closed by a blank line before the end is discarded, as the SSE spec says.
    } finally {
      reader.releaseLock();
      await body.cancel().catch(() => {});
    }
  }
}

function toEvent(f: { event?: string; data: string[]; id?: string; retry?: number }): SseEvent {
  const data = f.data.join('\n');
  return {
    event: f.event ?? 'message',
    data,
    ...(f.id !== undefined ? { id: f.id } : {}),
    ...(f.retry !== undefined ? { retry: f.retry } : {}),
    json: <J>() => JSON.parse(data) as J,
  };
}
