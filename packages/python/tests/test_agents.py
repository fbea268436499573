"""An agent's streamed message on the LLM stub, through the SDK's SSE iterators (sync and asyncio)."""
import asyncio
from typing import Any, Dict, Iterator, List

import pytest
from conftest import wait_until

from nube import AsyncNube, Nube
from nube.types import Agent


@pytest.fixture(scope="module")
def agent(nube: Nube) -> Iterator[Agent]:
    created = nube.agents.create(template="acp", env={}, name="py-sdk")

    def running() -> Any:
        a = nube.agents.get(created["id"])
        assert a["status"] != "lost", a.get("error")
        return a if a["status"] == "running" else None

    yield wait_until(running, timeout=300, every=0.2)
    nube.agents.delete(created["id"])


def test_message_streams_chunks_usage_and_done(nube: Nube, agent: Agent) -> None:
    events: List[Dict[str, Any]] = []
    with nube.agents.message(agent["id"], content="hola agente, esta es una respuesta larga") as stream:
        for ev in stream:
            assert ev.event == "message"
            events.append(ev.json())
    chunks = [e["value"] for e in events if e["type"] == "chunk"]
    assert len(chunks) > 1
    assert "".join(chunks) == "echo: hola agente, esta es una respuesta larga"
    assert any(e["type"] == "usage" and e["model"] == "stub-model" for e in events)
    assert events[-1]["type"] == "done" and events[-1]["session"].startswith("ses_")
    answer = nube.agents.try_(agent["id"], text="y ahora sin streaming")
    assert answer["text"] == "echo: y ahora sin streaming"


def test_async_message_is_an_async_iterator(live: Dict[str, str], agent: Agent) -> None:
    async def main() -> List[Dict[str, Any]]:
        async with AsyncNube(api_key=live["apiKey"], base_url=live["baseUrl"]) as anube:
            stream = await anube.agents.message(agent["id"], content="desde asyncio")
            return [ev.json() async for ev in stream]

    events = asyncio.run(main())
    assert "".join(e["value"] for e in events if e["type"] == "chunk") == "echo: desde asyncio"
    assert events[-1]["type"] == "done"
