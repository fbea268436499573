"""Turning an operation and its arguments into a request line, headers and body (both clients share it)."""
import json
import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple
from urllib.parse import quote, urlencode, urlsplit

from ._caller import Params, RequestOptions
from ._omit import OMIT
from ._operation import Operation
from ._operations_gen import OPERATIONS
from ._version import __version__

DEFAULT_BASE_URL = "http://127.0.0.1:7070"
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2
USER_AGENT = f"nube-python/{__version__}"


class Endpoint(NamedTuple):
    """Where the client sends its requests: scheme, host, port and the base URL's own path prefix."""

    scheme: str
    host: str
    port: int
    prefix: str

    @staticmethod
    def parse(base_url: str) -> "Endpoint":
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        port = u.port or (443 if u.scheme == "https" else 80)
        return Endpoint(u.scheme, u.hostname, port, u.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


class Settings(NamedTuple):
    """A client's configuration, read once in its constructor."""

    endpoint: Endpoint
    base_url: str
    api_key: Optional[str]
    timeout: Optional[float]
    max_retries: int
    headers: Dict[str, str]

    def __repr__(self) -> str:
        # The key (and the Authorization header holding it) never shows in a repr, a log line or a traceback.
        key = f"'{self.api_key[:13]}...'" if self.api_key else "None"
        shown = {k: ("***" if k in ("authorization", "x-api-key") else v) for k, v in self.headers.items()}
        return (f"Settings(base_url={self.base_url!r}, api_key={key}, timeout={self.timeout!r}, "
                f"max_retries={self.max_retries}, headers={shown!r})")


def settings(
    api_key: Optional[str],
    base_url: Optional[str],
    timeout: Optional[float],
    max_retries: int,
    headers: Optional[Mapping[str, str]],
) -> Settings:
    url = (base_url or os.environ.get("NUBE_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    key = api_key if api_key is not None else os.environ.get("NUBE_API_KEY")
    base_headers = {"user-agent": USER_AGENT}
    if key:
        base_headers["authorization"] = f"Bearer {key}"
    base_headers.update({k.lower(): v for k, v in (headers or {}).items()})
    return Settings(Endpoint.parse(url), url, key, timeout if timeout else None, max(0, max_retries), base_headers)


def operation(operation_id: str) -> Operation:
    op = OPERATIONS.get(operation_id)
    if op is None:
        raise TypeError(f'unknown nube operation "{operation_id}"; nube.OPERATIONS lists them')
    return op


def fill_path(operation_id: str, op: Operation, params: Params) -> str:
    path = op.path
    for name in op.path_params:
        value = params.get(name) if params else None
        if value is None or value == "":
            raise TypeError(f'{operation_id}: path parameter "{name}" is required')
        path = path.replace("{" + name + "}", quote(str(value), safe=""))
    return path


def query_string(query: Params) -> str:
    """Arrays repeat the key, dicts go as JSON, booleans as true/false; None and OMIT are left out."""
    if not query:
        return ""
    pairs: List[Tuple[str, str]] = []
    for k, v in query.items():
        for item in v if isinstance(v, (list, tuple)) else [v]:
            if item is None or item is OMIT:
                continue
            if isinstance(item, bool):
                pairs.append((k, "true" if item else "false"))
            elif isinstance(item, (dict, list)):
                pairs.append((k, json.dumps(item, separators=(",", ":"))))
            else:
                pairs.append((k, str(item)))
    return "?" + urlencode(pairs) if pairs else ""


def strip_omitted(body: Any) -> Any:
    if isinstance(body, dict):
        return {k: v for k, v in body.items() if v is not OMIT}
    return body


class Prepared(NamedTuple):
    """One operation ready to send: method, target (path and query), headers, body bytes."""

    operation_id: str
    op: Operation
    method: str
    target: str
    headers: Dict[str, str]
    body: Optional[bytes]


def prepare(s: Settings, operation_id: str, params: Params, query: Params, body: Any, options: Optional[RequestOptions]) -> Prepared:
    op = operation(operation_id)
    target = s.endpoint.prefix + fill_path(operation_id, op, params) + query_string(query)
    headers = dict(s.headers)
    headers["accept"] = op.content_type if op.content_type == "application/json" else f"{op.content_type}, application/json"
    data: Optional[bytes] = None
    payload = strip_omitted(body)
    if payload is OMIT and op.body == "required":
        payload = {}
    if payload is not OMIT and not (payload == {} and op.body == "optional" and isinstance(body, dict)):
        data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        headers["content-type"] = "application/json"
    if options and options.get("headers"):
        headers.update({k.lower(): v for k, v in options["headers"].items()})
    return Prepared(operation_id, op, op.method, target, headers, data)


def call_timeout(s: Settings, options: Optional[RequestOptions]) -> Optional[float]:
    if options and "timeout" in options:
        t = options["timeout"]
        return t if t else None
    return s.timeout


def call_retries(s: Settings, op: Operation, options: Optional[RequestOptions]) -> int:
    from ._retry import IDEMPOTENT_METHODS

    if op.method not in IDEMPOTENT_METHODS:
        return 0
    return max(0, options["max_retries"]) if options and "max_retries" in options else s.max_retries


def decode_error_body(data: bytes) -> Any:
    text = data.decode("utf-8", "replace")
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
