"""Bytes to and from presigned URLs (files.create's putUrl, a file's readUrl), streamed in blocks.

A presigned URL carries its own signature, so no API key travels with it; it may point at nube itself or
at an S3-compatible store. The timeout here is per read or write (an idle timeout), since a big file's
transfer takes as long as it takes.
"""
import http.client
import mimetypes
import os
import ssl
from typing import IO, Any, Optional, Tuple, Union
from urllib.parse import urlsplit

from ._errors import NubeError, error_from_response
from ._request import decode_error_body

Source = Union[str, "os.PathLike[str]", bytes, IO[bytes]]
Destination = Union[str, "os.PathLike[str]", IO[bytes]]
BLOCK = 256 * 1024


def describe_source(source: Source, file_name: Optional[str], content_type: Optional[str]) -> Tuple[str, str, int]:
    """(file name, content type, size) of what is to be uploaded."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        name = file_name or os.path.basename(path)
        size = os.stat(path).st_size
    elif isinstance(source, (bytes, bytearray, memoryview)):
        name = file_name or "upload.bin"
        size = len(source)
    else:
        name = file_name or os.path.basename(str(getattr(source, "name", "") or "")) or "upload.bin"
        try:
            size = os.fstat(source.fileno()).st_size - source.tell()
        except (AttributeError, OSError, ValueError):
            here = source.tell()
            size = source.seek(0, os.SEEK_END) - here
            source.seek(here)
    kind = content_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return name, kind, size


def _connection(url: str, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, str]:
    u = urlsplit(url)
    target = (u.path or "/") + (f"?{u.query}" if u.query else "")
    if u.scheme == "https":
        return http.client.HTTPSConnection(u.hostname or "", u.port, timeout=timeout, context=ssl.create_default_context(), blocksize=BLOCK), target
    return http.client.HTTPConnection(u.hostname or "", u.port, timeout=timeout, blocksize=BLOCK), target


def _fail(operation: str, resp: http.client.HTTPResponse) -> NubeError:
    body = decode_error_body(resp.read())
    return error_from_response(operation, resp.status, body, {k.lower(): v for k, v in resp.getheaders()})


def put_file(url: str, source: Source, size: int, content_type: str, timeout: Optional[float]) -> None:
    """PUTs the bytes to a presigned URL, reading a path or file object block by block."""
    conn, target = _connection(url, timeout)
    headers = {"content-type": content_type, "content-length": str(size)}
    try:
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as f:
                conn.request("PUT", target, body=f, headers=headers)
                resp = conn.getresponse()
        else:
            body: Any = bytes(source) if isinstance(source, (bytearray, memoryview)) else source
            conn.request("PUT", target, body=body, headers=headers)
            resp = conn.getresponse()
        if resp.status >= 300:
            raise _fail("files.upload (PUT putUrl)", resp)
        resp.read()
    finally:
        conn.close()


def get_file(url: str, destination: Destination, timeout: Optional[float]) -> int:
    """GETs a presigned URL into a path or a binary file object; returns the bytes written."""
    if isinstance(destination, (str, os.PathLike)):
        with open(destination, "wb") as f:
            return get_file(url, f, timeout)
    conn, target = _connection(url, timeout)
    try:
        conn.request("GET", target)
        resp = conn.getresponse()
        if resp.status >= 300:
            raise _fail("files.download (GET readUrl)", resp)
        written = 0
        while True:
            chunk = resp.read1(BLOCK)
            if not chunk:
                return written
            destination.write(chunk)
            written += len(chunk)
    finally:
        conn.close()
