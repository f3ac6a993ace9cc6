"""Messages between the notebook and a session worker: one JSON object per message, sent over a
Unix socket as a 4-byte big-endian length and the UTF-8 text.

Stdlib only: the worker imports this inside the profiled interpreter. Requests carry ``op``;
replies carry ``ok`` (False with ``error`` when the request itself could not be served) and the
op's fields. The protocol is strictly request/reply, one request at a time per worker.
"""

from __future__ import annotations

import json
import select
import socket
import struct
from typing import Any

HEADER = struct.Struct(">I")
MAX_MESSAGE = 64 << 20  # a reply holds names and tracebacks, never data
# The worker writes this (and the reply's number) on its stdout just before each reply: the
# output travels by a pipe, the reply by the socket, so the notebook waits for the mark to know
# it has every line the request printed, instead of sleeping on the chance.
OUTPUT_MARK = "\x00nsight_magic-reply "


def output_mark(number: int) -> bytes:
    """The line that ends a reply's output on the worker's stdout."""
    return f"{OUTPUT_MARK}{number}\x00\n".encode()


def split_mark(line: str) -> tuple[str, int | None]:
    """``(text, number)`` of an output line that ends with a reply's mark (the text printed
    before it on the same line, "" if none); ``(line, None)`` for any other line."""
    head, sep, tail = line.partition(OUTPUT_MARK)
    if not sep or not tail.endswith("\x00") or not tail[:-1].isdigit():
        return line, None
    return head, int(tail[:-1])


class ConnectionClosed(EOFError):
    """The other side closed the socket (or died)."""


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message, default=str).encode()
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"message of {len(data)} bytes is over the {MAX_MESSAGE} limit")
    sock.sendall(HEADER.pack(len(data)) + data)


def _read_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionClosed("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def readable(sock: socket.socket, timeout: float) -> bool:
    """True when a message (or end of stream) is waiting: callers poll with this and then
    ``recv``, so a message is never left half read by a timeout."""
    ready, _, _ = select.select([sock], [], [], timeout)
    return bool(ready)


def recv(sock: socket.socket) -> dict[str, Any]:
    """The next message (blocking). Raises ConnectionClosed at end of stream."""
    (size,) = HEADER.unpack(_read_exact(sock, HEADER.size))
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes is over the {MAX_MESSAGE} limit")
    message = json.loads(_read_exact(sock, size))
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    return message
