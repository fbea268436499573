"""The Python SDK's overhead per call (bench/python.ts runs this): the same requests sent with a bare
http.client connection (kept alive, body read, nothing parsed) and through nube.Nube / nube.AsyncNube,
in alternating blocks so that drift in the machine's load falls on all of them alike.

argv: package src dir, base URL, API key, database id, calls per block, rounds. Prints one JSON object.
"""
import asyncio
import http.client
import json
import sys
import time
from typing import Callable, Dict, List
from urllib.parse import urlsplit

sys.path.insert(0, sys.argv[1])
from nube import AsyncNube, Nube  # noqa: E402

base, key, db_id = sys.argv[2], sys.argv[3], sys.argv[4]
PER_BLOCK, ROUNDS = int(sys.argv[5]), int(sys.argv[6])
u = urlsplit(base)
conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=30)
auth = {"authorization": f"Bearer {key}", "accept": "application/json"}
query_body = json.dumps({"sql": "SELECT 1"}).encode()
post_headers = {**auth, "content-type": "application/json"}


def bare_get() -> None:
    conn.request("GET", "/api/v2/account", headers=auth)
    r = conn.getresponse()
    r.read()
    assert r.status == 200, r.status


def bare_query() -> None:
    conn.request("POST", f"/api/v2/databases/{db_id}/query", body=query_body, headers=post_headers)
    r = conn.getresponse()
    r.read()
    assert r.status == 200, r.status


sdk = Nube(api_key=key, base_url=base)
anube = AsyncNube(api_key=key, base_url=base)


def sdk_get() -> None:
    sdk.account.get()


def sdk_query() -> None:
    sdk.databases.query(db_id, sql="SELECT 1")


async def async_block(n: int, out: List[float]) -> None:
    for _ in range(n):
        t = time.perf_counter_ns()
        await anube.account.get()
        out.append((time.perf_counter_ns() - t) / 1e6)


loop = asyncio.new_event_loop()
contenders: Dict[str, Callable[[List[float], int], None]] = {}


def timed(fn: Callable[[], None]) -> Callable[[List[float], int], None]:
    def block(out: List[float], n: int) -> None:
        for _ in range(n):
            t = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t) / 1e6)

    return block


contenders["bare GET"] = timed(bare_get)
contenders["sdk GET"] = timed(sdk_get)
contenders["async GET"] = lambda out, n: loop.run_until_complete(async_block(n, out))
contenders["bare query"] = timed(bare_query)
contenders["sdk query"] = timed(sdk_query)

samples: Dict[str, List[float]] = {k: [] for k in contenders}
for name, block in contenders.items():  # warm-up
    block([], PER_BLOCK // 2)
for r in range(ROUNDS):
    order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
    for name in order:
        contenders[name](samples[name], PER_BLOCK)


def pct(sorted_ms: List[float], p: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, max(0, -(-int(p * len(sorted_ms)) // 100) - 1))]


out = {}
for name, ms in samples.items():
    s = sorted(ms)
    out[name] = {"count": len(s), "p50Ms": pct(s, 50), "p99Ms": pct(s, 99), "throughputPerSec": len(s) / (sum(s) / 1000)}
out["python"] = sys.version.split()[0]
print(json.dumps(out))
