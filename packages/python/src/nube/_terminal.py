"""The sandbox terminal (`sandboxes.terminal`) over a WebSocket written on the standard library.

Binary messages carry the PTY's bytes both ways; text messages from the client are JSON controls
(`resize`); when the shell ends nube sends `{"type": "exit", "code": N}` and closes.
"""
import json
import socket
import ssl
from typing import Dict, Iterator, List, Optional, Tuple, Union
from urllib.parse import quote, urlencode

from ._request import Settings
from ._ws_protocol import (
    BINARY,
    CLOSE,
    PING,
    PONG,
    TEXT,
    FrameParser,
    WebSocketError,
    check_accept,
    close_frame,
    frame,
    handshake,
    new_key,
    parse_head,
)


def terminal_target(s: Settings, sandbox_id: str, rows: Optional[int], cols: Optional[int], term: Optional[str]) -> str:
    q: Dict[str, str] = {}
    if rows:
        q["rows"] = str(rows)
    if cols:
        q["cols"] = str(cols)
    if term:
        q["term"] = term
    path = f"{s.endpoint.prefix}/api/v2/sandboxes/{quote(sandbox_id, safe='')}/terminal"
    return path + (f"?{urlencode(q)}" if q else "")


def refused(status: int, body: bytes) -> WebSocketError:
    text = body.decode("utf-8", "replace")[:500]
    return WebSocketError(f"the terminal was refused with HTTP {status}: {text}")


class TerminalCore:
    """The terminal's protocol without its socket: messages in, output and control frames out."""

    def __init__(self, leftover: bytes) -> None:
        self._parser = FrameParser()
        self._pending: List[Tuple[int, bytes]] = list(self._parser.feed(leftover))
        #: Frames to send back (pongs).
        self._outbox: List[bytes] = []
        self.exit_code: Optional[int] = None
        self.closed = False

    def _step(self) -> Tuple[bool, Optional[bytes]]:
        """(True, chunk) for the next output, (True, None) when the server closed, (False, None): read more."""
        while self._pending:
            opcode, payload = self._pending.pop(0)
            if opcode == BINARY:
                return True, payload
            if opcode == TEXT:
                msg = json.loads(payload)
                if isinstance(msg, dict) and msg.get("type") == "exit":
                    self.exit_code = msg.get("code")
            elif opcode == PING:
                self._outbox.append(frame(PONG, payload))
            elif opcode == CLOSE:
                return True, None
        return self.closed, None

    def _received(self, chunk: bytes) -> None:
        self._pending.extend(self._parser.feed(chunk))

    @staticmethod
    def _keys(data: Union[str, bytes]) -> bytes:
        return frame(BINARY, data.encode() if isinstance(data, str) else data)

    @staticmethod
    def _resize(rows: int, cols: int) -> bytes:
        return frame(TEXT, json.dumps({"type": "resize", "rows": rows, "cols": cols}).encode())


class Terminal(TerminalCore):
    """An open shell with a PTY in a sandbox: `write()` keystrokes, `read()` output, `resize()`.

    Iterating yields output chunks until the shell exits; `exit_code` then holds its status (None when
    the connection closed without one). Use it as a context manager to close it.
    """

    def __init__(self, sock: socket.socket, leftover: bytes) -> None:
        super().__init__(leftover)
        self._sock = sock

    @classmethod
    def open(cls, s: Settings, sandbox_id: str, rows: Optional[int] = None, cols: Optional[int] = None,
             term: Optional[str] = None, timeout: Optional[float] = None) -> "Terminal":
        e = s.endpoint
        sock = socket.create_connection((e.host, e.port), timeout=timeout)
        try:
            if e.scheme == "https":
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=e.host)
            key = new_key()
            headers = {k: v for k, v in s.headers.items() if k in ("authorization", "user-agent")}
            sock.sendall(handshake(e.host_header, terminal_target(s, sandbox_id, rows, cols, term), key, headers))
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    raise WebSocketError("the server closed the connection during the handshake")
                buf += chunk
            head, _, rest = buf.partition(b"\r\n\r\n")
            status, hdrs = parse_head(head)
            if status != 101:
                raise refused(status, rest)
            check_accept(key, hdrs)
            sock.settimeout(None)
            return cls(sock, rest)
        except BaseException:
            sock.close()
            raise

    def write(self, data: Union[str, bytes]) -> None:
        """Keystrokes (text is sent as UTF-8)."""
        self._sock.sendall(self._keys(data))

    def resize(self, rows: int, cols: int) -> None:
        self._sock.sendall(self._resize(rows, cols))

    def read(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next output chunk; None once the shell exited or the connection closed.

        Raises socket.timeout (TimeoutError) when `timeout` seconds pass with nothing to read.
        """
        while True:
            done, chunk = self._step()
            while self._outbox:
                self._sock.sendall(self._outbox.pop(0))
            if done:
                if chunk is None:
                    self._finish()
                return chunk
            self._sock.settimeout(timeout)
            got = self._sock.recv(65536)
            if not got:
                self._finish()
                return None
            self._received(got)

    def __iter__(self) -> Iterator[bytes]:
        while True:
            chunk = self.read()
            if chunk is None:
                return
            yield chunk

    def _finish(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._sock.sendall(close_frame())
            except OSError:
                pass
            self._sock.close()

    def close(self) -> None:
        self._finish()

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
