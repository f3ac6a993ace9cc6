"""One loader per Nsight Systems exporter table, reading a ``.sqlite`` export or a parquet dir.

``open_export(path)`` returns an :class:`ExportSource`; each ``load_*`` function takes one and
returns a DataFrame whose columns and dtypes do not depend on the export format (ints are
``int64`` with ``-1`` for NULL ids, texts are ``str`` with ``""`` for NULL). A table nsys left out
(it omits empty ones) gives an empty frame with the same columns. Names are resolved here:
StringIds, NVTX text/textId and domains, memcpy kinds. Timestamps stay on the report's clock.

Schemas quoted below are those of export schema 3.20 (Nsight Systems 2025.3).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import CorruptReportError, EmptyReportError, UnsupportedReportError

__all__ = [
    "SUPPORTED_SCHEMA_MAJOR",
    "ExportSource",
    "export_meta",
    "load_cuda_api",
    "load_gpu_info",
    "load_kernels",
    "load_memcpy",
    "load_memset",
    "load_nvtx",
    "load_string_ids",
    "open_export",
]

SUPPORTED_SCHEMA_MAJOR = 3
SQLITE_MAGIC = b"SQLite format 3\x00"

# NVTX_EVENTS.eventType (ENUM_NSYS_EVENT_TYPE): push/pop and start/end ranges, C and NVTXT.
NVTX_PUSHPOP = (59, 70)
NVTX_STARTEND = (60, 71)
NVTX_DOMAIN_CREATE = 75

Kind = Literal["i", "s", "f"]
Spec = Mapping[str, Kind]  # column -> int64 (NULL -> -1) / str (NULL -> "") / float64 (NaN)
_NULL = {"i": -1, "s": "", "f": float("nan")}
_Where = tuple[str, tuple[int, ...]] | None


def split_global_id(global_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) from nsys's serialized GlobalId (pid in bits 24..47, tid in bits 0..23)."""
    g = np.asarray(global_id, dtype=np.int64)
    return (g >> 24) & 0xFFFFFF, g & 0xFFFFFF


