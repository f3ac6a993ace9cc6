"""Loader of nsys's device-memory events (``--cuda-memory-usage=true``):
CUDA_GPU_MEMORY_USAGE_EVENTS, one row per allocation or free that CUPTI saw (cudaMalloc,
cudaFree, the driver's cuMemAlloc/cuMemFree, ...; not the blocks PyTorch's caching allocator
hands out from memory it already holds). The numbers are computed in ``analysis.gpu_memory``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .columns import Spec, split_global_id, to_frame
from .cupti import read_keyed, sort_by_start
from .source import ExportSource

__all__ = ["MEMORY_EVENT_COLUMNS", "MEMORY_USAGE", "load_memory_events"]

MEMORY_USAGE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
_EVENTS: Spec = {
    "start": "i",
    "globalPid": "i",
    "deviceId": "i",
    "address": "i",
    "bytes": "i",
    "memKind": "i",
    "memoryOperationType": "i",
    "correlationId": "i",
}
MEMORY_EVENT_COLUMNS = [
    "time_ns",
    "device_id",
    "pid",
    "operation",
    "bytes",
    "address",
    "memory_kind",
    "correlation_id",
]
# ENUM_CUDA_DEV_MEM_EVENT_OPER and ENUM_CUDA_MEM_KIND (export schema 3.x): the names when the
# export has no enum table (a parquet dir of some tables only)
_OPERATIONS = {0: "alloc", 1: "free"}
# (measured: tests/data/memory_probe.txt)
_KINDS = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device_static"}


def _enum(src: ExportSource, table: str, fallback: dict[int, str], prefix: str) -> dict[int, str]:
    """An ENUM table as id -> short lower-case name ("CUDA_MEMOPR_MEMORY_KIND_DEVICE" ->
    "device")."""
    if not src.has(table):
        return fallback
    cols = src.read_columns(table, {"id": "i", "name": "s"})
    names = cols.texts["name"].to_pylist()
    return {
        int(i): str(n).rsplit(prefix, 1)[-1].lower() if n else fallback.get(int(i), "unknown")
        for i, n in zip(cols.ints["id"].tolist(), names, strict=True)
    }


def load_memory_events(src: ExportSource) -> pd.DataFrame:
    """CUDA_GPU_MEMORY_USAGE_EVENTS::

        start INTEGER NOT NULL (ns), globalPid INTEGER NOT NULL, deviceId INTEGER NOT NULL,
        contextId INTEGER NOT NULL, address INTEGER NOT NULL, pc INTEGER NOT NULL,
        bytes INTEGER NOT NULL, memKind INTEGER NOT NULL -- ENUM_CUDA_MEM_KIND,
        memoryOperationType INTEGER NOT NULL -- ENUM_CUDA_DEV_MEM_EVENT_OPER,
        name TEXT, correlationId INTEGER, streamId INTEGER, ...

    -> ``time_ns`` (ns on the report's clock, a float as every ``time_ns`` column: exact below
    2^53 ns), ``device_id, pid, operation`` ("alloc" | "free"), ``bytes, address,
    memory_kind`` ("device", "pinned", "managed", ... as ENUM_CUDA_MEM_KIND names them),
    ``correlation_id`` (of the API call), in time order (an alloc before a free at the same ns).
    Empty (these columns) for a report captured without ``--cuda-memory-usage=true``."""
    ints = sort_by_start(read_keyed(src, MEMORY_USAGE, _EVENTS)).ints
    pid, _ = split_global_id(ints["globalPid"])
    ops = _enum(src, "ENUM_CUDA_DEV_MEM_EVENT_OPER", _OPERATIONS, "_")
    kinds = _enum(src, "ENUM_CUDA_MEM_KIND", _KINDS, "MEMORY_KIND_")
    frame = to_frame(
        {
            "time_ns": ints["start"].astype(np.float64),  # every time_ns column is a float
            "device_id": ints["deviceId"],
            "pid": pid,
            "operation": np.array([_op(ops.get(int(c), "")) for c in ints["memoryOperationType"]],
                                  dtype=object),
            "bytes": ints["bytes"],
            "address": ints["address"],
            "memory_kind": np.array([kinds.get(int(c), "unknown") for c in ints["memKind"]],
                                    dtype=object),
            "correlation_id": ints["correlationId"],
        }
    )  # fmt: skip
    return frame[MEMORY_EVENT_COLUMNS]


def _op(name: str) -> str:
    """ "CUDA_DEV_MEM_EVENT_OPR_ALLOCATION" -> "alloc", "..._DEALLOCATION" -> "free"."""
    name = name.lower()
    if "dealloc" in name or "free" in name or "release" in name:
        return "free"
    if "alloc" in name:
        return "alloc"
    return name or "unknown"
