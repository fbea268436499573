"""The clients: `Nube` (blocking, http.client) and `AsyncNube` (asyncio streams), with the same methods."""
from typing import Any, AsyncIterator, Iterator, Mapping, Optional

from ._aio_http import AsyncTransport
from ._aio_resources_gen import AsyncResources
from ._caller import Params, RequestOptions
from ._http import SyncTransport
from ._omit import OMIT
from ._request import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, Settings, settings
from ._resources_gen import Resources


class _Client:
    """What both clients share: configuration read once, `settings` and `base_url`.

    Args:
        api_key: owner API key (`nube_sk_live_...`); default the NUBE_API_KEY environment variable.
        base_url: default NUBE_BASE_URL, else http://127.0.0.1:7070.
        timeout: seconds for a whole call, its retries included (None: no limit). Default 60.
        max_retries: how often an idempotent call (GET, PUT, DELETE) answered 429 or 503 is sent again,
            after the server's Retry-After or a growing backoff. POST is never retried. Default 2.
        headers: extra headers sent with every request.
    """

    def __init__(
        self,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        *,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self._settings = settings(api_key, base_url, timeout, max_retries, headers)
        self._connect(self._settings)

    def _connect(self, s: Settings) -> None:
        raise NotImplementedError

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def base_url(self) -> str:
        return self._settings.base_url


class Nube(_Client, Resources):
    """Typed client for nube: `nube.sandboxes.create(...)`, `nube.databases.query(id, sql=...)`, ...

    Takes `api_key`, `base_url`, `timeout`, `max_retries` and `headers` (see the README). Safe to share
    between threads. Close it (or use `with Nube() as nube:`) to drop idle connections.
    """

    def _connect(self, s: Settings) -> None:
        self._transport = SyncTransport(s)
        Resources.__init__(self, self._transport)

    def call(self, operation_id: str, *, params: Params = None, query: Params = None, body: Any = OMIT,
             request_options: Optional[RequestOptions] = None) -> Any:
        """Calls any operation by its id (`"sandboxes.exec"`) with path params, query and JSON body as dicts."""
        return self._transport._call(operation_id, params, query, body, request_options)

    def paginate(self, operation_id: str, *, params: Params = None, query: Params = None,
                 request_options: Optional[RequestOptions] = None) -> Iterator[Any]:
        """Every item of a cursor-paginated list operation, page after page."""
        return self._transport._paginate(operation_id, params, query, OMIT, request_options)

    def close(self) -> None:
        self._transport.pool.close()

    def __enter__(self) -> "Nube":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncNube(_Client, AsyncResources):
    """The asyncio client: the same methods as `Nube`, each a coroutine (`await nube.account.get()`).

    Streams are async iterators (`async for event in await nube.agents.message(...)`). Connections
    belong to the event loop that opened them.
    """

    def _connect(self, s: Settings) -> None:
        self._transport = AsyncTransport(s)
        AsyncResources.__init__(self, self._transport)

    async def call(self, operation_id: str, *, params: Params = None, query: Params = None, body: Any = OMIT,
                   request_options: Optional[RequestOptions] = None) -> Any:
        """Calls any operation by its id with path params, query and JSON body as dicts."""
        return await self._transport._call(operation_id, params, query, body, request_options)

    def paginate(self, operation_id: str, *, params: Params = None, query: Params = None,
                 request_options: Optional[RequestOptions] = None) -> AsyncIterator[Any]:
        """Every item of a cursor-paginated list operation, page after page (`async for`)."""
        return self._transport._paginate(operation_id, params, query, OMIT, request_options)

    async def aclose(self) -> None:
        self._transport.pool.close()

    async def __aenter__(self) -> "AsyncNube":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
