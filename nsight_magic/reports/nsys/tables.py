"""One loader per Nsight Systems exporter table, reading a ``.sqlite`` export or a parquet dir.

``open_export(path)`` returns an :class:`ExportSource`; each ``load_*`` function takes one and
returns a DataFrame whose columns and dtypes do not depend on the export format (ints are
``int64`` with ``-1`` for NULL ids, texts are ``str`` with ``""`` for NULL). A table nsys left out
(it omits empty ones) gives an empty frame with the same columns. Names are resolved here:
StringIds, NVTX text/textId and domains, memcpy kinds. Timestamps stay on the report's clock.

Schemas quoted below are those of export schema 3.20 (Nsight Systems 2025.3).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...analysis.nvtx_nesting import nesting_levels
from ...errors import CorruptReportError, EmptyReportError, UnsupportedReportError

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
_Keep = "tuple[str, Callable[[np.ndarray], np.ndarray]] | None"


def split_global_id(global_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) from nsys's serialized GlobalId (pid in bits 24..47, tid in bits 0..23)."""
    g = np.asarray(global_id, dtype=np.int64)
    return (g >> 24) & 0xFFFFFF, g & 0xFFFFFF


# --- sources ------------------------------------------------------------------------------------
try:  # Arrow-native SQLite reader: rows go straight into Arrow arrays, no Python objects per row.
    import adbc_driver_manager
    import adbc_driver_sqlite.dbapi as _adbc
except ImportError:  # pragma: no cover - a declared dependency; sqlite3 is the fallback
    _adbc = None
    _ADBC_ERRORS: tuple[type[BaseException], ...] = ()
else:
    _ADBC_ERRORS = (adbc_driver_manager.Error,)

_READ_ERRORS = (
    sqlite3.Error,
    pa.ArrowException,
    OSError,
    ValueError,
    OverflowError,
    TypeError,
    *_ADBC_ERRORS,
)

Columns = dict[str, "np.ndarray | pa.Array"]


