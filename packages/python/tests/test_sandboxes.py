"""Sandboxes against a real nube: create, exec, files, the terminal over the SDK's own WebSocket, delete."""
import asyncio
from typing import Dict, Iterator

import pytest
from conftest import wait_until

from nube import AsyncNube, NotFoundError, Nube
from nube.types import Sandbox


@pytest.fixture(scope="module")
def sandbox(nube: Nube) -> Iterator[Sandbox]:
    s = nube.sandboxes.create(timeoutSeconds=600, env={"GREETING": "hola"})
    s = wait_until(lambda: (lambda g: g if g["status"] == "running" else None)(nube.sandboxes.get(s["id"])))
    yield s
    nube.sandboxes.delete(s["id"])


def test_exec_runs_a_command_with_the_sandbox_env(nube: Nube, sandbox: Sandbox) -> None:
    r = nube.sandboxes.exec(sandbox["id"], command="echo $GREETING && python3 -c 'print(6*7)'")
    assert r["exitCode"] == 0
    assert r["stdout"] == "hola\n42\n"
    failed = nube.sandboxes.exec(sandbox["id"], command="echo oops >&2; exit 7")
    assert failed["exitCode"] == 7
    assert failed["stderr"] == "oops\n"


def test_files_write_read_and_list(nube: Nube, sandbox: Sandbox) -> None:
    sid = sandbox["id"]
    assert nube.sandboxes.files.post(sid, "write", path="/root/py/a.txt", content="¡hola!")["ok"] is True
    got = nube.sandboxes.files.get(sid, "read", path="/root/py/a.txt")
    assert got["content"] == "¡hola!"
    listed = nube.sandboxes.files.post(sid, "list", path="/root/py")
    assert [e["name"] for e in listed["entries"]] == ["a.txt"]
    nube.sandboxes.files.post(sid, "move", from_="/root/py/a.txt", to="/root/py/b.txt")
    assert nube.sandboxes.exec(sid, command="cat /root/py/b.txt")["stdout"] == "¡hola!"


def test_terminal_runs_a_shell_and_reports_its_exit_code(nube: Nube, sandbox: Sandbox) -> None:
    with nube.sandboxes.terminal(sandbox["id"], rows=24, cols=100) as term:
        term.resize(30, 120)
        term.write("stty size; echo $((6*7)); exit 3\n")
        out = b"".join(term)
    assert b"30 120" in out
    assert b"\r\n42\r\n" in out
    assert term.exit_code == 3


def test_the_async_client_does_the_same_over_asyncio(live: Dict[str, str], sandbox: Sandbox) -> None:
    async def main() -> None:
        async with AsyncNube(api_key=live["apiKey"], base_url=live["baseUrl"]) as anube:
            r, again = await asyncio.gather(
                anube.sandboxes.exec(sandbox["id"], command="echo uno"),
                anube.sandboxes.exec(sandbox["id"], command="echo dos"),
            )
            assert (r["stdout"], again["stdout"]) == ("uno\n", "dos\n")
            term = await anube.sandboxes.terminal(sandbox["id"])
            async with term:
                await term.write("echo async-$((1+1)); exit 0\n")
                out = b"".join([c async for c in term])
            assert b"async-2" in out
            assert term.exit_code == 0
            with pytest.raises(NotFoundError):
                await anube.sandboxes.get("sbx_doesnotexist")

    asyncio.run(main())
