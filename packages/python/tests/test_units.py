"""The pieces that need no server: WebSocket framing, query strings, retry waits, Retry-After, error text."""
import email.utils
import struct
import time

from nube import NotFoundError, RateLimitError, ServiceUnavailableError, ValidationError
from nube._errors import error_from_response, retry_after_seconds
from nube._request import query_string
from nube._retry import retry_delay
from nube._ws_protocol import BINARY, CLOSE, PING, TEXT, FrameParser, frame


def server_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


def test_frames_are_parsed_across_chunks_with_fragments_and_control_frames_between() -> None:
    big = bytes(range(256)) * 300  # 76,800 bytes: a 64-bit length
    wire = (
        server_frame(TEXT, b'{"type":', fin=False)
        + server_frame(PING, b"p")
        + server_frame(0, b'"exit"}')
        + server_frame(BINARY, b"x" * 300)  # a 16-bit length
        + server_frame(BINARY, big)
        + server_frame(CLOSE, struct.pack("!H", 1000))
    )
    parser = FrameParser()
    got = []
    for i in range(0, len(wire), 7):
        got += parser.feed(wire[i : i + 7])
    assert got == [(PING, b"p"), (TEXT, b'{"type":"exit"}'), (BINARY, b"x" * 300), (BINARY, big), (CLOSE, b"\x03\xe8")]


def test_client_frames_are_masked_and_read_back() -> None:
    for n in (0, 5, 125, 126, 65535, 65536):
        payload = bytes(i % 251 for i in range(n))
        f = frame(BINARY, payload)
        assert f[1] & 0x80, "client frames are masked"
        assert payload == b"" or payload not in f
        assert FrameParser().feed(f) == [(BINARY, payload)]


def test_query_strings() -> None:
    assert query_string(None) == ""
    assert query_string({"a": True, "b": [1, 2], "c": None, "d": {"x": 1}, "e": "a b/ñ"}) == "?a=true&b=1&b=2&d=%7B%22x%22%3A1%7D&e=a+b%2F%C3%B1"


def test_retry_waits() -> None:
    busy = ServiceUnavailableError("busy", status=503, code="Unavailable")
    assert retry_delay(busy, 0, lambda: 0.0) == 0.25 and retry_delay(busy, 0, lambda: 1.0) == 0.5
    assert retry_delay(busy, 10, lambda: 1.0) == 8.0
    assert retry_delay(RateLimitError("x", status=429, retry_after=3), 0) == 3
    assert retry_delay(RateLimitError("x", status=429, retry_after=61), 0) is None
    assert retry_delay(ServiceUnavailableError("x", status=503, code="LlmNotConfigured"), 0) is None
    assert retry_delay(NotFoundError("x", status=404), 0) is None


def test_retry_after_from_header_or_body() -> None:
    assert retry_after_seconds("7", None) == 7
    assert retry_after_seconds("1.5", None) == 1.5
    soon = retry_after_seconds(email.utils.formatdate(time.time() + 30, usegmt=True), None)
    assert soon is not None and 28 <= soon <= 31
    assert retry_after_seconds(email.utils.formatdate(time.time() - 30, usegmt=True), None) == 0
    assert retry_after_seconds(None, {"retryAfter": 4}) == 4
    assert retry_after_seconds("soon", {"retryAfter": True}) is None


def test_error_messages_say_what_to_do() -> None:
    e = error_from_response("account.keys.create", 400, {"error": "invalid", "code": "ValidationError",
                                                          "issues": [{"path": ["name"], "message": "too short"}]}, {})
    assert isinstance(e, ValidationError)
    assert "Fix the request" in str(e) and "  - name: too short" in str(e)
    text = error_from_response("files.get", 502, "<html>bad gateway</html>", {"x-request-id": "r-9"})
    assert text.status == 502 and "<html>bad gateway</html>" in str(text) and "(request id r-9)" in str(text)
