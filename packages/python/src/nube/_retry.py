"""When a failed call is sent again: idempotent methods only, on 429 and on a passing 503."""
import random
import re
import time
from typing import Callable, Optional

from ._errors import NubeError, RateLimitError, ServiceUnavailableError

#: Methods whose repetition has the effect of one call: only these are retried. POST may create twice.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})

#: The longest Retry-After the SDK waits out by itself; a longer one is the caller's decision.
MAX_RETRY_AFTER = 60.0
_BASE_DELAY = 0.5
_MAX_BACKOFF = 8.0

# 503s that say the server lacks something only its operator can add: asking again gets the same answer.
_LASTING_503 = re.compile(r"NotConfigured$|^HostUnsupported$")


def retry_delay(err: NubeError, attempt: int, rand: Callable[[], float] = random.random) -> Optional[float]:
    """Seconds to wait before retrying after `err` (attempt 0 is the first retry), or None: not worth it.

    Retry-After is honoured as the server gave it; without one the wait doubles from 0.5 s up to 8 s, half
    of it random so that many clients do not come back at once.
    """
    if not isinstance(err, (RateLimitError, ServiceUnavailableError)):
        return None
    if isinstance(err, ServiceUnavailableError) and err.code and _LASTING_503.search(err.code):
        return None
    after: Optional[float] = err.retry_after
    if after is not None:
        return after if after <= MAX_RETRY_AFTER else None
    cap = min(_MAX_BACKOFF, _BASE_DELAY * (1 << min(attempt, 16)))
    return cap / 2 + rand() * (cap / 2)


def wait_before_retry(err: NubeError, attempt: int, retries: int, deadline: Optional[float]) -> Optional[float]:
    """Seconds to wait before sending again, or None: give up and raise `err` (no retries left, not worth
    it, or the wait would outlast the call's deadline, a time.monotonic() value)."""
    if attempt >= retries:
        return None
    wait = retry_delay(err, attempt)
    if wait is None or (deadline is not None and time.monotonic() + wait >= deadline):
        return None
    return wait
