"""nube: the Python client of nube's API (Cloud Resource Service API v2), standard library only.

    from nube import Nube
    nube = Nube()                      # NUBE_API_KEY and NUBE_BASE_URL from the environment
    sbx = nube.sandboxes.create()
    print(nube.sandboxes.exec(sbx["id"], command="echo hola")["stdout"])
"""
from ._aio_streams import AsyncBinaryResponse, AsyncEventStream
from ._aio_terminal import AsyncTerminal
from ._caller import RequestOptions
from ._client import AsyncNube, Nube
from ._errors import (
    AuthenticationError,
    ConflictError,
    ConnectionError,
    ForbiddenError,
    Issue,
    NotFoundError,
    NotImplementedError,
    NubeError,
    PaymentRequiredError,
    RateLimitError,
    ServerError,
    ServiceUnavailableError,
    TimeoutError,
    ValidationError,
)
from ._omit import OMIT
from ._operation import Operation
from ._operations_gen import OPERATIONS
from ._sse import SseEvent
from ._streams import BinaryResponse, EventStream
from ._terminal import Terminal
from ._version import __version__
from ._ws_protocol import WebSocketError

__all__ = [
    "AsyncBinaryResponse",
    "AsyncEventStream",
    "AsyncNube",
    "AsyncTerminal",
    "AuthenticationError",
    "BinaryResponse",
    "ConflictError",
    "ConnectionError",
    "EventStream",
    "ForbiddenError",
    "Issue",
    "Nube",
    "NotFoundError",
    "NotImplementedError",
    "NubeError",
    "OMIT",
    "OPERATIONS",
    "Operation",
    "PaymentRequiredError",
    "RateLimitError",
    "RequestOptions",
    "ServerError",
    "ServiceUnavailableError",
    "SseEvent",
    "Terminal",
    "TimeoutError",
    "ValidationError",
    "WebSocketError",
    "__version__",
]