# --- sources ------------------------------------------------------------------------------------
@dataclass
class ExportSource:
    """An opened export: ``tables`` are the table names present; ``read`` returns typed columns."""

    path: Path
    kind: Literal["sqlite", "parquet"]
    tables: frozenset[str]
    _conn: sqlite3.Connection | None = field(default=None, repr=False)
    _columns: dict[str, frozenset[str]] = field(default_factory=dict, repr=False)

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns_of(self, table: str) -> frozenset[str]:
        if table not in self._columns:
            try:
                if self._conn is not None:
                    rows = self._conn.execute(f'PRAGMA table_info("{table}")').fetchall()
                    self._columns[table] = frozenset(r[1] for r in rows)
                else:
                    schema = pq.read_schema(self.path / f"{table}.parquet")
                    self._columns[table] = frozenset(schema.names)
            except (sqlite3.Error, pa.ArrowException, OSError) as exc:
                raise _corrupt(self.path, exc) from exc
        return self._columns[table]

    def read(
        self, table: str, spec: Spec, where: tuple[str, tuple[int, ...]] | None = None
    ) -> pd.DataFrame:
        """Columns of ``spec`` from ``table`` (absent table or column -> empty / NULL-filled);
        ``where=(column, values)`` keeps rows whose column is one of the ints."""
        if not self.has(table):
            return _empty(spec)
        present = self.columns_of(table)
        try:
            if self._conn is not None:
                frame = self._read_sqlite(table, spec, present, where)
            else:
                frame = self._read_parquet(table, spec, present, where)
        except (sqlite3.Error, pa.ArrowException, OSError, ValueError, OverflowError) as exc:
            raise _corrupt(self.path, exc) from exc
        return frame

    def _read_sqlite(
        self, table: str, spec: Spec, present: frozenset[str], where: _Where
    ) -> pd.DataFrame:
        assert self._conn is not None
        exprs = []
        for col, kind in spec.items():
            null = "NULL" if kind == "f" else repr(_NULL[kind])
            src = f'"{col}"' if col in present else "NULL"
            exprs.append(f'coalesce({src}, {null}) AS "{col}"')
        sql = f'SELECT {", ".join(exprs)} FROM "{table}"'
        if where:
            sql += f' WHERE "{where[0]}" IN ({", ".join(str(int(v)) for v in where[1])})'
        rows = self._conn.execute(sql).fetchall()
        cols = list(zip(*rows, strict=True)) if rows else [() for _ in spec]
        return _frame({c: _as_array(v, spec[c]) for c, v in zip(spec, cols, strict=True)})

    def _read_parquet(
        self, table: str, spec: Spec, present: frozenset[str], where: _Where
    ) -> pd.DataFrame:
        wanted = [c for c in spec if c in present]
        if where:
            wanted = list(dict.fromkeys([*wanted, where[0]]))
        data = pq.read_table(self.path / f"{table}.parquet", columns=wanted)
        if where:
            wcol = data[where[0]]
            mask = pc.is_in(wcol, value_set=pa.array(list(where[1]), wcol.type))
            data = data.filter(pc.fill_null(mask, False))
        out: dict[str, np.ndarray] = {}
        for col, kind in spec.items():
            if col not in present:
                out[col] = _as_array([_NULL[kind]] * data.num_rows, kind)
                continue
            arr = data[col]
            if kind == "i":
                out[col] = pc.fill_null(arr.cast(pa.int64()), -1).to_numpy()
            elif kind == "f":
                out[col] = arr.cast(pa.float64()).to_numpy(zero_copy_only=False)
            else:
                out[col] = _as_array(pc.fill_null(arr.cast(pa.large_string()), "").to_pylist(), "s")
        return _frame(out)


def _as_array(values: object, kind: Kind) -> np.ndarray:
    if kind == "i":
        return np.asarray(values, dtype=np.int64)
    if kind == "f":
        return np.asarray(values, dtype=np.float64)
    return np.asarray([str(v) for v in values], dtype=object)  # type: ignore[union-attr]


def _frame(columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    frame = pd.DataFrame(dict(columns))
    for col, arr in columns.items():
        if arr.dtype == object:
            frame[col] = frame[col].astype("str")
    return frame


def _empty(spec: Spec) -> pd.DataFrame:
    return _frame({c: _as_array([], k) for c, k in spec.items()})


def _corrupt(path: Path, exc: BaseException) -> CorruptReportError:
    return CorruptReportError(
        f"{path} is not a readable Nsight Systems export ({type(exc).__name__}: {exc}); "
        "export the .nsys-rep again with `nsys export --type sqlite`."
    )


def open_export(path: str | Path) -> ExportSource:
    """Open a ``.sqlite`` export or a parquet dir and check its schema version.

    Raises ``CorruptReportError`` (not SQLite / unreadable), ``EmptyReportError`` (no tables) or
    ``UnsupportedReportError`` (unknown major schema version, or not an nsys export)."""
    path = Path(path)
    if path.is_dir():
        names = frozenset(p.name[: -len(".parquet")] for p in path.glob("*.parquet"))
        if not names:
            raise EmptyReportError(
                f"{path} holds no .parquet tables; export the report with "
                "`nsys export --type parquetdir`."
            )
        source = ExportSource(path, "parquet", names)
    else:
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(SQLITE_MAGIC))
        except OSError as exc:
            raise _corrupt(path, exc) from exc
        if head != SQLITE_MAGIC:
            raise CorruptReportError(
                f"{path} is not an SQLite file; pass an nsys .sqlite export, a parquet dir or "
                "a .nsys-rep."
            )
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        except sqlite3.Error as exc:
            raise _corrupt(path, exc) from exc
        if not rows:
            raise EmptyReportError(f"{path} has no tables; export the .nsys-rep again.")
        source = ExportSource(path, "sqlite", frozenset(r[0] for r in rows), conn)
    _check_schema(source)
    return source


