"""Hand-written methods of the sync client's resources: file uploads and downloads, the terminal."""
from typing import Any, Dict, Optional, cast

from ._caller import RequestOptions, SyncCaller
from ._omit import OMIT
from ._terminal import Terminal
from ._transfer import Destination, Source, describe_source, get_file, put_file
from .types import File


class FilesMixin:
    _client: SyncCaller

    def upload(
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
        """Uploads a path, a binary file object or bytes: `files.create`, then the bytes streamed to its putUrl.

        The name defaults to the path's base name and the content type to a guess from the name. Returns
        the file once it is DONE.
        """
        name, kind, size = describe_source(source, file_name, content_type)
        body = {"fileName": name, "contentType": kind, "size": size, "access": access, "region": region, "assetId": assetId, "metadata": metadata, "hls": hls}
        created = self._client._call("files.create", None, None, body, request_options)
        put_file(created["putUrl"], source, size, kind, _idle_timeout(self._client, request_options))
        return cast(File, self._client._call("files.get", {"fileId": created["file"]["id"]}, None, OMIT, request_options))

    def download(self, file_id: str, destination: Destination, *, request_options: Optional[RequestOptions] = None) -> int:
        """Streams a file's bytes (from its presigned readUrl) to a path or a binary file object; returns the size."""
        f = self._client._call("files.get", {"fileId": file_id}, None, OMIT, request_options)
        url = f.get("readUrl") or f.get("url")
        if not url:
            raise ValueError(f"file {file_id} has no readable URL (status {f.get('status')}): upload its bytes first")
        return get_file(url, destination, _idle_timeout(self._client, request_options))


class SandboxesMixin:
    _client: SyncCaller

    def terminal(self, sandbox_id: str, *, rows: Optional[int] = None, cols: Optional[int] = None,
                 term: Optional[str] = None) -> Terminal:
        """Opens a shell with a PTY in the sandbox over a WebSocket (`sandboxes.terminal`); see Terminal."""
        s = self._client.settings
        return Terminal.open(s, sandbox_id, rows, cols, term, timeout=s.timeout)


def _idle_timeout(client: SyncCaller, options: Optional[RequestOptions]) -> Optional[float]:
    if options and "timeout" in options:
        return options["timeout"] or None
    return client.settings.timeout
