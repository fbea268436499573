"""What streaming operations return in the asyncio client: SSE as an async iterator, bytes as a stream."""
import os
from typing import IO, AsyncIterator, Dict, Optional, TypeVar, Union

from ._aio_http import AsyncBody
from ._sse import SseEvent, SseParser

S = TypeVar("S", bound="_AsyncStream")


class _AsyncStream:
    """An answer read as it arrives; closing it drops its connection (it may still carry unread bytes)."""

    def __init__(self, body: AsyncBody) -> None:
        self._body = body
        self._closed = False

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._body.conn.close()

    async def __aenter__(self: S) -> S:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncEventStream(_AsyncStream):
    """A `text/event-stream` answer: `async for event in stream` yields SseEvent as they arrive.

    Use `async with` (or `await aclose()`) to drop the connection before the stream ends.
    """

    def __aiter__(self) -> AsyncIterator[SseEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[SseEvent]:
        parser = SseParser()
        try:
            while True:
                chunk = await self._body.read_chunk()
                if not chunk:
                    break
                for ev in parser.feed(chunk):
                    yield ev
            for ev in parser.feed(b"", final=True):
                yield ev
        finally:
            await self.aclose()


class AsyncBinaryResponse(_AsyncStream):
    """Bytes of an answer that is not JSON (a PDF, a database file, NDJSON), read as they arrive."""

    def __init__(self, body: AsyncBody, status: int, headers: Dict[str, str]) -> None:
        super().__init__(body)
        self.status = status
        self.headers = headers

    @property
    def content_type(self) -> Optional[str]:
        return self.headers.get("content-type")

    async def read(self) -> bytes:
        try:
            return await self._body.read_all()
        finally:
            await self.aclose()

    async def iter_bytes(self, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        try:
            while True:
                chunk = await self._body.read_chunk(chunk_size)
                if not chunk:
                    return
                yield chunk
        finally:
            await self.aclose()

    async def save(self, destination: Union[str, "os.PathLike[str]", "IO[bytes]"]) -> int:
        """Streams the body to a path or a binary file object; returns the number of bytes written."""
        if isinstance(destination, (str, os.PathLike)):
            with open(destination, "wb") as f:
                return await self.save(f)
        written = 0
        async for chunk in self.iter_bytes():
            destination.write(chunk)
            written += len(chunk)
        return written