def export_meta(src: ExportSource) -> dict[str, str]:
    """META_DATA_EXPORT as a dict: ``name TEXT NOT NULL, value TEXT`` (EXPORT_SCHEMA_VERSION,
    EXPORT_PRODUCT_VERSION, EXPORT_PARAM_*)."""
    frame = src.read("META_DATA_EXPORT", {"name": "s", "value": "s"})
    return dict(zip(frame["name"], frame["value"], strict=True))


def _check_schema(src: ExportSource) -> None:
    if not src.has("META_DATA_EXPORT"):
        raise UnsupportedReportError(
            f"{src.path} has no META_DATA_EXPORT table, so it is not an Nsight Systems export "
            "this package reads; export the .nsys-rep with nsys 2023.1 or newer."
        )
    meta = export_meta(src)
    major = meta.get("EXPORT_SCHEMA_VERSION_MAJOR") or meta.get("EXPORT_SCHEMA_VERSION", "")
    major = major.split(".")[0]
    if major != str(SUPPORTED_SCHEMA_MAJOR):
        raise UnsupportedReportError(
            f"{src.path} uses export schema {meta.get('EXPORT_SCHEMA_VERSION', '?')}, but this "
            f"package reads schema {SUPPORTED_SCHEMA_MAJOR}.x; export it with an nsys whose "
            "schema matches, or update nsight_magic."
        )


# --- StringIds ----------------------------------------------------------------------------------
def load_string_ids(src: ExportSource) -> pd.Series:
    """StringIds: ``id INTEGER PRIMARY KEY, value TEXT NOT NULL`` -> Series value indexed by id."""
    frame = src.read("StringIds", {"id": "i", "value": "s"})
    return pd.Series(frame["value"].to_numpy(), index=frame["id"].to_numpy(), dtype="str")


def _resolve(strings: pd.Series, ids: np.ndarray) -> np.ndarray:
    """Vectorised StringIds lookup; unknown or NULL (-1) ids give ""."""
    out = strings.reindex(ids).to_numpy(dtype=object, na_value="")
    return out


# --- CUPTI_ACTIVITY_KIND_RUNTIME ----------------------------------------------------------------
_RUNTIME: Spec = {
    "start": "i",
    "end": "i",
    "globalTid": "i",
    "correlationId": "i",
    "nameId": "i",
    "returnValue": "i",
}