@dataclass
class ExportSource:
    """An opened export: ``tables`` are the table names present; ``read`` returns typed columns."""

    path: Path
    kind: Literal["sqlite", "parquet"]
    tables: frozenset[str]
    _conn: sqlite3.Connection | None = field(default=None, repr=False)
    _columns: dict[str, frozenset[str]] = field(default_factory=dict, repr=False)
    _arrow_conn: Any = field(default=None, repr=False)
    use_adbc: bool = field(default=_adbc is not None, repr=False)

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

    def read(self, table: str, spec: Spec, where: _Where = None) -> pd.DataFrame:
        """Columns of ``spec`` from ``table`` (absent table or column -> empty / NULL-filled);
        ``where=(column, values)`` keeps rows whose column is one of the ints."""
        return _frame(self.read_columns(table, spec, where))

    def read_columns(
        self, table: str, spec: Spec, where: _Where = None, keep: _Keep = None
    ) -> Columns:
        """Like :meth:`read` but as arrays, without building a frame: ``int64`` / ``float64``
        numpy arrays for "i" / "f" columns, Arrow ``large_string`` arrays for "s" columns.
        ``keep=(column, fn)``: only the rows where ``fn(int64 values of column)`` is True (the
        other columns are converted for those rows only)."""
        if not self.has(table):
            return _empty_columns(spec)
        present = self.columns_of(table)
        try:
            if self.kind == "sqlite":
                return self._read_sqlite(table, spec, present, where, keep)
            return self._read_parquet(table, spec, present, where, keep)
        except _READ_ERRORS as exc:
            raise _corrupt(self.path, exc) from exc

    def _read_sqlite(
        self, table: str, spec: Spec, present: frozenset[str], where: _Where, keep: _Keep
    ) -> Columns:
        exprs = []
        for col, kind in spec.items():
            src = f'"{col}"' if col in present else "NULL"
            if kind == "s":  # any stored type reads as its text, as str() did
                exprs.append(f"coalesce(CAST({src} AS TEXT), '') AS \"{col}\"")
            elif kind == "f":
                exprs.append(f'CAST({src} AS REAL) AS "{col}"')
            else:
                exprs.append(f'coalesce({src}, -1) AS "{col}"')
        sql = f'SELECT {", ".join(exprs)} FROM "{table}"'
        if where:
            sql += f' WHERE "{where[0]}" IN ({", ".join(str(int(v)) for v in where[1])})'
        if self.use_adbc:
            cur = self._adbc().cursor()
            try:
                if keep is None:
                    cur.execute(sql)
                    return _from_arrow(cur.fetch_arrow_table(), spec, frozenset(spec), None)
                # Stream in batches and filter each: only the kept rows stay in memory.
                cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": "65536"})
                cur.execute(sql)
                parts = [
                    _from_arrow(pa.Table.from_batches([b]), spec, frozenset(spec), keep)
                    for b in cur.fetch_record_batch()
                ]
                return _concat_columns(parts, spec)
            finally:
                cur.close()
        assert self._conn is not None
        rows = self._conn.execute(sql).fetchall()
        cols = list(zip(*rows, strict=True)) if rows else [() for _ in spec]
        out = {c: _py_column(v, spec[c]) for c, v in zip(spec, cols, strict=True)}
        if keep:
            mask = keep[1](out[keep[0]])  # type: ignore[arg-type]
            out = {
                c: v.filter(pa.array(mask)) if isinstance(v, pa.Array) else v[mask]
                for c, v in out.items()
            }
        return out

    def _adbc(self) -> Any:
        if self._arrow_conn is None:
            self._arrow_conn = _adbc.connect(_ro_uri(self.path))
        return self._arrow_conn

    def _read_parquet(
        self, table: str, spec: Spec, present: frozenset[str], where: _Where, keep: _Keep
    ) -> Columns:
        wanted = [c for c in spec if c in present]
        if where:
            wanted = list(dict.fromkeys([*wanted, where[0]]))
        # ParquetFile, not read_table: no pyarrow.dataset import (~0.25 s) and pre-buffered I/O.
        with pq.ParquetFile(self.path / f"{table}.parquet", pre_buffer=True) as pf:
            if keep and pf.num_row_groups > 1:
                # Filter row group by row group: only the kept rows stay in memory.
                parts = [
                    _from_arrow(pf.read_row_group(i, columns=wanted), spec, present, keep)
                    for i in range(pf.num_row_groups)
                ]
                return _concat_columns(parts, spec)
            data = pf.read(columns=wanted)
        if where:
            wcol = data[where[0]]
            mask = pc.is_in(wcol, value_set=pa.array(list(where[1]), wcol.type))
            data = data.filter(pc.fill_null(mask, False))
        return _from_arrow(data, spec, present, keep)

    def close(self) -> None:
        if self._arrow_conn is not None:
            with contextlib.suppress(*_READ_ERRORS):
                self._arrow_conn.close()
            self._arrow_conn = None


def _concat_columns(parts: list[Columns], spec: Spec) -> Columns:
    if not parts:
        return _empty_columns(spec)
    out: Columns = {}
    for col, kind in spec.items():
        if kind == "s":
            out[col] = pa.concat_arrays([p[col] for p in parts])  # type: ignore[misc]
        else:
            out[col] = np.concatenate([p[col] for p in parts])  # type: ignore[misc]
    return out


def _from_arrow(data: pa.Table, spec: Spec, present: frozenset[str], keep: _Keep) -> Columns:
    out: Columns = {}
    if keep and keep[0] in present:
        key = _arrow_column(data[keep[0]], "i")
        mask = np.asarray(keep[1](key), dtype=bool)  # type: ignore[arg-type]
        data = data.filter(pa.array(mask))
        out[keep[0]] = key[mask]
    elif keep:  # the column is absent: all NULL (-1)
        mask = np.asarray(keep[1](np.full(data.num_rows, -1, dtype=np.int64)), dtype=bool)
        data = data.filter(pa.array(mask))
    for col, kind in spec.items():
        if col in out:
            continue
        if col not in present:
            out[col] = _null_column(kind, data.num_rows)
        else:
            out[col] = _arrow_column(data[col], kind)
    return {c: out[c] for c in spec}


