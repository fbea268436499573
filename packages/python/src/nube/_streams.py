"""What streaming operations return in the sync client: SSE as an iterator of events, bytes as a stream."""
import http.client
import os
from typing import IO, Callable, Dict, Iterator, Optional, TypeVar, Union

from ._sse import SseEvent, SseParser

S = TypeVar("S", bound="_Stream")


class _Stream:
    """An answer read as it arrives; closing it drops its connection (it may still carry unread bytes)."""

    def __init__(self, response: http.client.HTTPResponse, release: Callable[[], None]) -> None:
        self.response = response
        self._release = release
        self._closed = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.response.isclosed():
            self.response.close()
        self._release()

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventStream(_Stream):
    """A `text/event-stream` answer: `for event in stream` yields SseEvent as they arrive.

    Use it as a context manager (or call close()) to drop the connection before the stream ends.
    """

    def __iter__(self) -> Iterator[SseEvent]:
        parser = SseParser()
        try:
            while True:
                chunk = self.response.read1(65536)
                if not chunk:
                    break
                yield from parser.feed(chunk)
            yield from parser.feed(b"", final=True)
        finally:
            self.close()


class BinaryResponse(_Stream):
    """Bytes of an answer that is not JSON (a PDF, a database file, NDJSON), read as they arrive."""

    def __init__(self, response: http.client.HTTPResponse, headers: Dict[str, str], release: Callable[[], None]) -> None:
        super().__init__(response, release)
        self.headers = headers
        self.status = response.status

    @property
    def content_type(self) -> Optional[str]:
        return self.headers.get("content-type")

    def read(self) -> bytes:
        """The whole body."""
        try:
            return self.response.read()
        finally:
            self.close()

    def iter_bytes(self, chunk_size: int = 65536) -> Iterator[bytes]:
        try:
            while True:
                chunk = self.response.read1(chunk_size)
                if not chunk:
                    return
                yield chunk
        finally:
            self.close()

    def save(self, destination: Union[str, "os.PathLike[str]", "IO[bytes]"]) -> int:
        """Streams the body to a path or a binary file object; returns the number of bytes written."""
        written = 0
        if isinstance(destination, (str, os.PathLike)):
            with open(destination, "wb") as f:
                return self.save(f)
        for chunk in self.iter_bytes():
            destination.write(chunk)
            written += len(chunk)
        return written


__all__ = ["EventStream", "BinaryResponse", "SseEvent"]
