"""Hand-written methods of the asyncio client's resources: file uploads and downloads, the terminal."""
import asyncio
import os
import ssl
from typing import IO, Any, Dict, Optional, Tuple, cast
from urllib.parse import urlsplit

from ._aio_http import AsyncBody, HttpConnection, encode_request, read_head
from ._aio_terminal import AsyncTerminal
from ._caller import AsyncCaller, RequestOptions
from ._errors import error_from_response
from ._omit import OMIT
from ._request import decode_error_body
from ._transfer import BLOCK, Destination, Source, describe_source
from .types import File


async def _open(url: str) -> Tuple[HttpConnection, str, str]:
    u = urlsplit(url)
    https = u.scheme == "https"
    port = u.port or (443 if https else 80)
    conn = await HttpConnection.open(u.hostname or "", port, ssl.create_default_context() if https else None)
    host = u.netloc.rpartition("@")[2]
    return conn, (u.path or "/") + (f"?{u.query}" if u.query else ""), host


async def _put(url: str, source: Source, size: int, content_type: str) -> None:
    conn, target, host = await _open(url)
    try:
        conn.writer.write(encode_request("PUT", target, host, {"content-type": content_type, "content-length": str(size)}, None))
        if isinstance(source, (bytes, bytearray, memoryview)):
            conn.writer.write(bytes(source))
            await conn.writer.drain()
        else:
            f: IO[bytes] = open(source, "rb") if isinstance(source, (str, os.PathLike)) else source
            try:
                while True:
                    block = f.read(BLOCK)
                    if not block:
                        break
                    conn.writer.write(block)
                    await conn.writer.drain()
            finally:
                if f is not source:
                    f.close()
        status, headers = await read_head(conn.reader)
        data = await AsyncBody(conn, headers, "PUT", status).read_all()
        if status >= 300:
            raise error_from_response("files.upload (PUT putUrl)", status, decode_error_body(data), headers)
    finally:
        conn.close()


async def _get(url: str, destination: Destination) -> int:
    if isinstance(destination, (str, os.PathLike)):
        with open(destination, "wb") as f:
            return await _get(url, f)
    conn, target, host = await _open(url)
    try:
        conn.writer.write(encode_request("GET", target, host, {"connection": "close"}, None))
        await conn.writer.drain()
        status, headers = await read_head(conn.reader)
        body = AsyncBody(conn, headers, "GET", status)
        if status >= 300:
            raise error_from_response("files.download (GET readUrl)", status, decode_error_body(await body.read_all()), headers)
        written = 0
        while True:
            chunk = await body.read_chunk(BLOCK)
            if not chunk:
                return written
            destination.write(chunk)
            written += len(chunk)
    finally:
        conn.close()


async def _bounded(coro: Any, client: AsyncCaller, options: Optional[RequestOptions]) -> Any:
    """Transfers are bounded by the call's timeout only when the caller set one for this call."""
    if options and options.get("timeout"):
        return await asyncio.wait_for(coro, options["timeout"])
    return await coro


class AsyncFilesMixin:
    _client: AsyncCaller

    async def upload(
        self,
        source: Source,
        *,
        file_name: Optional[str] = None,
        content_type: Optional[str] = None,
        access: str = OMIT,
        region: str = OMIT,
        assetId: str = OMIT,
        metadata: Dict[str, Any] = OMIT,
        hls: bool = OMIT,
        request_options: Optional[RequestOptions] = None,
    ) -> File:
        """Uploads a path, a binary file object or bytes: `files.create`, then the bytes streamed to its putUrl."""
        name, kind, size = describe_source(source, file_name, content_type)
        body = {"fileName": name, "contentType": kind, "size": size, "access": access, "region": region, "assetId": assetId, "metadata": metadata, "hls": hls}
        created = await self._client._call("files.create", None, None, body, request_options)
        await _bounded(_put(created["putUrl"], source, size, kind), self._client, request_options)
        return cast(File, await self._client._call("files.get", {"fileId": created["file"]["id"]}, None, OMIT, request_options))

    async def download(self, file_id: str, destination: Destination, *, request_options: Optional[RequestOptions] = None) -> int:
        """Streams a file's bytes (from its presigned readUrl) to a path or a binary file object; returns the size."""
        f = await self._client._call("files.get", {"fileId": file_id}, None, OMIT, request_options)
        url = f.get("readUrl") or f.get("url")
        if not url:
            raise ValueError(f"file {file_id} has no readable URL (status {f.get('status')}): upload its bytes first")
        return cast(int, await _bounded(_get(url, destination), self._client, request_options))


class AsyncSandboxesMixin:
    _client: AsyncCaller

    async def terminal(self, sandbox_id: str, *, rows: Optional[int] = None, cols: Optional[int] = None,
                       term: Optional[str] = None) -> AsyncTerminal:
        """Opens a shell with a PTY in the sandbox over a WebSocket (`sandboxes.terminal`); see AsyncTerminal."""
        s = self._client.settings
        return await AsyncTerminal.open(s, sandbox_id, rows, cols, term, timeout=s.timeout)
