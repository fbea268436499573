"""The sandbox terminal for the asyncio client: the same WebSocket protocol over asyncio streams."""
import asyncio
import json
import ssl
from typing import AsyncIterator, Optional, Union

from ._request import Settings
from ._terminal import TerminalCore, refused, terminal_target
from ._ws_protocol import WebSocketError, check_accept, close_frame, handshake, new_key, parse_head


class AsyncTerminal(TerminalCore):
    """An open shell with a PTY in a sandbox: `await write()`, `await read()`, `await resize()`.

    `async for chunk in terminal` yields output until the shell exits; `exit_code` then holds its status.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, leftover: bytes) -> None:
        super().__init__(leftover)
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, s: Settings, sandbox_id: str, rows: Optional[int] = None, cols: Optional[int] = None,
                   term: Optional[str] = None, timeout: Optional[float] = None) -> "AsyncTerminal":
        e = s.endpoint
        ctx = ssl.create_default_context() if e.scheme == "https" else None

        async def connect() -> "AsyncTerminal":
            reader, writer = await asyncio.open_connection(e.host, e.port, ssl=ctx, server_hostname=e.host if ctx else None)
            try:
                key = new_key()
                headers = {k: v for k, v in s.headers.items() if k in ("authorization", "user-agent")}
                writer.write(handshake(e.host_header, terminal_target(s, sandbox_id, rows, cols, term), key, headers))
                await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                status, hdrs = parse_head(head[:-4])
                if status != 101:
                    rest = await asyncio.wait_for(reader.read(4096), 5)
                    raise refused(status, rest)
                check_accept(key, hdrs)
                return cls(reader, writer, b"")
            except BaseException:
                writer.close()
                raise

        return await asyncio.wait_for(connect(), timeout)

    async def write(self, data: Union[str, bytes]) -> None:
        self._writer.write(self._keys(data))
        await self._writer.drain()

    async def resize(self, rows: int, cols: int) -> None:
        self._writer.write(self._resize(rows, cols))
        await self._writer.drain()

    async def read(self) -> Optional[bytes]:
        """The next output chunk; None once the shell exited or the connection closed."""
        while True:
            done, chunk = self._step()
            while self._outbox:
                self._writer.write(self._outbox.pop(0))
            if done:
                if chunk is None:
                    await self.close()
                return chunk
            got = await self._reader.read(65536)
            if not got:
                await self.close()
                return None
            self._received(got)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.read()
            if chunk is None:
                return
            yield chunk

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._writer.write(close_frame())
            await self._writer.drain()
        except (OSError, RuntimeError):
            pass
        self._writer.close()

    async def __aenter__(self) -> "AsyncTerminal":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["AsyncTerminal", "WebSocketError"]
