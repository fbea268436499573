"""Errors the SDK raises: one class per kind of failure, with a message that says what to do.

The names are the TypeScript SDK's. TimeoutError, ConnectionError and NotImplementedError also derive
from the built-in exceptions of the same name, so `except TimeoutError` catches them either way.
"""
import builtins
import email.utils
import re
import time
from typing import Any, List, Mapping, Optional, TypedDict, Union


class Issue(TypedDict, total=False):
    """One validation issue of a 400 answer: where (`path`) and what (`message`)."""

    path: List[Union[str, int]]
    message: str
    code: str


class NubeError(Exception):
    """Base of every error the SDK raises; `status` 0 means no HTTP answer (network or timeout)."""

    status: int
    code: Optional[str]
    issues: List[Issue]
    request_id: Optional[str]
    body: Any
    operation_id: Optional[str]
    #: Seconds the server asked to wait (Retry-After), on 429 and 503 answers.
    retry_after: Optional[float]

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: Optional[str] = None,
        issues: Optional[List[Issue]] = None,
        request_id: Optional[str] = None,
        body: Any = None,
        operation_id: Optional[str] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(f"{message} (request id {request_id})" if request_id else message)
        self.status = status
        self.code = code
        self.issues = issues or []
        self.request_id = request_id
        self.body = body
        self.operation_id = operation_id
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class AuthenticationError(NubeError):
    """401: the credential is missing, malformed or revoked."""


class PaymentRequiredError(NubeError):
    """402: the plan or balance does not cover this."""


class ForbiddenError(NubeError):
    """403: the credential may not do this."""


class NotFoundError(NubeError):
    """404: absent, or owned by another account."""


class ValidationError(NubeError):
    """400: params, query or body failed validation; see `issues`."""


class ConflictError(NubeError):
    """409: the resource's state does not allow this now."""


class RateLimitError(NubeError):
    """429: too many requests; wait `retry_after` seconds."""


class NotImplementedError(NubeError, builtins.NotImplementedError):
    """501: the server knows the operation but does not implement it yet (also a built-in NotImplementedError)."""


class ServerError(NubeError):
    """5xx: the server failed; retrying later may help."""


class ServiceUnavailableError(ServerError):
    """503: busy or not ready at this instant; wait `retry_after` seconds."""


class TimeoutError(NubeError, builtins.TimeoutError):
    """The call did not finish within its timeout (also a built-in TimeoutError)."""


class ConnectionError(NubeError, builtins.ConnectionError):
    """No HTTP answer at all: connection refused, DNS, TLS, reset (also a built-in ConnectionError)."""


def retry_after_seconds(header: Optional[str], body: Any) -> Optional[float]:
    """Seconds to wait, from Retry-After (seconds or an HTTP date), else a `retryAfter` number in the body."""
    value = (header or "").strip()
    if value:
        if re.fullmatch(r"\d+(\.\d+)?", value):
            return float(value)
        try:
            at = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            at = None
        if at is not None:
            return float(max(0, int(-(-(at.timestamp() - time.time()) // 1))))
    from_body = body.get("retryAfter") if isinstance(body, dict) else None
    if isinstance(from_body, (int, float)) and not isinstance(from_body, bool) and from_body >= 0:
        return float(from_body)
    return None


def _format_issues(issues: List[Issue]) -> str:
    lines = []
    for i in issues:
        path = i.get("path") or []
        lines.append(f"  - {'.'.join(str(p) for p in path) if path else '(root)'}: {i.get('message', '')}")
    return "\n".join(lines)


def error_from_response(operation_id: str, status: int, body: Any, headers: Mapping[str, str]) -> NubeError:
    """Turns a non-2xx answer into the matching error, with a message that says what to do."""
    b = body if isinstance(body, dict) else {}
    said_text = b.get("error") if isinstance(b.get("error"), str) else (body if isinstance(body, str) else "")
    code = b.get("code") if isinstance(b.get("code"), str) else None
    issues = b.get("issues") if isinstance(b.get("issues"), list) else []
    details: Any = {
        "status": status,
        "code": code,
        "issues": issues,
        "request_id": headers.get("x-request-id"),
        "body": body,
        "operation_id": operation_id,
    }
    said = f": {said_text}" if said_text else ""
    op = f"{operation_id} failed with {status}{said}"
    if status == 400:
        listed = f"\n{_format_issues(issues)}" if issues else ""
        return ValidationError(f"{op}. Fix the request and send it again.{listed}", **details)
    if status == 401:
        return AuthenticationError(
            f"{op}. The API key was refused: check NUBE_API_KEY / the api_key argument (it looks like "
            "nube_sk_live_...), and that the key has not been revoked.",
            **details,
        )
    if status == 402:
        return PaymentRequiredError(f"{op}. Your plan or balance does not cover this: upgrade the plan or top up.", **details)
    if status == 403:
        return ForbiddenError(
            f"{op}. This credential may not do this; use the owner API key or a plan that allows it.", **details
        )
    if status == 404:
        return NotFoundError(
            f"{op}. Check the id: it does not exist, was deleted, or belongs to another account.", **details
        )
    if status == 409:
        return ConflictError(f"{op}. The resource's current state does not allow this; read it again and retry.", **details)
    if status == 429:
        ra = retry_after_seconds(headers.get("retry-after"), body)
        wait = f"wait {ra:g} s" if ra is not None else "wait a moment"
        return RateLimitError(f"{op}. Rate limited: {wait} before retrying.", retry_after=ra, **details)
    if status == 503:
        ra = retry_after_seconds(headers.get("retry-after"), body)
        wait = f"retry in {ra:g} s" if ra is not None else "retry in a moment"
        return ServiceUnavailableError(f"{op}. The server is busy or not ready: {wait}.", retry_after=ra, **details)
    if status == 501:
        return NotImplementedError(
            f"{op}. This nube server does not implement {operation_id} yet; upgrade the server or use another operation.",
            **details,
        )
    if status >= 500:
        return ServerError(f"{op}. The server failed; retry later, and report the request id if it persists.", **details)
    return NubeError(f"{op}.", **details)


def timed_out(operation_id: str, timeout: Optional[float]) -> "TimeoutError":
    return TimeoutError(f"{operation_id} took longer than {timeout or 0:g} s; raise the timeout or retry.", operation_id=operation_id)


def unreachable(operation_id: str, base_url: str, err: BaseException) -> "ConnectionError":
    return ConnectionError(
        f"{operation_id}: could not reach nube at {base_url} ({err or type(err).__name__}); is the server running there?",
        operation_id=operation_id,
    )


def broke(operation_id: str, err: BaseException) -> "ConnectionError":
    return ConnectionError(f"{operation_id}: the connection broke while reading the answer ({err or type(err).__name__})", operation_id=operation_id)
