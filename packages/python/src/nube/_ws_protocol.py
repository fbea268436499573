"""WebSocket (RFC 6455) framing for the terminal, shared by the sync and the asyncio client: the
handshake, client frames (always masked) and an incremental parser of server frames."""
import base64
import hashlib
import os
import struct
from typing import Dict, List, Optional, Tuple

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA
MAX_MESSAGE = 64 * 1024 * 1024


class WebSocketError(Exception):
    """The server broke the WebSocket protocol, or refused the upgrade."""


def new_key() -> str:
    return base64.b64encode(os.urandom(16)).decode()


def handshake(host_header: str, target: str, key: str, headers: Dict[str, str]) -> bytes:
    lines = [
        f"GET {target} HTTP/1.1",
        f"host: {host_header}",
        "upgrade: websocket",
        "connection: Upgrade",
        f"sec-websocket-key: {key}",
        "sec-websocket-version: 13",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items() if k not in ("host", "connection", "upgrade")]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_head(head: bytes) -> Tuple[int, Dict[str, str]]:
    """Status and lower-cased headers of an HTTP response head (without the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise WebSocketError(f"not an HTTP answer: {lines[0]!r}")
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def check_accept(key: str, headers: Dict[str, str]) -> None:
    expected = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    if headers.get("sec-websocket-accept") != expected:
        raise WebSocketError("the server's Sec-WebSocket-Accept does not match the key sent")


def _mask(data: bytes, key: bytes) -> bytes:
    n = len(data)
    if n == 0:
        return data
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(n, "big")


def frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    key = os.urandom(4)
    return head + key + _mask(payload, key)


def close_frame(code: int = 1000, reason: str = "") -> bytes:
    return frame(CLOSE, struct.pack("!H", code) + reason.encode()[:120])


class FrameParser:
    """Feed it bytes; `messages()` returns whole messages as (opcode, payload), fragments joined."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._parts: List[bytes] = []
        self._opcode: Optional[int] = None

    def feed(self, data: bytes) -> List[Tuple[int, bytes]]:
        self._buf += data
        out: List[Tuple[int, bytes]] = []
        while True:
            got = self._one()
            if got is None:
                return out
            out.append(got)

    def _one(self) -> Optional[Tuple[int, bytes]]:
        while True:
            buf = self._buf
            if len(buf) < 2:
                return None
            fin, opcode = buf[0] & 0x80, buf[0] & 0x0F
            masked, n = buf[1] & 0x80, buf[1] & 0x7F
            pos = 2
            if n == 126:
                if len(buf) < 4:
                    return None
                n = struct.unpack_from("!H", buf, 2)[0]
                pos = 4
            elif n == 127:
                if len(buf) < 10:
                    return None
                n = struct.unpack_from("!Q", buf, 2)[0]
                pos = 10
            if n > MAX_MESSAGE:
                raise WebSocketError(f"a frame of {n} bytes is more than this client takes")
            key = b""
            if masked:
                key = bytes(buf[pos : pos + 4])
                pos += 4
            if len(buf) < pos + n:
                return None
            payload = bytes(buf[pos : pos + n])
            del buf[: pos + n]
            if masked:
                payload = _mask(payload, key)
            if opcode >= 0x8:
                return opcode, payload
            if opcode != 0:
                self._opcode, self._parts = opcode, []
            if self._opcode is None:
                raise WebSocketError("a continuation frame with no message to continue")
            self._parts.append(payload)
            if fin:
                whole, op = b"".join(self._parts), self._opcode
                self._opcode, self._parts = None, []
                return op, whole


def close_code(payload: bytes) -> Optional[int]:
    return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
