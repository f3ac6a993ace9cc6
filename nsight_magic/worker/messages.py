"""Messages between the notebook and a session worker: one JSON object per message, sent over a
Unix socket as a signed frame (``Channel``): a 4-byte big-endian length, an HMAC of the frame
under a key only the two ends know, and the UTF-8 text.

The notebook makes the key (``new_key``) and sends it as the first bytes on the socket, before
the worker runs any cell: never in the environment (nsys records it in the report) nor argv.

Stdlib only: the worker imports this inside the profiled interpreter. Requests carry ``op``;
replies carry ``ok`` (False with ``error`` when the request itself could not be served) and the
op's fields. The protocol is strictly request/reply, one request at a time per worker.
"""

from __future__ import annotations

import hmac
import json
import secrets
import select
import socket
import struct
import time
from typing import Any

HEADER = struct.Struct(">I")
MAX_MESSAGE = 64 << 20  # a reply holds names and tracebacks, never data
MAC_SIZE = 32  # HMAC-SHA256
KEY_SIZE = 32
FRAME_HEAD = 4 + MAC_SIZE  # a frame's length and signature, before its payload
# The worker writes this (and the reply's number) on its stdout just before each reply: the
# output travels by a pipe, the reply by the socket, so the notebook waits for the mark to know
# it has every line the request printed, instead of sleeping on the chance.
OUTPUT_MARK = "\x00nsight_magic-reply "


def output_mark(number: int) -> bytes:
    """The line that ends a reply's output on the worker's stdout."""
    return f"{OUTPUT_MARK}{number}\x00\n".encode()


def split_mark(line: str) -> tuple[str, int | None]:
    """``(text, number)`` of an output line that ends with a reply's mark (the text printed
    before it on the same line, "" if none: a line the request left open); ``(line, None)`` for
    any other line."""
    head, sep, tail = line.partition(OUTPUT_MARK)
    tail = tail.rstrip("\r\n")
    if not sep or not tail.endswith("\x00") or not tail[:-1].isdigit():
        return line, None
    return head, int(tail[:-1])


def new_key() -> bytes:
    return secrets.token_bytes(KEY_SIZE)


def read_key(sock: socket.socket, timeout: float) -> bytes:
    """The key the notebook sends first (the worker's side, once, before any cell)."""
    sock.settimeout(timeout)
    try:
        key = b""
        while len(key) < KEY_SIZE:
            chunk = sock.recv(KEY_SIZE - len(key))
            if not chunk:
                raise ConnectionClosed("the notebook closed the connection before the key")
            key += chunk
    finally:
        sock.settimeout(None)
    return key


def readable(sock: socket.socket, timeout: float) -> bool:
    """True when ``sock`` has something to read (a listener: a connection) within ``timeout``
    (poll, as ``Channel``: select refuses descriptors above 1024, which a busy notebook has)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000))))


class ConnectionClosed(EOFError):
    """The other side closed the socket (or died)."""


class ChannelError(Exception):
    """A frame that is not the other side's: damaged, forged or out of order (the cell wrote
    to the channel's descriptor, or read from it). The channel is unusable from then on."""


def fit(message: dict[str, Any], limit: int = MAX_MESSAGE) -> dict[str, Any]:
    """``message``, its long strings cut (each says how much) until it encodes within
    ``limit``: a reply carrying an exception with a huge message must not kill the worker. As
    a last resort only its short scalar fields are kept, with ``truncated`` saying why."""
    size = len(_encode(message))
    if size <= limit:
        return message
    for cap in (1 << 20, 64 << 10, 4 << 10):
        cut = _cut_strings(message, cap)
        if len(_encode(cut)) <= limit:
            return cut
    keep = {k: v for k, v in message.items() if _short(v)}
    note = f"the reply was {size} bytes, over the {limit}-byte limit of a message"
    keep["truncated"] = note
    for text in ("exc_message", "traceback", "error"):  # what the user reads says it too
        if text in message and text not in keep:
            keep[text] = f"[{note}: cut]"
    return keep


def _short(value: Any) -> bool:
    return isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) < 1000)


def _cut_strings(value: Any, cap: int) -> Any:
    if isinstance(value, str) and len(value) > cap:
        return f"{value[:cap]}... [{len(value) - cap} more characters cut: a reply is limited]"
    if isinstance(value, dict):
        return {k: _cut_strings(v, cap) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_cut_strings(v, cap) for v in value]
    return value


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, default=str).encode()  # ASCII: any string encodes


