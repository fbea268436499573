"""The asyncio client's HTTP/1.1, written on asyncio streams: keep-alive connections per event loop,
Content-Length and chunked bodies read as they arrive, retries, one deadline per call."""
import asyncio
import json
import ssl
import time
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

from ._caller import Params, RequestOptions
from ._errors import NubeError, broke, error_from_response, timed_out, unreachable
from ._request import Prepared, Settings, call_retries, call_timeout, decode_error_body, prepare
from ._retry import wait_before_retry

_MAX_IDLE = 8
_MAX_HEAD = 64 * 1024


class HttpConnection:
    """One HTTP/1.1 connection on asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int, ssl_ctx: Optional[ssl.SSLContext]) -> "HttpConnection":
        reader, writer = await asyncio.open_connection(host, port, ssl=ssl_ctx, server_hostname=host if ssl_ctx else None)
        return cls(reader, writer)

    def close(self) -> None:
        self.writer.close()

    @property
    def broken(self) -> bool:
        return self.writer.is_closing() or self.reader.at_eof()


class AsyncBody:
    """A response body read as it arrives: Content-Length, chunked, or until the connection closes."""

    def __init__(self, conn: HttpConnection, headers: Dict[str, str], method: str, status: int) -> None:
        self.conn = conn
        self.done = False
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._left: Optional[int] = int(length) if length is not None and not self._chunked else None
        self._chunk_left = 0
        if method == "HEAD" or status in (204, 304) or self._left == 0:
            self._left, self.done = 0, True
        self.keep_alive = headers.get("connection", "").lower() != "close" and (self._chunked or self._left is not None)

    async def read_chunk(self, size: int = 65536) -> bytes:
        """The next bytes (at most `size`), b"" at the end of the body."""
        if self.done:
            return b""
        r = self.conn.reader
        if self._chunked:
            if self._chunk_left == 0:
                line = await r.readline()
                if not line.endswith(b"\n"):
                    raise asyncio.IncompleteReadError(line, None)
                self._chunk_left = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if self._chunk_left == 0:
                    while (await r.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    self.done = True
                    return b""
            data = await r.read(min(size, self._chunk_left))
            if not data:
                raise asyncio.IncompleteReadError(b"", self._chunk_left)
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                await r.readexactly(2)
            return data
        if self._left is None:
            data = await r.read(size)
            if not data:
                self.done = True
            return data
        data = await r.read(min(size, self._left))
        if not data:
            raise asyncio.IncompleteReadError(b"", self._left)
        self._left -= len(data)
        if self._left == 0:
            self.done = True
        return data

    async def read_all(self) -> bytes:
        parts: List[bytes] = []
        while True:
            chunk = await self.read_chunk(1 << 20)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)


async def read_head(reader: asyncio.StreamReader) -> Tuple[int, Dict[str, str]]:
    """Status and lower-cased headers; interim 1xx answers are skipped."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_HEAD:
            raise ValueError("response head too large")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP answer: {lines[0]!r}")
        status = int(parts[1])
        headers: Dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200 and status != 101:
            continue
        return status, headers


def encode_request(method: str, target: str, host: str, headers: Dict[str, str], body: Optional[bytes]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines.append(f"content-length: {len(body)}")
    elif "content-length" in headers:
        pass  # the caller streams a body of that length after the head
    elif method in ("POST", "PUT", "PATCH"):
        lines.append("content-length: 0")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


class AsyncConnectionPool:
    """Idle connections of one event loop (a connection cannot move between loops)."""

    def __init__(self, s: Settings) -> None:
        self._s = s
        self._idle: List[HttpConnection] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._ssl: Optional[ssl.SSLContext] = ssl.create_default_context() if s.endpoint.scheme == "https" else None

    async def take(self) -> Tuple[HttpConnection, bool]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._idle, self._loop = [], loop
        while self._idle:
            conn = self._idle.pop()
            if not conn.broken:
                return conn, True
            conn.close()
        e = self._s.endpoint
        return await HttpConnection.open(e.host, e.port, self._ssl), False

    def give(self, conn: HttpConnection) -> None:
        if asyncio.get_running_loop() is self._loop and len(self._idle) < _MAX_IDLE and not conn.broken:
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()


_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, asyncio.IncompleteReadError)


class AsyncTransport:
    """Sends operations for `AsyncNube`, as SyncTransport does for `Nube`."""

    def __init__(self, s: Settings) -> None:
        self.settings = s
        self.pool = AsyncConnectionPool(s)

    async def _call(self, operation_id: str, params: Params, query: Params, body: Any, options: Optional[RequestOptions]) -> Any:
        p = prepare(self.settings, operation_id, params, query, body, options)
        timeout = call_timeout(self.settings, options)
        deadline = time.monotonic() + timeout if timeout else None
        retries = call_retries(self.settings, p.op, options)
        attempt = 0
        while True:
            try:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                return await asyncio.wait_for(self._once(p), left)
            except asyncio.TimeoutError:
                raise timed_out(p.operation_id, timeout) from None
            except NubeError as err:
                wait = wait_before_retry(err, attempt, retries, deadline)
                if wait is None:
                    raise
                await asyncio.sleep(wait)
                attempt += 1

    async def _paginate(self, operation_id: str, params: Params, query: Params, body: Any, options: Optional[RequestOptions]) -> AsyncIterator[Any]:
        q = dict(query or {})
        while True:
            page = await self._call(operation_id, params, q, body, options)
            for item in page.get("items") or []:
                yield item
            cursor = page.get("nextCursor")
            if not cursor or page.get("hasMore") is False:
                return
            q["cursor"] = cursor

    async def _exchange(self, p: Prepared) -> Tuple[HttpConnection, int, Dict[str, str]]:
        data = encode_request(p.method, p.target, self.settings.endpoint.host_header, p.headers, p.body)
        while True:
            conn, reused = await self.pool.take()
            try:
                conn.writer.write(data)
                await conn.writer.drain()
                status, headers = await read_head(conn.reader)
                return conn, status, headers
            except _STALE:
                conn.close()
                # A kept-alive connection the server had closed: the request never reached it; send it afresh.
                if not reused:
                    raise
            except BaseException:
                conn.close()
                raise

    async def _once(self, p: Prepared) -> Any:
        try:
            conn, status, headers = await self._exchange(p)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as err:
            raise unreachable(p.operation_id, self.settings.base_url, err) from err
        body = AsyncBody(conn, headers, p.method, status)
        streaming = 200 <= status < 300 and p.op.content_type != "application/json"
        if streaming:
            from ._aio_streams import AsyncBinaryResponse, AsyncEventStream

            # A stream's connection is not pooled again: closed early, it may still carry unread bytes.
            if p.op.content_type == "text/event-stream":
                return AsyncEventStream(body)
            return AsyncBinaryResponse(body, status, headers)
        try:
            data = await body.read_all()
        except BaseException as err:
            conn.close()
            if isinstance(err, (OSError, asyncio.IncompleteReadError)):
                raise broke(p.operation_id, err) from err
            raise
        if body.keep_alive:
            self.pool.give(conn)
        else:
            conn.close()
        if status < 200 or status >= 300:
            raise error_from_response(p.operation_id, status, decode_error_body(data), headers)
        return json.loads(data) if data else None
