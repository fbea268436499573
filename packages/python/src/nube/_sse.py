"""Server-Sent Events: the parser both clients' event streams feed with bytes as they arrive."""
import codecs
import json
from typing import Any, List, Optional


class SseEvent:
    """One event: `event` (default "message"), `data` (its data lines joined), `id`, `retry`; `json()` parses data."""

    __slots__ = ("event", "data", "id", "retry")

    def __init__(self, event: str, data: str, id: Optional[str] = None, retry: Optional[int] = None) -> None:
        self.event = event
        self.data = data
        self.id = id
        self.retry = retry

    def json(self) -> Any:
        return json.loads(self.data)

    def __repr__(self) -> str:
        return f"SseEvent(event={self.event!r}, data={self.data!r})"


class SseParser:
    """Feed it chunks; it returns the events each chunk completed. Lines end in \\n, \\r\\n or \\r."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._event: Optional[str] = None
        self._data: List[str] = []
        self._id: Optional[str] = None
        self._retry: Optional[int] = None

    def feed(self, chunk: bytes, final: bool = False) -> List[SseEvent]:
        self._buffer += self._decoder.decode(chunk, final)
        out: List[SseEvent] = []
        buf = self._buffer
        start = 0
        n = len(buf)
        while True:
            nl_n = buf.find("\n", start)
            nl_r = buf.find("\r", start)
            if nl_n < 0 and nl_r < 0:
                break
            end = nl_n if nl_r < 0 or (0 <= nl_n < nl_r) else nl_r
            # A lone trailing \r may be the first half of \r\n: wait for the next chunk.
            if buf[end] == "\r" and end == n - 1 and not final:
                break
            line = buf[start:end]
            start = end + (2 if buf.startswith("\r\n", end) else 1)
            ev = self._line(line)
            if ev is not None:
                out.append(ev)
        self._buffer = buf[start:]
        # An event not closed by a blank line before the end is discarded, as the SSE spec says.
        return out

    def _line(self, line: str) -> Optional[SseEvent]:
        if line == "":
            if not self._data and self._event is None:
                return None
            ev = SseEvent(self._event or "message", "\n".join(self._data), self._id, self._retry)
            self._event, self._data, self._id, self._retry = None, [], None, None
            return ev
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None