def _arrow_column(arr: pa.Array | pa.ChunkedArray, kind: Kind) -> np.ndarray | pa.Array:
    if kind == "i":
        ints = arr.cast(pa.int64()) if arr.type != pa.int64() else arr
        if ints.null_count:
            ints = pc.fill_null(ints, -1)
        return np.ascontiguousarray(ints.to_numpy(), dtype=np.int64)
    if kind == "f":
        return np.asarray(arr.cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)
    filled = arr.cast(pa.large_string()) if arr.type != pa.large_string() else arr
    if filled.null_count:
        filled = pc.fill_null(filled, "")
    if isinstance(filled, pa.ChunkedArray):
        filled = filled.combine_chunks() if filled.num_chunks != 1 else filled.chunk(0)
    return filled


def _py_column(values: tuple[object, ...], kind: Kind) -> np.ndarray | pa.Array:
    if kind == "i":
        return np.asarray(values, dtype=np.int64)
    if kind == "f":
        return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    return pa.array([str(v) for v in values], pa.large_string())


def _null_column(kind: Kind, n: int) -> np.ndarray | pa.Array:
    if kind == "s":
        return pa.array([""] * n, pa.large_string()) if n else pa.array([], pa.large_string())
    dtype = np.float64 if kind == "f" else np.int64
    return np.full(n, _NULL[kind], dtype=dtype)


def _empty_columns(spec: Spec) -> Columns:
    return {c: _null_column(k, 0) for c, k in spec.items()}


_STR_DTYPE = pd.Series([""], dtype=object).astype("str").dtype


def str_series(values: pa.Array | np.ndarray) -> pd.Series:
    """A ``str`` column (pandas' string dtype; Arrow-backed without a copy where pandas has it)."""
    if isinstance(values, np.ndarray):
        return pd.Series(values, dtype=object).astype("str")
    if isinstance(_STR_DTYPE, np.dtype):  # pragma: no cover - pandas < 3 without the str dtype
        return pd.Series(values.to_pylist(), dtype=object).astype("str")
    return pd.Series(pd.array(values, dtype=_STR_DTYPE))


def _frame(columns: Mapping[str, np.ndarray | pa.Array | pd.Series]) -> pd.DataFrame:
    data = {}
    for col, arr in columns.items():
        is_text = isinstance(arr, np.ndarray) and arr.dtype == object
        if is_text or isinstance(arr, (pa.Array, pa.ChunkedArray)):
            data[col] = str_series(arr)
        else:
            data[col] = arr
    return pd.DataFrame(data)