class Channel:
    """One end of the notebook-worker socket, every frame signed.

    A frame is the payload's length (4 bytes), an HMAC-SHA256 of (direction, frame number,
    payload) under a per-worker random ``key``, and the JSON payload. The cell runs in the
    worker, so it could write to (or read from) the socket by mistake or on purpose: a frame
    it wrote has no valid signature, a frame it swallowed puts the numbers out of step, and
    either gives one ``ChannelError`` instead of a reply that is not the worker's. A frame is
    assembled across calls, so an interrupt or a poll timeout in its middle loses nothing."""

    def __init__(self, sock: socket.socket, key: bytes, *, notebook_side: bool) -> None:
        self.sock = sock
        self.key = key
        self._out, self._in = (b"n", b"w") if notebook_side else (b"w", b"n")
        self._sent = 0
        self._received = 0
        self._head = bytearray()  # the length and the signature of the frame being read
        self._body: bytearray | None = None  # its payload, once the length is known
        self._got = 0  # bytes of the payload read so far
        self.broken = ""
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)

    def fileno(self) -> int:
        return self.sock.fileno()

    def _mac(self, direction: bytes, number: int, data: bytes | bytearray) -> bytes:
        mac = hmac.new(self.key, direction + number.to_bytes(8, "big"), "sha256")
        mac.update(data)
        return mac.digest()

    def _damaged(self, why: str) -> ChannelError:
        self.broken = self.broken or why
        return ChannelError(self.broken)

    def send(self, message: dict[str, Any], *, cut: bool = False) -> None:
        """Send ``message``; one over ``MAX_MESSAGE`` is a ValueError, or with ``cut`` is
        sent cut to fit (``fit``: it says so)."""
        if self.broken:
            raise ChannelError(self.broken)
        data = _encode(message)
        if len(data) > MAX_MESSAGE:
            if not cut:
                raise ValueError(f"message of {len(data)} bytes is over the {MAX_MESSAGE} limit")
            data = _encode(fit(message))
        head = HEADER.pack(len(data)) + self._mac(self._out, self._sent, data)
        try:
            if len(data) < 1 << 16:
                self.sock.sendall(head + data)
            else:  # no copy of a large payload
                self.sock.sendall(head)
                self.sock.sendall(data)
        except BaseException:
            # part of a frame may have gone: the other side can no longer find the next one
            self.broken = "a frame was cut off while being sent"
            raise
        self._sent += 1

    def poll(self, timeout: float | None) -> dict[str, Any] | None:
        """The next message once it has arrived whole within ``timeout`` seconds (None: wait
        as long as it takes), else None. ``ConnectionClosed`` at end of stream,
        ``ChannelError`` for a frame that is not the other side's."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            message = self._take()
            if message is not None:
                return message
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            # poll, not select: the worker's end sits on a descriptor above select's 1024
            if not self._poller.poll(None if left is None else max(1, int(left * 1000))):
                return None
            self._read_some()

    def recv(self) -> dict[str, Any]:
        """The next message (blocking)."""
        message = self.poll(None)
        assert message is not None
        return message

    def _read_some(self) -> None:
        """Read what is waiting of the current frame, never past its end."""
        if self._body is None:
            chunk = self.sock.recv(FRAME_HEAD - len(self._head))
            if not chunk:
                raise ConnectionClosed("the other side closed the connection")
            self._head += chunk
            if len(self._head) >= HEADER.size:
                (size,) = HEADER.unpack_from(self._head)
                if size > MAX_MESSAGE:  # said at once: no wait for bytes that never come
                    raise self._damaged(
                        f"a frame announced {size} bytes, over the {MAX_MESSAGE} limit"
                    )
                if len(self._head) == FRAME_HEAD:
                    self._body, self._got = bytearray(size), 0
            return
        n = self.sock.recv_into(memoryview(self._body)[self._got :])
        if not n:
            raise ConnectionClosed("the other side closed the connection")
        self._got += n

    def _take(self) -> dict[str, Any] | None:
        """The frame read whole, checked and decoded; None while it is still arriving."""
        if self.broken:
            raise ChannelError(self.broken)
        if self._body is None or self._got < len(self._body):
            return None
        mac, data = bytes(self._head[HEADER.size :]), self._body
        self._head, self._body = bytearray(), None
        if not hmac.compare_digest(mac, self._mac(self._in, self._received, data)):
            raise self._damaged("a frame without the other side's signature (written by someone "
                                "else, or out of order)")  # fmt: skip
        self._received += 1
        try:
            message = json.loads(data)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            raise self._damaged("a signed frame that is not a JSON object")
        return message