def load_cuda_api(src: ExportSource, strings: pd.Series | None = None) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_RUNTIME (runtime and driver API calls)::

        start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
        globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL  -- StringIds,
        returnValue INTEGER NOT NULL, callchainId INTEGER

    -> ``name, start_ns, end_ns, duration_ns, correlation_id, pid, tid, return_value``,
    sorted by start."""
    strings = load_string_ids(src) if strings is None else strings
    raw = src.read("CUPTI_ACTIVITY_KIND_RUNTIME", _RUNTIME).sort_values("start", kind="stable")
    pid, tid = split_global_id(raw["globalTid"].to_numpy())
    start, end = raw["start"].to_numpy(), raw["end"].to_numpy()
    return _frame(
        {
            "name": _api_names(_resolve(strings, raw["nameId"].to_numpy())),
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,
            "correlation_id": raw["correlationId"].to_numpy(),
            "pid": pid,
            "tid": tid,
            "return_value": raw["returnValue"].to_numpy(),
        }
    )


def _api_names(names: np.ndarray) -> np.ndarray:
    """Drop the 4-digit ABI suffix as ``nsys stats`` does ("cudaMalloc_v3020" -> "cudaMalloc";
    5-digit ones such as "cudaStreamIsCapturing_v10000" stay, as nsys prints them)."""
    return pd.Series(names, dtype=object).str.replace(r"_v\d{4}$", "", regex=True).to_numpy()


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
}


def _launch_tid(api: pd.DataFrame, correlation: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """tid of the API call that launched each GPU op (join on correlationId + pid); -1 if none."""
    if len(correlation) == 0 or len(api) == 0:
        return np.full(len(correlation), -1, dtype=np.int64)
    key = pd.MultiIndex.from_arrays([api["correlation_id"].to_numpy(), api["pid"].to_numpy()])
    tids = pd.Series(api["tid"].to_numpy(), index=key)
    tids = tids[~key.duplicated()]
    found = tids.reindex(pd.MultiIndex.from_arrays([correlation, pid]))
    return found.fillna(-1).to_numpy(dtype=np.int64)


def load_kernels(
    src: ExportSource, strings: pd.Series | None = None, api: pd.DataFrame | None = None
) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_KERNEL::

        start, end INTEGER NOT NULL; deviceId, contextId, streamId INTEGER NOT NULL;
        correlationId INTEGER -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId);
        globalPid INTEGER; demangledName, shortName INTEGER NOT NULL, mangledName INTEGER
        -- StringIds; gridX..Z, blockX..Z, registersPerThread, staticSharedMemory,
        dynamicSharedMemory INTEGER NOT NULL; (launchType, cacheConfig, gridId, ... unused)

    -> the ``NsysReport.kernels()`` contract (``name`` is the demangled name, as
    ``nsys stats`` prints it; ``tid`` is the launching API call's thread), sorted by start."""
    strings = load_string_ids(src) if strings is None else strings
    api = load_cuda_api(src, strings) if api is None else api
    raw = src.read("CUPTI_ACTIVITY_KIND_KERNEL", _KERNEL).sort_values("start", kind="stable")
    pid, _ = split_global_id(raw["globalPid"].to_numpy())
    corr = raw["correlationId"].to_numpy()
    start, end = raw["start"].to_numpy(), raw["end"].to_numpy()
    col = raw.__getitem__
    return _frame(
        {
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,
            "name": _resolve(strings, col("demangledName").to_numpy()),
            "short_name": _resolve(strings, col("shortName").to_numpy()),
            "mangled_name": _resolve(strings, col("mangledName").to_numpy()),
            "device_id": col("deviceId").to_numpy(),
            "context_id": col("contextId").to_numpy(),
            "stream_id": col("streamId").to_numpy(),
            "correlation_id": corr,
            "pid": pid,
            "tid": _launch_tid(api, corr, pid),
            "grid_x": col("gridX").to_numpy(),
            "grid_y": col("gridY").to_numpy(),
            "grid_z": col("gridZ").to_numpy(),
            "block_x": col("blockX").to_numpy(),
            "block_y": col("blockY").to_numpy(),
            "block_z": col("blockZ").to_numpy(),
            "registers_per_thread": col("registersPerThread").to_numpy(),
            "static_smem_bytes": col("staticSharedMemory").to_numpy(),
            "dynamic_smem_bytes": col("dynamicSharedMemory").to_numpy(),
        }
    )


# --- CUPTI_ACTIVITY_KIND_MEMCPY / MEMSET --------------------------------------------------------
_MEMCPY: Spec = {
    "start": "i",
    "end": "i",
    "deviceId": "i",
    "streamId": "i",
    "correlationId": "i",
    "globalPid": "i",
    "bytes": "i",
    "copyKind": "i",
}


def load_memcpy_kinds(src: ExportSource) -> pd.Series:
    """ENUM_CUDA_MEMCPY_OPER: ``id INTEGER PRIMARY KEY, name TEXT, label TEXT`` -> Series
    id -> short kind ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "UVM_HtoD", ...) built from the
    enum name, e.g. CUDA_MEMCPY_KIND_HTOD -> "HtoD"."""
    frame = src.read("ENUM_CUDA_MEMCPY_OPER", {"id": "i", "name": "s", "label": "s"})
    short = [_short_kind(n) for n in frame["name"]]
    return pd.Series(short, index=frame["id"].to_numpy(), dtype="str")