def _ro_uri(path: Path) -> str:
    """Read-only SQLite URI; the path percent-encoded, so spaces, '#', '?' and '%' are safe."""
    return f"{path.resolve().as_uri()}?mode=ro"


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
            conn = sqlite3.connect(_ro_uri(path), uri=True, check_same_thread=False)
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
@dataclass(frozen=True)
class StringTable:
    """StringIds ready for vectorised lookups: work is done once per distinct id, rows only get
    integer positions and an Arrow ``take`` (no per-row Python strings)."""

    ids: np.ndarray  # sorted, unique
    values: pa.LargeStringArray  # values[i] is the text of ids[i]; one extra "" at the end
    _direct: np.ndarray | None = field(default=None, repr=False)  # id -> position (small ids)

    @classmethod
    def from_columns(cls, ids: np.ndarray, values: pa.Array) -> StringTable:
        ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        if len(ids) and np.any(order[1:] != order[:-1] + 1):
            ids, values = ids[order], values.take(pa.array(order))
        if len(ids) > 1 and np.any(ids[1:] == ids[:-1]):
            raise ValueError("StringIds has duplicate ids")
        n = len(ids)
        values = pa.concat_arrays(
            [values.cast(pa.large_string()), pa.array([""], pa.large_string())]
        )
        direct = None
        if n and ids[0] >= 0 and ids[-1] < max(4 * n + 1024, 1 << 16):
            direct = np.full(int(ids[-1]) + 1, n, dtype=np.int64)
            direct[ids] = np.arange(n)
        return cls(ids, values, direct)

    @classmethod
    def coerce(cls, strings: pd.Series | StringTable) -> StringTable:
        if isinstance(strings, StringTable):
            return strings
        texts = pa.array([str(v) for v in strings.to_numpy(dtype=object)], pa.large_string())
        return cls.from_columns(strings.index.to_numpy(dtype=np.int64), texts)

    def series(self) -> pd.Series:
        """id -> text, as :func:`load_string_ids` returns it."""
        return pd.Series(str_series(self.values[:-1]).to_numpy(), index=self.ids, dtype="str")

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Index into ``values`` per id; unknown or NULL (-1) ids point at the trailing ""."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(self.ids)
        if self._direct is not None:
            ok = (ids >= 0) & (ids < len(self._direct))
            return np.where(ok, self._direct[np.where(ok, ids, 0)], n)
        if n == 0:
            return np.full(len(ids), 0, dtype=np.int64)
        pos = np.searchsorted(self.ids, ids)
        hit = pos < n
        hit[hit] = self.ids[pos[hit]] == ids[hit]
        return np.where(hit, pos, n)

    def take(self, ids: np.ndarray, transform: Callable[[str], str] | None = None) -> pa.Array:
        """Texts of ``ids`` ("" when unknown) as an Arrow array; ``transform`` is applied once
        per distinct text."""
        pos = self.positions(ids)
        if transform is None:
            return self.values.take(pa.array(pos))
        used = np.flatnonzero(np.bincount(pos, minlength=len(self.values)))
        texts = [transform(t) for t in self.values.take(pa.array(used)).to_pylist()]
        lut = np.zeros(len(self.values), dtype=np.int64)
        lut[used] = np.arange(len(used))
        return pa.array(texts, pa.large_string()).take(pa.array(lut[pos]))

    def categorical(self, ids: np.ndarray) -> pd.Categorical:
        """Texts of ``ids`` as a Categorical (sorted distinct texts): equal texts share a code,
        so grouping by it is grouping by the text, without one string object per row."""
        pos = self.positions(ids)
        used = np.flatnonzero(np.bincount(pos, minlength=len(self.values)))
        texts = self.values.take(pa.array(used)).to_pylist()
        cats = sorted(set(texts))
        code_of = {t: i for i, t in enumerate(cats)}
        lut = np.zeros(len(self.values), dtype=np.int64)
        lut[used] = [code_of[t] for t in texts]
        return pd.Categorical.from_codes(lut[pos], categories=pd.Index(cats, dtype="str"))


def load_string_table(src: ExportSource) -> StringTable:
    """StringIds: ``id INTEGER PRIMARY KEY, value TEXT NOT NULL`` as a :class:`StringTable`."""
    cols = src.read_columns("StringIds", {"id": "i", "value": "s"})
    return StringTable.from_columns(cols["id"], cols["value"])  # type: ignore[arg-type]


def load_string_ids(src: ExportSource) -> pd.Series:
    """StringIds: ``id INTEGER PRIMARY KEY, value TEXT NOT NULL`` -> Series value indexed by id."""
    frame = src.read("StringIds", {"id": "i", "value": "s"})
    return pd.Series(frame["value"].to_numpy(), index=frame["id"].to_numpy(), dtype="str")


def _strings(src: ExportSource, strings: pd.Series | StringTable | None) -> StringTable:
    return load_string_table(src) if strings is None else StringTable.coerce(strings)


def _start_order(start: np.ndarray) -> np.ndarray | None:
    """Stable order by start (None when already sorted, the usual case)."""
    if len(start) < 2 or bool(np.all(start[1:] >= start[:-1])):
        return None
    return np.argsort(start, kind="stable")


