"""The source adapter: an nsys export (``.sqlite`` or parquet dir) read as typed columns.

``open_export(path)`` checks what the path is and its export schema, and returns an
:class:`ExportSource`. ``read_columns(table, spec)`` gives :class:`Columns` whose types do not
depend on the export format: ints are ``int64`` with ``-1`` for NULL, floats ``float64`` with NaN,
texts Arrow ``large_string`` with ``""`` for NULL. A table nsys left out (it omits empty ones) or
a column it does not have reads as empty / NULL-filled. SQLite is read through ADBC (rows go
straight into Arrow arrays) with the stdlib ``sqlite3`` as the fallback; parquet through pyarrow.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...errors import CorruptReportError, EmptyReportError, ReportError, UnsupportedReportError
from ..paths import require_regular_file
from .columns import Columns, Kind, Spec, null_column, to_frame

if TYPE_CHECKING:
    from adbc_driver_manager.dbapi import Connection as ArrowConnection

__all__ = ["SUPPORTED_SCHEMA_MAJOR", "ExportSource", "RowFilter", "export_meta", "open_export"]

SUPPORTED_SCHEMA_MAJOR = 3
SQLITE_MAGIC = b"SQLite format 3\x00"

RowFilter = tuple[str, Callable[[np.ndarray], np.ndarray]]  # (int column, values -> keep mask)
Where = tuple[str, tuple[int, ...]]  # (int column, values to keep), done by the reader


# --- readers ------------------------------------------------------------------------------------
try:  # Arrow-native SQLite reader: rows go straight into Arrow arrays, no Python objects per row.
    import adbc_driver_manager
    import adbc_driver_sqlite.dbapi as _adbc
except ImportError:  # pragma: no cover - a declared dependency; sqlite3 is the fallback
    _HAVE_ADBC = False
    _ADBC_ERRORS: tuple[type[BaseException], ...] = ()
else:
    _HAVE_ADBC = True
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
_BATCH_ROWS = "65536"  # ADBC batch size when filtering while streaming


@dataclass
class ExportSource:
    """An opened export: ``tables`` are the table names present; ``read_columns`` reads them."""

    path: Path
    kind: Literal["sqlite", "parquet"]
    tables: frozenset[str]
    _conn: sqlite3.Connection | None = field(default=None, repr=False)
    views: frozenset[str] = frozenset()  # tables stored as SQLite views (read, and warned)
    _columns: dict[str, frozenset[str]] = field(default_factory=dict, repr=False)
    _arrow_conn: ArrowConnection | None = field(default=None, repr=False)
    use_adbc: bool = field(default=_HAVE_ADBC, repr=False)

    def has(self, table: str) -> bool:
        return table in self.tables

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """A read of the export: what SQLite or pyarrow raise reading it is one
        ``CorruptReportError`` naming the file; a ``ReportError`` raised on purpose (a table
        file that is a pipe) passes as it is."""
        try:
            yield
        except ReportError:
            raise
        except _READ_ERRORS as exc:
            raise corrupt(self.path, exc) from exc

    def columns_of(self, table: str) -> frozenset[str]:
        if table not in self._columns:
            with self._reading():
                if self._conn is not None:
                    rows = self._conn.execute(f'PRAGMA table_info("{table}")').fetchall()
                    self._columns[table] = frozenset(r[1] for r in rows)
                else:
                    schema = pq.read_schema(self._parquet(table))
                    self._columns[table] = frozenset(schema.names)
        return self._columns[table]

    def num_rows(self, table: str) -> int:
        """Rows in ``table`` (0 when absent), without reading them."""
        if not self.has(table):
            return 0
        with self._reading():
            if self._conn is not None:
                return int(self._conn.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0])
            return int(pq.ParquetFile(self._parquet(table)).metadata.num_rows)

    def non_text_rows(self, table: str, column: str) -> int:
        """Rows whose ``column`` holds something other than text (a number, a blob): 0 for
        parquet, whose schema types every value."""
        if self._conn is None or not self.has(table) or column not in self.columns_of(table):
            return 0
        sql = f"SELECT COUNT(*) FROM \"{table}\" WHERE typeof(\"{column}\") NOT IN ('text', 'null')"
        with self._reading():
            return int(self._conn.execute(sql).fetchone()[0])

    def distinct_ints(self, table: str, column: str) -> np.ndarray:
        """The distinct values of an int column (NULL as -1), sorted; the database does the
        work for SQLite (no row reaches Python), pyarrow for parquet."""
        spec: Spec = {column: "i"}
        if not self.has(table):
            return np.zeros(0, dtype=np.int64)
        if self._conn is None or column not in self.columns_of(table):
            return np.unique(self.read_columns(table, spec).ints[column])
        sql = f'SELECT DISTINCT coalesce("{column}", -1) FROM "{table}"'
        with self._reading():
            rows = self._conn.execute(sql).fetchall()
            return np.unique(np.asarray([r[0] for r in rows], dtype=np.int64))

    def rows_outside(
        self, table: str, columns: tuple[str, ...], lo: int, hi: int, show: int = 3
    ) -> tuple[int, list[tuple[int, dict[str, object]]]]:
        """Rows of ``table`` where any of ``columns`` holds a value below ``lo`` or above ``hi``
        (NULLs are no such value: ``read_keyed`` refuses those where they matter): their count,
        and the first ``show`` as (row number, {column: value}). Row numbers are SQLite's rowid,
        or the 1-based row of the parquet file. The database (or pyarrow) does the scan: no row
        reaches Python unless it is outside."""
        present = [c for c in columns if c in self.columns_of(table)] if self.has(table) else []
        if not present:
            return 0, []
        with self._reading():
            if self._conn is not None:
                return self._sqlite_outside(table, present, lo, hi, show)
            return self._parquet_outside(table, present, lo, hi, show)

    def _sqlite_outside(
        self, table: str, columns: list[str], lo: int, hi: int, show: int
    ) -> tuple[int, list[tuple[int, dict[str, object]]]]:
        assert self._conn is not None
        cond = " OR ".join(f'"{c}" < {int(lo)} OR "{c}" > {int(hi)}' for c in columns)
        count = int(
            self._conn.execute(f'SELECT COUNT(*) FROM "{table}" WHERE {cond}').fetchone()[0]
        )
        if not count:
            return 0, []
        cols = ", ".join(f'"{c}"' for c in columns)
        try:  # a view (or a WITHOUT ROWID table) has no rowid: rows go unnumbered (-1)
            rows = self._conn.execute(
                f'SELECT rowid, {cols} FROM "{table}" WHERE {cond} LIMIT {int(show)}'
            ).fetchall()
        except sqlite3.Error:
            rows = [(-1, *r) for r in self._conn.execute(
                f'SELECT {cols} FROM "{table}" WHERE {cond} LIMIT {int(show)}'
            ).fetchall()]  # fmt: skip
        return count, [
            (int(r[0] if r[0] is not None else -1), dict(zip(columns, r[1:], strict=True)))
            for r in rows
        ]

    def _parquet_outside(
        self, table: str, columns: list[str], lo: int, hi: int, show: int
    ) -> tuple[int, list[tuple[int, dict[str, object]]]]:
        with pq.ParquetFile(self._parquet(table), pre_buffer=True) as pf:
            data = pf.read(columns=columns)
        mask = None
        for c in columns:
            # int64 compares exactly; any other stored type (a damaged file's) as a float
            values = data[c] if data[c].type == pa.int64() else data[c].cast(pa.float64())
            out = pc.or_(pc.less(values, lo), pc.greater(values, hi))
            mask = out if mask is None else pc.or_(mask, out)
        assert mask is not None
        hits = np.flatnonzero(
            np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), bool)
        )
        first = [(int(i) + 1, {c: data[c][int(i)].as_py() for c in columns}) for i in hits[:show]]
        return len(hits), first

    def read(self, table: str, spec: Spec, where: Where | None = None) -> pd.DataFrame:
        """:meth:`read_columns` as a DataFrame."""
        return to_frame(self.read_columns(table, spec, where))

    def read_columns(
        self, table: str, spec: Spec, where: Where | None = None, keep: RowFilter | None = None
    ) -> Columns:
        """The columns of ``spec`` from ``table``. ``where=(column, ints)`` keeps the rows whose
        column is one of the ints (done by the reader); ``keep=(column, fn)`` the rows where
        ``fn(int64 values of column)`` is True, applied batch by batch so that only the kept
        rows are ever converted and held."""
        if not self.has(table):
            return Columns.empty(spec)
        present = self.columns_of(table)
        with self._reading():
            if self.kind == "sqlite":
                return self._read_sqlite(table, spec, present, where, keep)
            return self._read_parquet(table, spec, present, where, keep)

    def _read_sqlite(
        self,
        table: str,
        spec: Spec,
        present: frozenset[str],
        where: Where | None,
        keep: RowFilter | None,
    ) -> Columns:
        sql = _select_sql(table, spec, present, where)
        if self.use_adbc:
            cur = self._arrow().cursor()
            try:
                if keep is None:
                    cur.execute(sql)
                    return _from_arrow(cur.fetch_arrow_table(), spec, frozenset(spec), None)
                cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": _BATCH_ROWS})
                cur.execute(sql)
                parts = [
                    _from_arrow(pa.Table.from_batches([b]), spec, frozenset(spec), keep)
                    for b in cur.fetch_record_batch()
                ]
                return Columns.concat(parts, spec)
            finally:
                cur.close()
        assert self._conn is not None  # a sqlite source always has its connection
        rows = self._conn.execute(sql).fetchall()
        values = list(zip(*rows, strict=True)) if rows else [() for _ in spec]
        cols = Columns.build(
            spec, {c: _py_column(v, spec[c]) for c, v in zip(spec, values, strict=True)}
        )
        if keep is None:
            return cols
        return cols.filter(np.asarray(keep[1](cols.ints[keep[0]]), dtype=bool))

    def _arrow(self) -> ArrowConnection:
        if self._arrow_conn is None:
            self._arrow_conn = _adbc.connect(_ro_uri(self.path))
        return self._arrow_conn

    def _parquet(self, table: str) -> Path:
        """The table's file; a named pipe or other non-file is refused, never opened."""
        return require_regular_file(self.path / f"{table}.parquet")

    def _read_parquet(
        self,
        table: str,
        spec: Spec,
        present: frozenset[str],
        where: Where | None,
        keep: RowFilter | None,
    ) -> Columns:
        wanted = [c for c in spec if c in present]
        if where:
            wanted = list(dict.fromkeys([*wanted, where[0]]))
        # ParquetFile, not read_table: no pyarrow.dataset import (~0.25 s) and pre-buffered I/O.
        with pq.ParquetFile(self._parquet(table), pre_buffer=True) as pf:
            if keep and pf.num_row_groups > 1:
                # Filter row group by row group: only the kept rows stay in memory.
                parts = [
                    _from_arrow(pf.read_row_group(i, columns=wanted), spec, present, keep)
                    for i in range(pf.num_row_groups)
                ]
                return Columns.concat(parts, spec)
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


