"""Files against a real nube: uploads streamed to the presigned putUrl, downloads streamed from readUrl,
every page of the list through the iterator; the same with the asyncio client."""
import asyncio
import hashlib
import io
import os
import uuid
from pathlib import Path
from typing import Dict

from nube import AsyncNube, Nube


def test_upload_a_path_and_download_it_to_a_path(nube: Nube, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    data = os.urandom(3 * 1024 * 1024 + 17)
    src.write_bytes(data)
    f = nube.files.upload(src, assetId="py-sdk")
    assert f["status"] == "DONE"
    assert f["name"] == "big.bin"
    assert f["size"] == len(data)
    assert f["contentType"] == "application/octet-stream"
    dest = tmp_path / "back.bin"
    assert nube.files.download(f["id"], dest) == len(data)
    assert hashlib.sha256(dest.read_bytes()).digest() == hashlib.sha256(data).digest()


def test_upload_bytes_and_a_file_object_and_download_into_a_buffer(nube: Nube) -> None:
    a = nube.files.upload(b"hola!", file_name="hola.txt")
    assert a["contentType"] == "text/plain"
    b = nube.files.upload(io.BytesIO(b"desde un objeto"), file_name="obj.txt", content_type="text/plain")
    out = io.BytesIO()
    nube.files.download(b["id"], out)
    assert out.getvalue() == b"desde un objeto"
    assert nube.files.get(a["id"])["size"] == 5


def test_iter_follows_the_cursor_over_every_page(nube: Nube) -> None:
    asset = f"py-pages-{uuid.uuid4().hex[:8]}"
    made = {nube.files.upload(f"n{i}".encode(), file_name=f"page{i}.txt", assetId=asset)["id"] for i in range(5)}
    seen = [f["id"] for f in nube.files.iter(assetId=asset, limit=2)]
    assert sorted(seen) == sorted(made)
    first = nube.files.list(assetId=asset, limit=2)
    assert len(first["items"]) == 2 and first["nextCursor"]


def test_async_upload_download_and_iter(live: Dict[str, str], tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncNube(api_key=live["apiKey"], base_url=live["baseUrl"]) as anube:
            src = tmp_path / "a.bin"
            data = os.urandom(1024 * 1024 + 3)
            src.write_bytes(data)
            asset = f"py-async-{uuid.uuid4().hex[:8]}"
            f = await anube.files.upload(src, assetId=asset)
            assert f["status"] == "DONE" and f["size"] == len(data)
            dest = tmp_path / "a.back"
            assert await anube.files.download(f["id"], dest) == len(data)
            assert dest.read_bytes() == data
            ids = [x["id"] async for x in anube.files.iter(assetId=asset, limit=1)]
            assert ids == [f["id"]]

    asyncio.run(main())
