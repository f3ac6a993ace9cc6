"""Loaders of the CUDA activity tables (CUPTI_ACTIVITY_KIND_*): API calls, kernels, memory copies
and sets, CUDA graph launches. One pure function per exporter table, its schema (export schema
3.20, Nsight Systems 2025.3) quoted in the docstring; each returns its ``NsysReport`` frame,
sorted by start, with ``pid`` in every frame."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from ...analysis.keyjoin import first_match, take_matched
from ...errors import CorruptReportError
from .columns import Columns, Spec, split_global_id, to_frame
from .source import ExportSource
from .strings import StringTable, load_string_table, require_names

__all__ = [
    "CUDA_BACKTRACE_CLASS",
    "GRAPH_LAUNCH_COLUMNS",
    "api_name",
    "id_set",
    "load_cuda_api",
    "load_graph_launches",
    "load_kernel_core",
    "load_kernels",
    "load_launches",
    "load_memcpy",
    "load_memcpy_kinds",
    "load_memcpy_labels",
    "load_memset",
    "read_keyed",
    "sort_by_start",
]

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"


def _strings(src: ExportSource, strings: StringTable | None) -> StringTable:
    return load_string_table(src) if strings is None else strings


# the columns without which a row means nothing: a NULL start gives seconds-long totals, a NULL
# name merges every kernel into one "" row, a NULL globalPid loses the row from per-process work
KEYS: dict[str, tuple[str, ...]] = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "nameId", "globalTid"),
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId", "globalPid",
                                   "demangledName"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "streamId", "globalPid"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "deviceId", "streamId", "globalPid"),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ("start", "end", "deviceId", "streamId", "globalPid"),
    "NVTX_EVENTS": ("start", "eventType", "globalTid"),
}  # fmt: skip


def read_keyed(src: ExportSource, table: str, spec: Spec, **kwargs: Any) -> Columns:
    """``src.read_columns(table, spec, ...)``, refusing a table whose key columns (``KEYS``)
    are missing or NULL: ``CorruptReportError`` naming the table, the column and the rows,
    rather than frames that are silently wrong. (A table nsys left out, being empty, is fine.)"""
    cols = src.read_columns(table, spec, **kwargs)
    keys = [k for k in KEYS.get(table, ()) if k in spec]
    rows = len(cols.ints[keys[0]]) if keys else 0
    if not rows:
        return cols
    missing = [k for k in keys if k not in src.columns_of(table)]
    if missing:
        raise CorruptReportError(
            f"{src.path}: table {table} has no {', '.join(missing)} column, which every row "
            "needs; the export is damaged or was edited: export the .nsys-rep again."
        )
    for key in keys:
        nulls = int(np.count_nonzero(cols.ints[key] == -1))  # NULL reads as -1
        if nulls:
            raise CorruptReportError(
                f"{src.path}: {table}.{key} is NULL in {nulls:,} of {rows:,} rows, so those "
                "rows cannot be placed or named; the export is damaged or was edited: export "
                "the .nsys-rep again."
            )
    return cols


def sort_by_start(cols: Columns, by: str = "start") -> Columns:
    """Rows in stable order of ``by`` (no copy when already sorted, the usual case)."""
    start = cols.ints[by]
    if len(start) < 2 or bool(np.all(start[1:] >= start[:-1])):
        return cols
    return cols.take(np.argsort(start, kind="stable"))


# --- CUPTI_ACTIVITY_KIND_RUNTIME ----------------------------------------------------------------
_RUNTIME: Spec = {
    "start": "i",
    "end": "i",
    "eventClass": "i",
    "globalTid": "i",
    "correlationId": "i",
    "nameId": "i",
    "returnValue": "i",
}
# eventClass of the second row nsys writes for each call it took a backtrace of
# (``--cudabacktrace``, ENUM_NSYS_EVENT_CLASS TRACE_PROCESS_EVENT_CUDABACKTRACE): same
# correlationId, name without the ABI suffix, a few hundred ns earlier and longer. Not a call.
CUDA_BACKTRACE_CLASS = 67


def _not_backtrace(event_class: np.ndarray) -> np.ndarray:
    return np.asarray(event_class) != CUDA_BACKTRACE_CLASS


_API_SUFFIX = re.compile(r"_v\d{4}$")


def load_cuda_api(src: ExportSource, strings: StringTable | None = None) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_RUNTIME (runtime and driver API calls)::

        start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
        globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL  -- StringIds,
        returnValue INTEGER NOT NULL, callchainId INTEGER

    -> ``name, start_ns, end_ns, duration_ns, correlation_id, pid, tid, return_value``,
    sorted by start. The backtrace rows of ``--cudabacktrace`` (eventClass 67, a copy of a
    call) are left out: see ``CUDA_BACKTRACE_CLASS``."""
    table = _strings(src, strings)
    keep = ("eventClass", _not_backtrace)
    raw = sort_by_start(read_keyed(src, RUNTIME, _RUNTIME, keep=keep))
    ints = raw.ints
    names = require_names(src, table, ints["nameId"], f"{RUNTIME}.nameId")
    return to_frame(
        {
            "name": table.take(ints["nameId"], api_name, pos=names),
            **_call_columns(ints),
            "return_value": ints["returnValue"],
        }
    )