def _select_sql(table: str, spec: Spec, present: frozenset[str], where: Where | None) -> str:
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
    return sql


def _from_arrow(
    data: pa.Table, spec: Spec, present: frozenset[str], keep: RowFilter | None
) -> Columns:
    """Typed columns of an Arrow table; absent columns NULL-filled; ``keep`` applied first."""
    if keep:
        key_col, keep_fn = keep
        if key_col in present:
            key = _arrow_ints(data[key_col])
        else:  # the column is absent: all NULL (-1)
            key = np.full(data.num_rows, -1, dtype=np.int64)
        data = data.filter(pa.array(np.asarray(keep_fn(key), dtype=bool)))
    out: dict[str, np.ndarray | pa.Array] = {}
    for col, kind in spec.items():
        if col not in present:
            out[col] = null_column(kind, data.num_rows)
        elif kind == "i":
            out[col] = _arrow_ints(data[col])
        elif kind == "f":
            out[col] = np.asarray(
                data[col].cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64
            )
        else:
            out[col] = _arrow_texts(data[col])
    return Columns.build(spec, out)


def _arrow_ints(arr: pa.ChunkedArray) -> np.ndarray:
    ints = arr.cast(pa.int64()) if arr.type != pa.int64() else arr
    if ints.null_count:
        ints = pc.fill_null(ints, -1)
    return np.ascontiguousarray(ints.to_numpy(), dtype=np.int64)