def load_memcpy_labels(src: ExportSource) -> pd.Series:
    """ENUM_CUDA_MEMCPY_OPER id -> label as ``nsys stats`` prints it ("Host-to-Device")."""
    frame = src.read("ENUM_CUDA_MEMCPY_OPER", {"id": "i", "label": "s"})
    return pd.Series(frame["label"].to_numpy(), index=frame["id"].to_numpy(), dtype="str")


def _short_kind(enum_name: str) -> str:
    kind = enum_name.removeprefix("CUDA_MEMCPY_KIND_")
    prefix = ""
    if kind.startswith("UVM_"):
        prefix, kind = "UVM_", kind[4:]
    if len(kind) == 4 and kind[1:3] == "TO":  # HTOD -> HtoD
        kind = f"{kind[0]}to{kind[3]}"
    return prefix + kind


def load_memcpy(src: ExportSource) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_MEMCPY::

        start, end INTEGER NOT NULL; deviceId, contextId, streamId INTEGER NOT NULL;
        correlationId INTEGER; globalPid INTEGER; bytes INTEGER NOT NULL;
        copyKind INTEGER NOT NULL -- ENUM_CUDA_MEMCPY_OPER; srcKind, dstKind, ...

    -> ``start_ns, end_ns, duration_ns, bytes, kind, label, device_id, stream_id,
    correlation_id, pid, bandwidth_gbps`` (``label`` is nsys's "Host-to-Device" form;
    GB/s = bytes / ns)."""
    raw = src.read("CUPTI_ACTIVITY_KIND_MEMCPY", _MEMCPY).sort_values("start", kind="stable")
    kinds, labels = load_memcpy_kinds(src), load_memcpy_labels(src)
    code = raw["copyKind"].to_numpy()
    start, end = raw["start"].to_numpy(), raw["end"].to_numpy()
    dur = end - start
    nbytes = raw["bytes"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        gbps = np.where(dur > 0, nbytes / np.maximum(dur, 1), np.nan)
    pid, _ = split_global_id(raw["globalPid"].to_numpy())
    return _frame(
        {
            "start_ns": start,
            "end_ns": end,
            "duration_ns": dur,
            "bytes": nbytes,
            "kind": kinds.reindex(code).to_numpy(dtype=object, na_value="Unknown"),
            "label": labels.reindex(code).to_numpy(dtype=object, na_value="Unknown"),
            "device_id": raw["deviceId"].to_numpy(),
            "stream_id": raw["streamId"].to_numpy(),
            "correlation_id": raw["correlationId"].to_numpy(),
            "pid": pid,
            "bandwidth_gbps": gbps.astype(np.float64),
        }
    )


_MEMSET: Spec = {
    "start": "i",
    "end": "i",
    "deviceId": "i",
    "streamId": "i",
    "correlationId": "i",
    "globalPid": "i",
    "bytes": "i",
}


def load_memset(src: ExportSource) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_MEMSET::

        start, end INTEGER NOT NULL; deviceId, contextId, streamId INTEGER NOT NULL;
        correlationId INTEGER; globalPid INTEGER; value INTEGER NOT NULL;
        bytes INTEGER NOT NULL; memKind INTEGER

    -> ``start_ns, end_ns, duration_ns, bytes, device_id, stream_id, correlation_id, pid``."""
    raw = src.read("CUPTI_ACTIVITY_KIND_MEMSET", _MEMSET).sort_values("start", kind="stable")
    pid, _ = split_global_id(raw["globalPid"].to_numpy())
    start, end = raw["start"].to_numpy(), raw["end"].to_numpy()
    return _frame(
        {
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,
            "bytes": raw["bytes"].to_numpy(),
            "device_id": raw["deviceId"].to_numpy(),
            "stream_id": raw["streamId"].to_numpy(),
            "correlation_id": raw["correlationId"].to_numpy(),
            "pid": pid,
        }
    )


