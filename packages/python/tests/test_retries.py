"""Errors, retries and timeouts against a local HTTP server that answers from a script."""
import asyncio
import builtins
import email.utils
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from nube import (
    AsyncNube,
    ConnectionError,
    NotImplementedError,
    Nube,
    RateLimitError,
    ServerError,
    ServiceUnavailableError,
    TimeoutError,
)

Answer = Tuple[int, Dict[str, str], Any]
KEY = "nube_sk_live_" + "a" * 40


class Stub:
    def __init__(self) -> None:
        self.script: List[Answer] = []
        self.seen: List[Tuple[str, str, float, Dict[str, str], bytes]] = []
        self.delay = 0.0
        self.sse: List[bytes] = []
        self.ports: List[int] = []
        #: Close the connection after each answer without saying so (a server's idle keep-alive timeout).
        self.drop_after_answer = False


@pytest.fixture()
def stub() -> Iterator[Tuple[Stub, str]]:
    state = Stub()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def handle_one(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            state.ports.append(self.client_address[1])
            state.seen.append((self.command, self.path, time.monotonic(), dict(self.headers), body))
            if state.delay:
                time.sleep(state.delay)
            if state.sse:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for piece in state.sse:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                    time.sleep(0.02)
                self.wfile.write(b"0\r\n\r\n")
                return
            status, headers, payload = state.script.pop(0) if state.script else (200, {}, {"ok": True, "items": []})
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("x-request-id", "req-1")
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            if state.drop_after_answer:
                self.close_connection = True

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_one

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def rate_limited(after: str) -> Answer:
    return (429, {"retry-after": after}, {"error": "rate limit exceeded", "code": "RateLimited"})


BUSY: Answer = (503, {}, {"error": "busy", "code": "Unavailable"})


def gaps(state: Stub) -> List[float]:
    return [b[2] - a[2] for a, b in zip(state.seen, state.seen[1:])]


def test_a_get_answered_429_is_sent_again_after_retry_after(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    state.script = [rate_limited("1")]
    assert Nube(api_key=KEY, base_url=url).account.keys.list() == {"ok": True, "items": []}
    assert [(s[0], s[1]) for s in state.seen] == [("GET", "/api/v2/account/keys")] * 2
    assert gaps(state)[0] >= 0.95
    assert state.seen[0][3]["authorization"] == f"Bearer {KEY}"


def test_retry_after_as_an_http_date_is_honoured(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    state.script = [rate_limited(email.utils.formatdate(time.time() + 2, usegmt=True))]
    Nube(api_key=KEY, base_url=url).account.get()
    assert len(state.seen) == 2
    assert gaps(state)[0] >= 0.95


def test_503_backs_off_and_gives_up_after_max_retries_with_the_last_error(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    state.script = [BUSY, BUSY, BUSY, BUSY]
    with pytest.raises(ServiceUnavailableError) as info:
        Nube(api_key=KEY, base_url=url, max_retries=2).account.get()
    assert info.value.status == 503 and "retry in a moment" in str(info.value)
    assert len(state.seen) == 3
    g = gaps(state)
    assert 0.24 <= g[0] <= 0.7 and 0.49 <= g[1] <= 1.2


def test_post_is_never_retried_and_a_lasting_503_is_not_either(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    state.script = [rate_limited("0")]
    with pytest.raises(RateLimitError) as info:
        Nube(api_key=KEY, base_url=url).account.keys.create(name="x")
    assert info.value.retry_after == 0
    assert len(state.seen) == 1
    assert json.loads(state.seen[0][4]) == {"name": "x"}
    state.seen.clear()
    state.script = [(503, {}, {"error": "no search provider", "code": "SearchNotConfigured"})]
    with pytest.raises(ServiceUnavailableError):
        Nube(api_key=KEY, base_url=url).account.get()
    assert len(state.seen) == 1


def test_a_retry_after_longer_than_the_timeout_is_not_waited_out(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    state.script = [rate_limited("5")]
    start = time.monotonic()
    with pytest.raises(RateLimitError) as info:
        Nube(api_key=KEY, base_url=url, timeout=2).account.get()
    assert time.monotonic() - start < 1
    assert info.value.retry_after == 5 and "wait 5 s" in str(info.value)


def test_the_timeout_bounds_the_whole_call(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    state.delay = 1.5
    start = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        Nube(api_key=KEY, base_url=url, timeout=0.5).account.get()
    assert 0.4 <= time.monotonic() - start < 1.2
    assert isinstance(info.value, builtins.TimeoutError)
    assert info.value.status == 0
    with pytest.raises(TimeoutError):
        Nube(api_key=KEY, base_url=url).account.get(request_options={"timeout": 0.3})


def test_501_and_500_and_a_refused_connection(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    state.script = [(501, {}, {"error": "not yet", "code": "NotImplemented"}), (500, {}, {"error": "boom"})]
    client = Nube(api_key=KEY, base_url=url)
    with pytest.raises(NotImplementedError) as info:
        client.account.get()
    assert info.value.code == "NotImplemented" and info.value.request_id == "req-1"
    assert "does not implement account.get yet" in str(info.value)
    with pytest.raises(ServerError):
        client.account.get()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ConnectionError) as refused:
        Nube(api_key=KEY, base_url=f"http://127.0.0.1:{port}").account.get()
    assert "is the server running" in str(refused.value) and refused.value.status == 0


def test_keep_alive_reuses_one_connection_and_query_and_body_are_encoded(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    client = Nube(api_key=KEY, base_url=url)
    client.files.list(limit=2, status="DONE")
    client.sandboxes.files.get("sbx_1", "read", path="/a b")
    client.call("databases.query", params={"dbId": "db_1"}, body={"sql": "SELECT 1"})
    assert [s[1] for s in state.seen] == [
        "/api/v2/files?limit=2&status=DONE",
        "/api/v2/sandboxes/sbx_1/files/read?path=%2Fa+b",
        "/api/v2/databases/db_1/query",
    ]
    assert json.loads(state.seen[2][4]) == {"sql": "SELECT 1"}
    assert state.seen[2][3]["content-type"] == "application/json"
    assert len(set(state.ports)) == 1, "the three calls went over one kept-alive connection"


def test_sse_events_split_across_chunks(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    state.sse = [b'id: 7\ndata: {"type":"chunk",', b'"value":"ho"}\r', b"\n\r\n: ping\n\nevent: x\ndata: a\ndata: b\n\n", b"data: unfinished"]
    events = list(Nube(api_key=KEY, base_url=url).agents.message("agt_1", content="hi"))
    assert [(e.event, e.data) for e in events] == [("message", '{"type":"chunk","value":"ho"}'), ("x", "a\nb")]
    assert (events[0].id, events[1].id) == ("7", None)
    assert events[0].json() == {"type": "chunk", "value": "ho"}


def test_async_client_retries_times_out_and_streams(stub: Tuple[Stub, str]) -> None:
    state, url = stub

    async def main() -> None:
        client = AsyncNube(api_key=KEY, base_url=url, timeout=3)
        state.script = [rate_limited("1")]
        assert await client.account.keys.list() == {"ok": True, "items": []}
        assert len(state.seen) == 2 and gaps(state)[0] >= 0.95
        assert len(set(state.ports)) == 1, "the retry went over the kept-alive connection"
        state.script = [BUSY]
        with pytest.raises(ServiceUnavailableError):
            await client.account.keys.create(name="x")
        state.delay = 1.0
        with pytest.raises(TimeoutError):
            await client.account.get(request_options={"timeout": 0.3})
        state.delay = 0
        state.sse = [b"data: 1\n\n", b"data: 2\n", b"\n"]
        stream = await client.agents.message("agt_1", content="hi")
        assert [e.data async for e in stream] == ["1", "2"]
        await client.aclose()

    asyncio.run(main())


def test_a_kept_alive_connection_the_server_closed_is_replaced_without_an_error(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    state.drop_after_answer = True
    client = Nube(api_key=KEY, base_url=url, max_retries=0)
    aclient = AsyncNube(api_key=KEY, base_url=url, max_retries=0)

    async def twice() -> None:
        await aclient.account.keys.create(name="a")
        time.sleep(0.05)
        await aclient.account.keys.create(name="b")

    client.account.keys.create(name="x")
    time.sleep(0.05)  # the server has closed its side by now
    client.account.keys.create(name="y")
    asyncio.run(twice())
    assert [json.loads(s[4])["name"] for s in state.seen] == ["x", "y", "a", "b"]
    assert len(set(state.ports)) == 4


def test_per_call_headers_and_max_retries_and_the_key_stays_out_of_reprs(stub: Tuple[Stub, str]) -> None:
    state, url = stub
    client = Nube(api_key=KEY, base_url=url, headers={"X-Team": "uno"})
    state.script = [BUSY, BUSY]
    with pytest.raises(ServiceUnavailableError):
        client.account.get(request_options={"max_retries": 0, "headers": {"X-Trace": "t1"}})
    assert len(state.seen) == 1
    headers = {k.lower(): v for k, v in state.seen[0][3].items()}
    assert headers["x-team"] == "uno" and headers["x-trace"] == "t1"
    assert headers["user-agent"].startswith("nube-python/")
    assert KEY not in repr(client.settings) and KEY[13:] not in repr(client.settings)