def _arrow_texts(arr: pa.ChunkedArray) -> pa.Array:
    texts = arr.cast(pa.large_string()) if arr.type != pa.large_string() else arr
    if texts.null_count:
        texts = pc.fill_null(texts, "")
    return texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)


def _py_column(values: tuple[object, ...], kind: Kind) -> np.ndarray | pa.Array:
    """A column of the stdlib reader's Python values (NULLs were filled in SQL)."""
    if kind == "i":
        return np.asarray(values, dtype=np.int64)
    if kind == "f":
        return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    return pa.array([str(v) for v in values], pa.large_string())


def _ro_uri(path: Path) -> str:
    """Read-only SQLite URI; the path percent-encoded, so spaces, '#', '?' and '%' are safe."""
    return f"{path.resolve().as_uri()}?mode=ro"


def corrupt(path: Path, exc: BaseException) -> CorruptReportError:
    return CorruptReportError(
        f"{path} is not a readable Nsight Systems export ({type(exc).__name__}: {exc}); "
        "export the .nsys-rep again with `nsys export --type sqlite`."
    )


# --- opening ------------------------------------------------------------------------------------
def open_export(path: str | Path) -> ExportSource:
    """Open a ``.sqlite`` export or a parquet dir and check its schema version.

    Raises ``ReportNotFoundError``, ``UnsupportedReportError`` (a named pipe or other non-file,
    an unknown major schema version, not an nsys export), ``CorruptReportError`` (not SQLite,
    unreadable) or ``EmptyReportError`` (no tables)."""
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
        require_regular_file(path)
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(SQLITE_MAGIC))
        except OSError as exc:
            raise corrupt(path, exc) from exc
        if head != SQLITE_MAGIC:
            raise CorruptReportError(
                f"{path} is not an SQLite file; pass an nsys .sqlite export, a parquet dir or "
                "a .nsys-rep."
            )
        try:
            conn = sqlite3.connect(_ro_uri(path), uri=True, check_same_thread=False)
            rows = conn.execute(
                "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')"
            ).fetchall()
        except sqlite3.Error as exc:
            raise corrupt(path, exc) from exc
        if not rows:
            raise EmptyReportError(f"{path} has no tables; export the .nsys-rep again.")
        # a table stored as a view is read like one (its rows are in the file), and warned
        # about (damage.view_warnings): never read as absent, which would count 0 kernels
        views = frozenset(name for name, kind in rows if kind == "view")
        source = ExportSource(path, "sqlite", frozenset(r[0] for r in rows), conn, views=views)
    _check_schema(source)
    return source


def export_meta(src: ExportSource) -> dict[str, str]:
    """META_DATA_EXPORT as a dict: ``name TEXT NOT NULL, value TEXT`` (EXPORT_SCHEMA_VERSION,
    EXPORT_PRODUCT_VERSION, EXPORT_PARAM_*)."""
    cols = src.read_columns("META_DATA_EXPORT", {"name": "s", "value": "s"})
    return dict(zip(cols.texts["name"].to_pylist(), cols.texts["value"].to_pylist(), strict=True))


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