# --- NVTX_EVENTS --------------------------------------------------------------------------------
_NVTX: Spec = {
    "start": "i",
    "end": "i",
    "eventType": "i",
    "text": "s",
    "textId": "i",
    "globalTid": "i",
    "endGlobalTid": "i",
    "domainId": "i",
}


def load_nvtx(src: ExportSource, strings: pd.Series | None = None) -> pd.DataFrame:
    """NVTX_EVENTS ranges::

        start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL (59 push/pop,
        60 start/end, 70/71 NVTXT, 75 domain create), rangeId INTEGER, text TEXT,
        globalTid INTEGER, endGlobalTid INTEGER (set when a start/end range ends on another
        thread), textId INTEGER -- StringIds, domainId INTEGER, payload columns...

    -> ``domain`` ("" = default domain), ``range`` (text or StringIds[textId]), ``style``
    ("PushPop"/"StartEnd"), ``start_ns, end_ns, duration_ns, pid, tid, end_tid`` (thread that
    ended it), ``level`` (0 = outermost; depth among the ranges of the same thread, as nsys's
    projection reports compute it), sorted by start. A range never closed gets the last NVTX
    timestamp as end, as nsys's reports do."""
    strings = load_string_ids(src) if strings is None else strings
    kinds = (*NVTX_PUSHPOP, *NVTX_STARTEND, NVTX_DOMAIN_CREATE)
    raw = src.read("NVTX_EVENTS", _NVTX, where=("eventType", kinds))
    raw = raw.sort_values("start", kind="stable")
    etype = raw["eventType"].to_numpy()
    pid, tid = split_global_id(raw["globalTid"].to_numpy())
    text = np.where(
        raw["textId"].to_numpy() >= 0,
        _resolve(strings, raw["textId"].to_numpy()),
        raw["text"].to_numpy(dtype=object),
    )
    # Domains are per process: (pid, domainId) -> name; the first creation wins, like nsys.
    is_dom = etype == NVTX_DOMAIN_CREATE
    dom = pd.DataFrame({"pid": pid[is_dom], "id": raw["domainId"].to_numpy()[is_dom]})
    dom["name"] = text[is_dom]
    dom = dom.drop_duplicates(["pid", "id"])
    dom_names = pd.Series(
        dom["name"].to_numpy(), index=pd.MultiIndex.from_arrays([dom["pid"], dom["id"]])
    )

    rng = ~is_dom
    pid, tid, text = pid[rng], tid[rng], text[rng]
    start = raw["start"].to_numpy()[rng]
    end = raw["end"].to_numpy()[rng]
    if len(start):
        last = max(int(start.max()), int(end.max()))
        end = np.where(end < 0, last, end)
    end_gtid = raw["endGlobalTid"].to_numpy()[rng]
    _, end_tid = split_global_id(np.where(end_gtid < 0, raw["globalTid"].to_numpy()[rng], end_gtid))
    domain_id = raw["domainId"].to_numpy()[rng]
    domain = dom_names.reindex(pd.MultiIndex.from_arrays([pid, domain_id]))
    frame = _frame(
        {
            "domain": domain.to_numpy(dtype=object, na_value=""),
            "range": text.astype(object),
            "style": np.where(np.isin(etype[rng], NVTX_PUSHPOP), "PushPop", "StartEnd").astype(
                object
            ),
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,
            "pid": pid,
            "tid": tid,
            "end_tid": end_tid,
        }
    )
    frame["level"] = nesting_levels(frame)
    return frame