def _call_columns(ints: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``start_ns, end_ns, duration_ns, correlation_id, pid, tid`` of runtime API rows."""
    pid, tid = split_global_id(ints["globalTid"])
    return {**_span(ints), "correlation_id": ints["correlationId"], "pid": pid, "tid": tid}


def _span(ints: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``start_ns, end_ns, duration_ns`` of any CUPTI activity or API row."""
    return {"start_ns": ints["start"], "end_ns": ints["end"],
            "duration_ns": ints["end"] - ints["start"]}  # fmt: skip


def api_name(name: str) -> str:
    """Drop the 4-digit ABI suffix as ``nsys stats`` does ("cudaMalloc_v3020" -> "cudaMalloc";
    5-digit ones such as "cudaStreamIsCapturing_v10000" stay, as nsys prints them)."""
    return _API_SUFFIX.sub("", name)


def load_launches(src: ExportSource, correlation_ids: np.ndarray) -> pd.DataFrame:
    """The runtime calls whose correlationId is in ``correlation_ids`` (those that launched
    the GPU ops at hand): ``start_ns, end_ns, duration_ns, correlation_id, pid, tid``, sorted
    by start like ``cuda_api()`` (so the first call per id is the same). Reads 4 integer
    columns only and filters them with a bitmap: no names, no per-row objects. The backtrace
    copies of ``--cudabacktrace`` are dropped, as in ``load_cuda_api``."""
    spec: Spec = {"start": "i", "end": "i", "globalTid": "i", "correlationId": "i",
                  "eventClass": "i"}  # fmt: skip
    keep = ("correlationId", id_set(np.asarray(correlation_ids, dtype=np.int64)))
    cols = read_keyed(src, RUNTIME, spec, keep=keep)
    ints = sort_by_start(cols.filter(_not_backtrace(cols.ints["eventClass"]))).ints
    return pd.DataFrame(_call_columns(ints))


def id_set(wanted: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A vectorised membership test for int ids, ``np.isin(values, wanted)``, built once (a
    bitmap when the ids are small, as correlation ids are) and applied to many chunks."""
    wanted = np.asarray(wanted, dtype=np.int64)
    if len(wanted) == 0:
        return lambda values: np.zeros(len(values), dtype=bool)
    lo, hi = int(wanted.min()), int(wanted.max())
    if lo < -1 or hi >= max(1 << 24, 64 * len(wanted)):
        ids = np.unique(wanted)
        return lambda values: np.isin(values, ids)
    # Slot i + 2 holds id i (slot 1: NULL, -1); ids out of range clip to the first or the last
    # slot, which stay False.
    bitmap = np.zeros(hi + 4, dtype=bool)
    bitmap[wanted + 2] = True
    return lambda values: np.take(bitmap, np.asarray(values, np.int64) + 2, mode="clip")


def _launch_tid(api: pd.DataFrame, correlation: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """tid of the API call that launched each GPU op (join on correlationId + pid; the first
    such call in ``api``'s order); -1 if none. ``api`` needs ``correlation_id, pid, tid``."""
    row = first_match(api["pid"].to_numpy(), api["correlation_id"].to_numpy(), pid, correlation)
    return take_matched(api["tid"].to_numpy(), row)


# --- CUPTI_ACTIVITY_KIND_KERNEL -----------------------------------------------------------------
_KERNEL: Spec = {
    "start": "i",
    "end": "i",
    "deviceId": "i",
    "contextId": "i",
    "streamId": "i",
    "correlationId": "i",
    "globalPid": "i",
    "demangledName": "i",
    "shortName": "i",
    "mangledName": "i",
    "gridX": "i",
    "gridY": "i",
    "gridZ": "i",
    "blockX": "i",
    "blockY": "i",
    "blockZ": "i",
    "registersPerThread": "i",
    "staticSharedMemory": "i",
    "dynamicSharedMemory": "i",
    "graphNodeId": "i",
}
_KERNEL_CORE: Spec = {
    k: _KERNEL[k]
    for k in ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName")
}
_KERNEL_NAME = f"{KERNEL}.demangledName"


def load_kernel_core(src: ExportSource, strings: StringTable | None = None) -> pd.DataFrame:
    """The kernel columns that the summary and the NVTX projection need, cheap at any size:
    ``start_ns, end_ns, duration_ns, name`` (demangled, as a Categorical), ``device_id,
    stream_id, correlation_id, pid``; same rows and order as :func:`load_kernels`."""
    table = _strings(src, strings)
    ints = sort_by_start(read_keyed(src, KERNEL, _KERNEL_CORE)).ints
    names = require_names(src, table, ints["demangledName"], _KERNEL_NAME)
    pid, _ = split_global_id(ints["globalPid"])
    return pd.DataFrame(
        {
            **_span(ints),
            "name": table.categorical(ints["demangledName"], pos=names),
            "device_id": ints["deviceId"],
            "stream_id": ints["streamId"],
            "correlation_id": ints["correlationId"],
            "pid": pid,
        }
    )


def load_kernels(
    src: ExportSource, strings: StringTable | None = None, api: pd.DataFrame | None = None
) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_KERNEL::

        start, end INTEGER NOT NULL; deviceId, contextId, streamId INTEGER NOT NULL;
        correlationId INTEGER -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId);
        globalPid INTEGER; demangledName, shortName INTEGER NOT NULL, mangledName INTEGER
        -- StringIds; gridX..Z, blockX..Z, registersPerThread, staticSharedMemory,
        dynamicSharedMemory INTEGER NOT NULL; graphNodeId INTEGER -- REFERENCES
        CUDA_GRAPH_NODE_EVENTS(graphNodeId), set when the kernel ran as a CUDA graph node
        (nsys --cuda-graph-trace=node); (launchType, cacheConfig, gridId, ... unused)

    -> the ``NsysReport.kernels()`` contract (``name`` is the demangled name, as
    ``nsys stats`` prints it; ``tid`` is the launching API call's thread; ``graph_node_id``
    -1 for a kernel that is not a graph node), sorted by start. ``api`` (``cuda_api()`` or
    :func:`load_launches`) gives the launching calls; without it only the launches of these
    kernels are read."""
    table = _strings(src, strings)
    ints = sort_by_start(read_keyed(src, KERNEL, _KERNEL)).ints
    # A mangled name may be missing (NULL), or blank for a kernel with nothing to mangle.
    names = {
        col: require_names(src, table, ints[col], f"{KERNEL}.{col}", blank_ok=col == "mangledName")
        for col in ("demangledName", "shortName", "mangledName")
    }
    pid, _ = split_global_id(ints["globalPid"])
    corr = ints["correlationId"]
    if api is None:
        api = load_launches(src, corr)
    return to_frame(
        {
            **_span(ints),
            "name": table.take(ints["demangledName"], pos=names["demangledName"]),
            "short_name": table.take(ints["shortName"], pos=names["shortName"]),
            "mangled_name": table.take(ints["mangledName"], pos=names["mangledName"]),
            "device_id": ints["deviceId"],
            "context_id": ints["contextId"],
            "stream_id": ints["streamId"],
            "correlation_id": corr,
            "pid": pid,
            "tid": _launch_tid(api, corr, pid),
            "grid_x": ints["gridX"],
            "grid_y": ints["gridY"],
            "grid_z": ints["gridZ"],
            "block_x": ints["blockX"],
            "block_y": ints["blockY"],
            "block_z": ints["blockZ"],
            "registers_per_thread": ints["registersPerThread"],
            "static_smem_bytes": ints["staticSharedMemory"],
            "dynamic_smem_bytes": ints["dynamicSharedMemory"],
            "graph_node_id": ints["graphNodeId"],
        }
    )


# --- CUPTI_ACTIVITY_KIND_MEMCPY / MEMSET --------------------------------------------------------
# what every GPU activity row (copy, set, graph launch) has: where, when, which call, which process
_ON_GPU: Spec = {
    "start": "i",
    "end": "i",
    "deviceId": "i",
    "streamId": "i",
    "correlationId": "i",
    "globalPid": "i",
}
_GPU_OP: Spec = {**_ON_GPU, "bytes": "i"}
_MEMCPY: Spec = {**_GPU_OP, "copyKind": "i"}
_MEMCPY_OPER: Spec = {"id": "i", "name": "s", "label": "s"}


def load_memcpy_kinds(src: ExportSource) -> pd.Series:
    """ENUM_CUDA_MEMCPY_OPER: ``id INTEGER PRIMARY KEY, name TEXT, label TEXT`` -> Series
    id -> short kind ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "UVM_HtoD", ...) built from the
    enum name, e.g. CUDA_MEMCPY_KIND_HTOD -> "HtoD"."""
    cols = src.read_columns("ENUM_CUDA_MEMCPY_OPER", _MEMCPY_OPER)
    short = [_short_kind(n) for n in cols.texts["name"].to_pylist()]
    return pd.Series(short, index=cols.ints["id"], dtype="str")


def load_memcpy_labels(src: ExportSource) -> pd.Series:
    """ENUM_CUDA_MEMCPY_OPER id -> label as ``nsys stats`` prints it ("Host-to-Device")."""
    cols = src.read_columns("ENUM_CUDA_MEMCPY_OPER", _MEMCPY_OPER)
    return pd.Series(cols.texts["label"].to_pylist(), index=cols.ints["id"], dtype="str")


def _short_kind(enum_name: str) -> str:
    kind = enum_name.removeprefix("CUDA_MEMCPY_KIND_")
    prefix = ""
    if kind.startswith("UVM_"):
        prefix, kind = "UVM_", kind[4:]
    if len(kind) == 4 and kind[1:3] == "TO":  # HTOD -> HtoD
        kind = f"{kind[0]}to{kind[3]}"
    return prefix + kind


def _gpu_op_columns(ints: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The columns every GPU op frame shares, from a memcpy/memset read."""
    pid, _ = split_global_id(ints["globalPid"])
    return {
        **_span(ints),
        "bytes": ints["bytes"],
        "device_id": ints["deviceId"],
        "stream_id": ints["streamId"],
        "correlation_id": ints["correlationId"],
        "pid": pid,
    }


def load_memcpy(src: ExportSource) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_MEMCPY::

        start, end INTEGER NOT NULL; deviceId, contextId, streamId INTEGER NOT NULL;
        correlationId INTEGER; globalPid INTEGER; bytes INTEGER NOT NULL;
        copyKind INTEGER NOT NULL -- ENUM_CUDA_MEMCPY_OPER; srcKind, dstKind, ...

    -> ``start_ns, end_ns, duration_ns, bytes, kind, label, device_id, stream_id,
    correlation_id, pid, bandwidth_gb_per_s`` (``label`` is nsys's "Host-to-Device" form;
    GB/s = bytes / ns)."""
    ints = sort_by_start(read_keyed(src, MEMCPY, _MEMCPY)).ints
    kinds, labels = load_memcpy_kinds(src), load_memcpy_labels(src)
    code = ints["copyKind"]
    op = _gpu_op_columns(ints)
    dur, nbytes = op["duration_ns"], op["bytes"]
    with np.errstate(divide="ignore", invalid="ignore"):
        gbps = np.where(dur > 0, nbytes / np.maximum(dur, 1), np.nan)
    return to_frame(
        {
            **{k: op[k] for k in ("start_ns", "end_ns", "duration_ns", "bytes")},
            "kind": kinds.reindex(code).to_numpy(dtype=object, na_value="Unknown"),
            "label": labels.reindex(code).to_numpy(dtype=object, na_value="Unknown"),
            **{k: op[k] for k in ("device_id", "stream_id", "correlation_id", "pid")},
            "bandwidth_gb_per_s": gbps.astype(np.float64),
        }
    )


def load_memset(src: ExportSource) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_MEMSET::

        start, end INTEGER NOT NULL; deviceId, contextId, streamId INTEGER NOT NULL;
        correlationId INTEGER; globalPid INTEGER; value INTEGER NOT NULL;
        bytes INTEGER NOT NULL; memKind INTEGER

    -> ``start_ns, end_ns, duration_ns, bytes, device_id, stream_id, correlation_id, pid``."""
    return to_frame(_gpu_op_columns(sort_by_start(read_keyed(src, MEMSET, _GPU_OP)).ints))


# --- CUPTI_ACTIVITY_KIND_GRAPH_TRACE ------------------------------------------------------------
_GRAPH_TRACE: Spec = {**_ON_GPU, "graphId": "i", "graphExecId": "i"}
GRAPH_LAUNCH_COLUMNS = [
    "start_ns",
    "end_ns",
    "duration_ns",
    "graph_id",
    "graph_exec_id",
    "device_id",
    "stream_id",
    "correlation_id",
    "pid",
]


def load_graph_launches(src: ExportSource) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_GRAPH_TRACE (whole CUDA graph launches, nsys's default
    ``--cuda-graph-trace=graph``: the graph's kernels get NO kernel rows then)::

        start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
        contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
        correlationId INTEGER -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId),
        globalPid INTEGER, graphId INTEGER NOT NULL -- REFERENCES CUDA_GRAPH_EVENTS(graphId),
        graphExecId INTEGER NOT NULL -- REFERENCES CUDA_GRAPH_EVENTS(graphExecId)

    -> ``start_ns, end_ns, duration_ns, graph_id, graph_exec_id, device_id, stream_id,
    correlation_id, pid``, sorted by start (one row per graph launch, start to end of the
    whole graph on the GPU)."""
    ints = sort_by_start(read_keyed(src, GRAPH_TRACE, _GRAPH_TRACE)).ints
    pid, _ = split_global_id(ints["globalPid"])
    data = {
        **_span(ints),
        "graph_id": ints["graphId"],
        "graph_exec_id": ints["graphExecId"],
        "device_id": ints["deviceId"],
        "stream_id": ints["streamId"],
        "correlation_id": ints["correlationId"],
        "pid": pid,
    }
    return pd.DataFrame({c: data[c] for c in GRAPH_LAUNCH_COLUMNS})
