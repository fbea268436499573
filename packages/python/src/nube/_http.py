"""The sync client's HTTP: http.client connections kept alive in a small pool, retries, one deadline per call."""
import http.client
import json
import socket
import ssl
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ._caller import Params, RequestOptions
from ._errors import NubeError, broke, error_from_response, timed_out, unreachable
from ._request import Prepared, Settings, call_retries, call_timeout, decode_error_body, prepare
from ._retry import wait_before_retry
from ._streams import BinaryResponse, EventStream

_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
_MAX_IDLE = 8


def remaining(deadline: Optional[float]) -> Optional[float]:
    """Seconds left before `deadline` (time.monotonic), None when there is none; raises when it passed."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("deadline passed")
    return left


class ConnectionPool:
    """Idle keep-alive connections to one endpoint; safe to share between threads."""

    def __init__(self, s: Settings) -> None:
        self._s = s
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._ssl: Optional[ssl.SSLContext] = ssl.create_default_context() if s.endpoint.scheme == "https" else None

    def take(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True
        e = self._s.endpoint
        if self._ssl is not None:
            return http.client.HTTPSConnection(e.host, e.port, timeout=timeout, context=self._ssl), False
        return http.client.HTTPConnection(e.host, e.port, timeout=timeout), False

    def give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()


def _headers(resp: http.client.HTTPResponse) -> Dict[str, str]:
    return {k.lower(): v for k, v in resp.getheaders()}


def _read_body(resp: http.client.HTTPResponse, sock: Optional[socket.socket], deadline: Optional[float]) -> bytes:
    if deadline is None:
        return resp.read()
    chunks: List[bytes] = []
    while True:
        if sock is not None:
            sock.settimeout(remaining(deadline))
        chunk = resp.read1(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


class SyncTransport:
    """Sends operations for `Nube`: builds the request, retries idempotent calls, decodes the answer."""

    def __init__(self, s: Settings) -> None:
        self.settings = s
        self.pool = ConnectionPool(s)

    def _call(self, operation_id: str, params: Params, query: Params, body: Any, options: Optional[RequestOptions]) -> Any:
        p = prepare(self.settings, operation_id, params, query, body, options)
        timeout = call_timeout(self.settings, options)
        deadline = time.monotonic() + timeout if timeout else None
        retries = call_retries(self.settings, p.op, options)
        attempt = 0
        while True:
            try:
                return self._once(p, timeout, deadline)
            except NubeError as err:
                wait = wait_before_retry(err, attempt, retries, deadline)
                if wait is None:
                    raise
                time.sleep(wait)
                attempt += 1

    def _paginate(self, operation_id: str, params: Params, query: Params, body: Any, options: Optional[RequestOptions]) -> Iterator[Any]:
        q = dict(query or {})
        while True:
            page = self._call(operation_id, params, q, body, options)
            yield from page.get("items") or []
            cursor = page.get("nextCursor")
            if not cursor or page.get("hasMore") is False:
                return
            q["cursor"] = cursor

    def _once(self, p: Prepared, timeout: Optional[float], deadline: Optional[float]) -> Any:
        try:
            resp, conn = self._exchange(p, deadline)
        except socket.timeout:
            raise timed_out(p.operation_id, timeout) from None
        except (OSError, http.client.HTTPException) as err:
            raise unreachable(p.operation_id, self.settings.base_url, err) from err
        try:
            status = resp.status
            if status < 200 or status >= 300:
                data = _read_body(resp, conn.sock, deadline)
                self._release(resp, conn)
                raise error_from_response(p.operation_id, status, decode_error_body(data), _headers(resp))
            if p.op.content_type == "application/json":
                data = _read_body(resp, conn.sock, deadline)
                self._release(resp, conn)
                return json.loads(data) if data else None
        except socket.timeout:
            conn.close()
            raise timed_out(p.operation_id, timeout) from None
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            raise broke(p.operation_id, err) from err
        # Streams and bytes: only the wait for the headers was bounded by the timeout; the caller reads on.
        if conn.sock is not None:
            conn.sock.settimeout(None)
        # A stream's connection is not pooled again: closed early, it may still carry unread bytes.
        if p.op.content_type == "text/event-stream":
            return EventStream(resp, conn.close)
        return BinaryResponse(resp, _headers(resp), conn.close)

    def _exchange(self, p: Prepared, deadline: Optional[float]) -> Tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
        while True:
            conn, reused = self.pool.take(remaining(deadline))
            try:
                conn.request(p.method, p.target, p.body, p.headers)
                return conn.getresponse(), conn
            except _STALE:
                conn.close()
                # A kept-alive connection the server had closed: the request never reached it; send it afresh.
                if not reused:
                    raise
            except BaseException:
                conn.close()
                raise

    def _release(self, resp: http.client.HTTPResponse, conn: http.client.HTTPConnection) -> None:
        """Back to the pool once the body was read to its end and the server keeps the connection open."""
        # read1 leaves a Content-Length body that reached its end open; closing the response then only drops
        # its file object (the socket is the connection's), and the connection may send the next request.
        done = resp.isclosed() or (resp.length == 0 and not resp.chunked)
        resp.close()
        if done and not resp.will_close:
            self.pool.give(conn)
        else:
            conn.close()