def nesting_levels(nvtx: pd.DataFrame) -> np.ndarray:
    """Depth of each range among the ranges of its (pid, tid): how many enclose it.

    Ranges of one thread nest (push/pop always; start/end in practice), so after sorting by
    (thread, start, longest first) the ranges enclosing one are those started before it that
    have not ended by its start: depth = rank in thread - ranges of the thread ended by then."""
    n = len(nvtx)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    pid, tid = nvtx["pid"].to_numpy(), nvtx["tid"].to_numpy()
    start, end = nvtx["start_ns"].to_numpy(), nvtx["end_ns"].to_numpy()
    order = np.lexsort((-end, start, tid, pid))
    thread = _group_ids(pid[order], tid[order])
    first = np.r_[0, np.flatnonzero(np.diff(thread)) + 1]
    sizes = np.diff(np.r_[first, n])
    rank = np.arange(n) - np.repeat(first, sizes)
    # Count, per thread, ends <= this start: search a (thread, end)-sorted list.
    s_start, s_end = start[order], end[order]
    end_order = np.lexsort((s_end, thread))
    ends_sorted = s_end[end_order]
    done = np.empty(n, dtype=np.int64)
    for lo, size in zip(first, sizes, strict=True):  # one pass per thread, not per row
        seg = ends_sorted[lo : lo + size]
        done[lo : lo + size] = np.searchsorted(seg, s_start[lo : lo + size], side="right")
    # A zero-length range ending at its own start counts itself; never below 0.
    depth = np.maximum(rank - done, 0)
    out = np.empty(n, dtype=np.int64)
    out[order] = depth
    return out


def _group_ids(*keys: np.ndarray) -> np.ndarray:
    """Dense ids of consecutive equal key tuples (keys already sorted)."""
    change = np.zeros(len(keys[0]), dtype=bool)
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.cumsum(change)


# --- TARGET_INFO_GPU / TARGET_INFO_CUDA_DEVICE --------------------------------------------------
_GPU: Spec = {
    "id": "i",
    "name": "s",
    "chipName": "s",
    "busLocation": "s",
    "smCount": "i",
    "clockRate": "i",
    "totalMemory": "i",
    "memoryBandwidth": "i",
    "l2CacheSize": "i",
    "computeMajor": "i",
    "computeMinor": "i",
}


def load_gpu_info(src: ExportSource) -> list[dict[str, object]]:
    """TARGET_INFO_GPU (one row per GPU)::

        id INTEGER NOT NULL (device id), name TEXT, busLocation TEXT, l2CacheSize INTEGER,
        totalMemory INTEGER (B), memoryBandwidth INTEGER (B/s), clockRate INTEGER (Hz, max SM
        clock), smCount INTEGER, chipName TEXT, computeMajor/Minor INTEGER, ...

    joined with TARGET_INFO_CUDA_DEVICE (``gpuId, cudaId, pid``) for the CUDA device id.
    -> list of dicts: ``device_id, cuda_device, name, chip, bus, sm_count, sm_clock_max_hz,
    memory_bytes, memory_bandwidth_bytes_per_s, l2_bytes, compute_capability``."""
    gpus = src.read("TARGET_INFO_GPU", _GPU)
    cuda = src.read("TARGET_INFO_CUDA_DEVICE", {"gpuId": "i", "cudaId": "i"})
    cuda_of = dict(zip(cuda["gpuId"], cuda["cudaId"], strict=True))
    out: list[dict[str, object]] = []
    for row in gpus.itertuples(index=False):  # one row per GPU, a handful at most
        out.append(
            {
                "device_id": int(row.id),
                "cuda_device": int(cuda_of.get(row.id, row.id)),
                "name": row.name,
                "chip": row.chipName,
                "bus": row.busLocation,
                "sm_count": int(row.smCount),
                "sm_clock_max_hz": int(row.clockRate),
                "memory_bytes": int(row.totalMemory),
                "memory_bandwidth_bytes_per_s": int(row.memoryBandwidth),
                "l2_bytes": int(row.l2CacheSize),
                "compute_capability": f"{row.computeMajor}.{row.computeMinor}",
            }
        )
    return out
