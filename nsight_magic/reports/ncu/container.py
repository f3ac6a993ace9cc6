"""The block layout of a ``.ncu-rep`` file, walked without ``ncu_report``, to tell whether the file
is whole and how many profiled launches it holds.

Layout (Nsight Compute 2023-2025; the same as Extra-P's Kaitai description of the format, and
checked on every fixture in tests/data: each file ends exactly after its last block)::

    "NVR\\0"  u32 header size  FileHeader (protobuf)
    then blocks until the end of the file:
        u32 block header size  BlockHeader (protobuf: field 1 = number of sources,
                                field 2 = number of results, field 5 = payload size)
        payload: each source, then each result, as u32 size + protobuf message

One result is one profiled launch. ``ncu_report`` itself reads a cut file without complaint: a
launch whose block was cut comes back with no name and no metrics, or not at all; this walk
says exactly where the file ends short. It reads the block headers and the 4-byte entry sizes
only (a few KB for a report of any size).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["Layout", "scan"]

MAGIC = b"NVR\x00"
_U32 = struct.Struct("<I")
_NUM_SOURCES, _NUM_RESULTS, _PAYLOAD_SIZE = 1, 2, 5  # BlockHeader field numbers


@dataclass(frozen=True)
class Layout:
    """What the walk found: ``results`` complete result entries (profiled launches) in
    ``blocks`` complete blocks, ending at byte ``end`` of ``size``; ``problem`` says what is
    wrong ("" when the file is whole)."""

    size: int
    blocks: int
    results: int
    end: int
    problem: str = ""

    @property
    def whole(self) -> bool:
        return not self.problem


class _Short(Exception):
    """The file ended inside something whose size was declared."""


def scan(path: Path) -> Layout:
    """Walk the blocks of ``path`` (see the module docstring). Never raises for a bad file:
    ``problem`` describes it; an OSError reading it propagates."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if fh.read(len(MAGIC)) != MAGIC:
            return Layout(size, 0, 0, 0, "it does not start like a .ncu-rep")
        try:
            header = _read_u32(fh)
            if len(MAGIC) + 4 + header > size:
                raise _Short
            _read_exact(fh, header)
        except _Short:
            return Layout(size, 0, 0, 0, f"it ends inside its file header (at byte {size:,})")
        return _walk_blocks(fh, size, len(MAGIC) + 4 + header)


def _walk_blocks(fh: BinaryIO, size: int, pos: int) -> Layout:
    blocks = results = 0
    while pos < size:
        start = pos
        try:
            header_size = _read_u32(fh)
            if pos + 4 + header_size > size:  # checked first: the size may be garbage
                raise _Short
            fields = _varint_fields(_read_exact(fh, header_size))
            pos += 4 + header_size
            payload = fields.get(_PAYLOAD_SIZE, 0)
            entries = fields.get(_NUM_SOURCES, 0) + fields.get(_NUM_RESULTS, 0)
            if pos + payload > size:
                raise _Short
            used = 0
            for _ in range(entries):  # u32 size + message each; skip the messages
                if used + 4 > payload:
                    raise ValueError("its entries overrun the payload")
                fh.seek(pos + used)
                used += 4 + _read_u32(fh)
            if used != payload:
                raise ValueError(f"its entries take {used:,} of {payload:,} payload bytes")
        except _Short:
            return Layout(
                size,
                blocks,
                results,
                start,
                f"the file ends at byte {size:,}, inside block {blocks + 1} (which starts at "
                f"byte {start:,} and declares more bytes than remain): it is truncated, or that "
                f"block's header is damaged; {_launches(results)} complete before that block",
            )
        except ValueError as exc:
            return Layout(
                size,
                blocks,
                results,
                start,
                f"block {blocks + 1} (at byte {start:,}) is damaged: {exc}; "
                f"{_launches(results)} complete before it",
            )
        pos += payload
        fh.seek(pos)
        blocks += 1
        results += fields.get(_NUM_RESULTS, 0)
    return Layout(size, blocks, results, pos)


def _launches(n: int) -> str:
    return "1 launch record is" if n == 1 else f"{n} launch records are"


def _read_exact(fh: BinaryIO, n: int) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise _Short
    return data


def _read_u32(fh: BinaryIO) -> int:
    value: int = _U32.unpack(_read_exact(fh, 4))[0]
    return value


def _varint_fields(message: bytes) -> dict[int, int]:
    """The varint fields of a protobuf message (field number -> last value); other wire types
    are skipped. ValueError when the bytes are not a well-formed message."""
    fields: dict[int, int] = {}
    i, n = 0, len(message)
    while i < n:
        key, i = _varint(message, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields[number], i = _varint(message, i)
        elif wire == 2:
            length, i = _varint(message, i)
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"its header has an unknown protobuf wire type {wire}")
        if i > n:
            raise ValueError("its header overruns its declared size")
    return fields


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("its header has a malformed varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i
