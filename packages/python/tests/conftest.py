"""Fixtures: a real nube for the suite (started here unless NUBE_TEST_BASE_URL names one) and clients."""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Iterator

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
REPO = PACKAGE.parent.parent
sys.path.insert(0, str(PACKAGE / "src"))

from nube import Nube  # noqa: E402


@pytest.fixture(scope="session")
def live() -> Iterator[Dict[str, str]]:
    """{"baseUrl", "apiKey"} of a running nube with sandboxes and the LLM stub (packages/python/test/serve-nube.ts)."""
    if os.environ.get("NUBE_TEST_BASE_URL") and os.environ.get("NUBE_TEST_API_KEY"):
        yield {"baseUrl": os.environ["NUBE_TEST_BASE_URL"], "apiKey": os.environ["NUBE_TEST_API_KEY"]}
        return
    proc = subprocess.Popen(
        ["node", "--import", "tsx", str(PACKAGE / "test" / "serve-nube.ts")],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
    )
    assert proc.stdout is not None and proc.stdin is not None
    line: Dict[str, str] = {}

    def first_line() -> None:
        raw = proc.stdout.readline() if proc.stdout else b""
        if raw:
            line.update(json.loads(raw))

    # Under load the server's TypeScript is compiled on start and a template may be built: minutes.
    reader = threading.Thread(target=first_line, daemon=True)
    reader.start()
    reader.join(900)
    if not line:
        proc.kill()
        raise RuntimeError("the test nube did not start (see its output above)")
    try:
        yield line
    finally:
        proc.stdin.close()
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def nube(live: Dict[str, str]) -> Iterator[Nube]:
    with Nube(api_key=live["apiKey"], base_url=live["baseUrl"], timeout=120) as client:
        yield client


def wait_until(check, timeout: float = 120.0, every: float = 0.1):  # type: ignore[no-untyped-def]
    """Calls check() until it returns something truthy; that value."""
    end = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"not true within {timeout} s")
        time.sleep(every)
