"""What the generated resources call: the sync and the asyncio client both provide it."""
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, Iterator, Mapping, Optional, Protocol, TypedDict

if TYPE_CHECKING:
    from ._request import Settings


class RequestOptions(TypedDict, total=False):
    """Per-call options, the last keyword argument of every method (`request_options=`)."""

    timeout: Optional[float]
    """Seconds for the whole call, retries included (None or 0: no limit); overrides the client's."""
    max_retries: int
    """Retries of an idempotent call answered 429 or 503; overrides the client's."""
    headers: Mapping[str, str]
    """Extra headers for this call."""


Params = Optional[Dict[str, Any]]


class SyncCaller(Protocol):
    settings: "Settings"

    def _call(self, operation_id: str, params: Params, query: Params, body: Any, options: Optional[RequestOptions]) -> Any: ...

    def _paginate(
        self, operation_id: str, params: Params, query: Params, body: Any, options: Optional[RequestOptions]
    ) -> Iterator[Any]: ...


class AsyncCaller(Protocol):
    settings: "Settings"

    async def _call(self, operation_id: str, params: Params, query: Params, body: Any, options: Optional[RequestOptions]) -> Any: ...

    def _paginate(
        self, operation_id: str, params: Params, query: Params, body: Any, options: Optional[RequestOptions]
    ) -> AsyncIterator[Any]: ...
