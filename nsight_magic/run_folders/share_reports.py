"""A run's reports rewritten for a share-safe copy (``sharing.py``), never hand-built: the SQLite
export through ``sqlite3``, the parquet folder through pyarrow; the environment rows keep only
what ``shared_env`` allows."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import (
    CorruptReportError,
)
from .ownership import PRIVATE_DIR
from .regular_files import entries, read_regular
from .run_dir import RunDir
from .share_rules import (
    _METADATA_TABLES,
    Redactions,
    _Outcome,
)
from .shared_env import (
    filter_env_list,
    filter_env_row,
    looks_like_env_list,
)


def _env_rows(db: sqlite3.Connection, outcome: _Outcome) -> None:
    """The environment nsys recorded, down to the allow-list (see ``shared_env``)."""

    def env_list(text: str) -> str:
        kept, names, dropped = filter_env_list(text)
        outcome.env_kept.update(names)
        outcome.env_dropped.update(dropped)
        return kept

    def env_row(text: str) -> int:
        kept, name = filter_env_row(text)
        (outcome.env_kept if kept else outcome.env_dropped).add(name or "<unnamed>")
        return int(kept)

    db.create_function("nm_env_list", 1, env_list)
    db.create_function("nm_env_row", 1, env_row)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "META_DATA_CAPTURE" in tables:
        db.execute(
            "DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%' "
            "AND NOT nm_env_row(CAST(value AS TEXT))"
        )
    for table in sorted(t for t in tables if t.startswith(_METADATA_TABLES)):
        columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
        for column in columns:
            db.execute(
                f'UPDATE "{table}" SET "{column}" = nm_env_list("{column}") '
                f'WHERE typeof("{column}") = \'text\' AND nm_is_env_list("{column}")'
            )


def _copy_sqlite(
    data: BinaryIO, src: Path, out: Path, rules: Redactions, outcome: _Outcome
) -> None:
    RunDir(out.parent).write_copy(out.name, data)
    try:
        with contextlib.closing(sqlite3.connect(out)) as db:
            db.create_function("nm_redact", 1, rules.text, deterministic=True)
            db.create_function("nm_is_env_list", 1, looks_like_env_list, deterministic=True)
            _env_rows(db, outcome)
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for table in tables:
                columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
                for column in columns:
                    db.execute(
                        f'UPDATE "{table}" SET "{column}" = nm_redact("{column}") '
                        f"WHERE typeof(\"{column}\") = 'text'"
                    )
            db.commit()
            db.execute("VACUUM")  # the old strings must not survive in free pages
    except sqlite3.Error as exc:
        raise CorruptReportError(
            f"{src} cannot be rewritten for sharing ({exc}); it is damaged: export the "
            ".nsys-rep again (nsys export --type sqlite) or share a run without it."
        ) from None


def _copy_parquet(src: Path, out: Path, rules: Redactions, outcome: _Outcome, root: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(mode=PRIVATE_DIR, parents=True)
    for entry in entries(src):
        item = entry.path
        rel = str(item.relative_to(root))
        if entry.skipped:
            outcome.skipped.append(f"{rel} ({entry.skipped})")
            continue
        if entry.is_dir:
            outcome.left_out.append(rel)
            continue
        try:
            data = read_regular(item)
        except OSError as exc:
            outcome.skipped.append(f"{rel} ({getattr(exc, 'what', None) or exc})")
            continue
        if item.suffix != ".parquet":
            RunDir(out).write_copy(item.name, rules.binary(data)[0])
            continue
        try:
            table = pq.read_table(pa.BufferReader(data))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptReportError(
                f"{item} cannot be read for sharing ({type(exc).__name__}: {exc}); the parquet "
                "export is damaged: export the .nsys-rep again (nsys export --type parquetdir) "
                "or share a run without it."
            ) from None
        table = _parquet_env(table, item.stem, outcome)
        for i, column in enumerate(table.schema):
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                values = [None if v is None else rules.text(v) for v in table[i].to_pylist()]
                table = table.set_column(i, column, pa.array(values, type=column.type))
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        RunDir(out).write_copy(item.name, sink.getvalue().to_pybytes())


def _parquet_env(table: Any, name: str, outcome: _Outcome) -> Any:
    """A parquet export's environment rows down to the allow-list, as ``_env_rows`` does."""
    import pyarrow as pa

    if not name.startswith(_METADATA_TABLES) or table.num_rows == 0:
        return table
    columns = {f.name: i for i, f in enumerate(table.schema)}
    if name == "META_DATA_CAPTURE" and {"name", "value"} <= columns.keys():
        keep = []
        rows = zip(table["name"].to_pylist(), table["value"].to_pylist(), strict=True)
        for row_name, value in rows:
            if "ENVIRONMENT_VARIABLE" in str(row_name):
                kept, var = filter_env_row(str(value))
                (outcome.env_kept if kept else outcome.env_dropped).add(var or "<unnamed>")
                keep.append(kept)
            else:
                keep.append(True)
        table = table.filter(pa.array(keep))
    for i, column in enumerate(table.schema):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        values = table[i].to_pylist()
        if not any(isinstance(v, str) and looks_like_env_list(v) for v in values):
            continue
        fixed = []
        for v in values:
            if isinstance(v, str) and looks_like_env_list(v):
                v, names, dropped = filter_env_list(v)
                outcome.env_kept.update(names)
                outcome.env_dropped.update(dropped)
            fixed.append(v)
        table = table.set_column(i, column, pa.array(fixed, type=column.type))
    return table