def _sort_columns(cols: Columns, by: str = "start") -> Columns:
    order = _start_order(cols[by])  # type: ignore[arg-type]
    if order is None:
        return cols
    idx = pa.array(order)
    return {c: v.take(idx) if isinstance(v, pa.Array) else v[order] for c, v in cols.items()}


# --- CUPTI_ACTIVITY_KIND_RUNTIME ----------------------------------------------------------------
_RUNTIME: Spec = {
    "start": "i",
    "end": "i",
    "globalTid": "i",
    "correlationId": "i",
    "nameId": "i",
    "returnValue": "i",
}
_API_SUFFIX = re.compile(r"_v\d{4}$")


def load_cuda_api(
    src: ExportSource, strings: pd.Series | StringTable | None = None
) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_RUNTIME (runtime and driver API calls)::

        start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
        globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL  -- StringIds,
        returnValue INTEGER NOT NULL, callchainId INTEGER

    -> ``name, start_ns, end_ns, duration_ns, correlation_id, pid, tid, return_value``,
    sorted by start."""
    table = _strings(src, strings)
    raw = _sort_columns(src.read_columns("CUPTI_ACTIVITY_KIND_RUNTIME", _RUNTIME))
    pid, tid = split_global_id(raw["globalTid"])
    start, end = raw["start"], raw["end"]
    return _frame(
        {
            "name": table.take(raw["nameId"], _api_name),  # type: ignore[arg-type]
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,  # type: ignore[operator]
            "correlation_id": raw["correlationId"],
            "pid": pid,
            "tid": tid,
            "return_value": raw["returnValue"],
        }
    )


def _api_name(name: str) -> str:
    """Drop the 4-digit ABI suffix as ``nsys stats`` does ("cudaMalloc_v3020" -> "cudaMalloc";
    5-digit ones such as "cudaStreamIsCapturing_v10000" stay, as nsys prints them)."""
    return _API_SUFFIX.sub("", name)


def load_launches(src: ExportSource, correlation_ids: np.ndarray) -> pd.DataFrame:
    """The runtime calls whose correlationId is in ``correlation_ids`` (those that launched
    the GPU ops at hand): ``start_ns, end_ns, correlation_id, pid, tid``, sorted by start like
    ``cuda_api()`` (so the first call per id is the same). Reads 4 integer columns only and
    filters them with a bitmap: no names, no per-row objects."""
    spec: Spec = {"start": "i", "end": "i", "globalTid": "i", "correlationId": "i"}
    wanted = np.asarray(correlation_ids, dtype=np.int64)
    keep = ("correlationId", _id_set(wanted))
    raw = _sort_columns(src.read_columns("CUPTI_ACTIVITY_KIND_RUNTIME", spec, keep=keep))
    pid, tid = split_global_id(raw["globalTid"])
    start, end = raw["start"], raw["end"]
    return pd.DataFrame(
        {
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,  # type: ignore[operator]
            "correlation_id": raw["correlationId"],
            "pid": pid,
            "tid": tid,
        }
    )


def _id_set(wanted: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
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
_KERNEL_CORE: Spec = {
    k: _KERNEL[k]
    for k in ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName")
}


def _launch_tid(api: pd.DataFrame, correlation: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """tid of the API call that launched each GPU op (join on correlationId + pid; the first
    such call in ``api``'s order); -1 if none. ``api`` needs ``correlation_id, pid, tid``."""
    if len(correlation) == 0 or len(api) == 0:
        return np.full(len(correlation), -1, dtype=np.int64)
    a_corr, a_pid = api["correlation_id"].to_numpy(), api["pid"].to_numpy()
    limit = (1 << 32) - 2
    packable = all(
        len(c) == 0 or (int(c.min()) >= -1 and int(c.max()) <= limit) for c in (a_corr, correlation)
    ) and all(len(p) == 0 or (int(p.min()) >= 0 and int(p.max()) < 1 << 30) for p in (a_pid, pid))
    if not packable:  # ids outside nsys's ranges (damaged report): the general join
        key = pd.MultiIndex.from_arrays([a_corr, a_pid])
        tids = pd.Series(api["tid"].to_numpy(), index=key)
        tids = tids[~key.duplicated()]
        found = tids.reindex(pd.MultiIndex.from_arrays([correlation, pid]))
        return found.fillna(-1).to_numpy(dtype=np.int64)
    a_key = (a_pid.astype(np.int64) << 32) | (a_corr.astype(np.int64) + 1)
    g_key = (np.asarray(pid, np.int64) << 32) | (np.asarray(correlation, np.int64) + 1)
    order = np.argsort(a_key, kind="stable")  # equal keys keep api order: the first call wins
    a_sorted = a_key[order]
    pos = np.minimum(np.searchsorted(a_sorted, g_key, side="left"), len(a_sorted) - 1)
    hit = a_sorted[pos] == g_key
    return np.where(hit, api["tid"].to_numpy()[order[pos]], -1).astype(np.int64)


def load_kernel_core(
    src: ExportSource, strings: pd.Series | StringTable | None = None
) -> pd.DataFrame:
    """The kernel columns that the summary and the NVTX projection need, cheap at any size:
    ``start_ns, end_ns, duration_ns, name`` (demangled, as a Categorical), ``device_id,
    stream_id, correlation_id, pid``; same rows and order as :func:`load_kernels`."""
    table = _strings(src, strings)
    raw = _sort_columns(src.read_columns("CUPTI_ACTIVITY_KIND_KERNEL", _KERNEL_CORE))
    pid, _ = split_global_id(raw["globalPid"])
    start, end = raw["start"], raw["end"]
    return pd.DataFrame(
        {
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,  # type: ignore[operator]
            "name": table.categorical(raw["demangledName"]),  # type: ignore[arg-type]
            "device_id": raw["deviceId"],
            "stream_id": raw["streamId"],
            "correlation_id": raw["correlationId"],
            "pid": pid,
        }
    )


def load_kernels(
    src: ExportSource,
    strings: pd.Series | StringTable | None = None,
    api: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """CUPTI_ACTIVITY_KIND_KERNEL::

        start, end INTEGER NOT NULL; deviceId, contextId, streamId INTEGER NOT NULL;
        correlationId INTEGER -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId);
        globalPid INTEGER; demangledName, shortName INTEGER NOT NULL, mangledName INTEGER
        -- StringIds; gridX..Z, blockX..Z, registersPerThread, staticSharedMemory,
        dynamicSharedMemory INTEGER NOT NULL; (launchType, cacheConfig, gridId, ... unused)

    -> the ``NsysReport.kernels()`` contract (``name`` is the demangled name, as
    ``nsys stats`` prints it; ``tid`` is the launching API call's thread), sorted by start.
    ``api`` (``cuda_api()`` or :func:`load_launches`) gives the launching calls; without it
    only the launches of these kernels are read."""
    table = _strings(src, strings)
    raw = _sort_columns(src.read_columns("CUPTI_ACTIVITY_KIND_KERNEL", _KERNEL))
    pid, _ = split_global_id(raw["globalPid"])
    corr = raw["correlationId"]
    if api is None:
        api = load_launches(src, corr)  # type: ignore[arg-type]
    start, end = raw["start"], raw["end"]
    return _frame(
        {
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,  # type: ignore[operator]
            "name": table.take(raw["demangledName"]),  # type: ignore[arg-type]
            "short_name": table.take(raw["shortName"]),  # type: ignore[arg-type]
            "mangled_name": table.take(raw["mangledName"]),  # type: ignore[arg-type]
            "device_id": raw["deviceId"],
            "context_id": raw["contextId"],
            "stream_id": raw["streamId"],
            "correlation_id": corr,
            "pid": pid,
            "tid": _launch_tid(api, corr, pid),  # type: ignore[arg-type]
            "grid_x": raw["gridX"],
            "grid_y": raw["gridY"],
            "grid_z": raw["gridZ"],
            "block_x": raw["blockX"],
            "block_y": raw["blockY"],
            "block_z": raw["blockZ"],
            "registers_per_thread": raw["registersPerThread"],
            "static_smem_bytes": raw["staticSharedMemory"],
            "dynamic_smem_bytes": raw["dynamicSharedMemory"],
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


def load_nvtx(src: ExportSource, strings: pd.Series | StringTable | None = None) -> pd.DataFrame:
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
    table = _strings(src, strings)
    kinds = (*NVTX_PUSHPOP, *NVTX_STARTEND, NVTX_DOMAIN_CREATE)
    raw = _sort_columns(src.read_columns("NVTX_EVENTS", _NVTX, where=("eventType", kinds)))
    etype: np.ndarray = raw["eventType"]  # type: ignore[assignment]
    gtid: np.ndarray = raw["globalTid"]  # type: ignore[assignment]
    text_id: np.ndarray = raw["textId"]  # type: ignore[assignment]
    domain_id: np.ndarray = raw["domainId"]  # type: ignore[assignment]
    pid, tid = split_global_id(gtid)
    registered = text_id >= 0
    text = raw["text"]
    if registered.any():
        text = pc.if_else(pa.array(registered), table.take(text_id), text)
    # Domains are per process: (pid, domainId) -> name; the first creation wins, like nsys.
    is_dom = etype == NVTX_DOMAIN_CREATE
    rng = ~is_dom
    dom_rows = np.flatnonzero(is_dom)
    dom_code = _domain_codes(pid[dom_rows], domain_id[dom_rows], pid[rng], domain_id[rng])
    dom_names = pa.concat_arrays(
        [text.take(pa.array(dom_rows)), pa.array([""], pa.large_string())]  # type: ignore[union-attr]
    )
    domain = dom_names.take(pa.array(np.where(dom_code >= 0, dom_code, len(dom_rows))))

    rng_rows = pa.array(np.flatnonzero(rng))
    pid, tid = pid[rng], tid[rng]
    start, end = raw["start"][rng], raw["end"][rng]  # type: ignore[index]
    if len(start):
        last = max(int(start.max()), int(end.max()))
        end = np.where(end < 0, last, end)
    end_gtid: np.ndarray = raw["endGlobalTid"][rng]  # type: ignore[index]
    _, end_tid = split_global_id(np.where(end_gtid < 0, gtid[rng], end_gtid))
    style_idx = np.where(np.isin(etype[rng], NVTX_PUSHPOP), 0, 1)
    frame = _frame(
        {
            "domain": domain,
            "range": text.take(rng_rows),  # type: ignore[union-attr]
            "style": pa.array(["PushPop", "StartEnd"], pa.large_string()).take(pa.array(style_idx)),
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


def _domain_codes(
    dom_pid: np.ndarray, dom_id: np.ndarray, pid: np.ndarray, domain_id: np.ndarray
) -> np.ndarray:
    """For each (pid, domain_id), the index of its first (dom_pid, dom_id) row; -1 if none."""
    if len(dom_pid) == 0 or len(pid) == 0:
        return np.full(len(pid), -1, dtype=np.int64)
    ids = np.concatenate([dom_id, domain_id])
    if int(ids.min()) >= -1 and int(ids.max()) < (1 << 38):  # nsys: pid 24 bits, small ids
        d_key = (dom_pid << 39) | (dom_id + 1)
        r_key = (pid << 39) | (domain_id + 1)
        order = np.argsort(d_key, kind="stable")  # equal keys keep row order: first wins
        d_sorted = d_key[order]
        pos = np.minimum(np.searchsorted(d_sorted, r_key, side="left"), len(d_sorted) - 1)
        return np.where(d_sorted[pos] == r_key, order[pos], -1)
    first = pd.MultiIndex.from_arrays([dom_pid, dom_id])
    rows = pd.Series(np.arange(len(dom_pid)), index=first)[~first.duplicated()]
    found = rows.reindex(pd.MultiIndex.from_arrays([pid, domain_id]))
    return found.fillna(-1).to_numpy(dtype=np.int64)


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
