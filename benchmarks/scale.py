"""Make large nsys exports by tiling a real one (the P1 ingest inputs).

The capture in tests/data/nsys_small.sqlite is repeated ``copies`` times back to back: every event
table that the kernel summary and the NVTX projection read (kernels, runtime API calls, copies,
memsets, NVTX ranges) is copied with its timestamps shifted by one capture span per copy and its
correlation ids shifted so launches still pair with their kernels. Everything else (strings, GPU and
process info, enums, metadata) is kept once, so the file is an export nsys itself can still read
(`nsys stats` runs on the result) and whose structure is the real one, only longer.

    python -m benchmarks.scale tests/data/nsys_small.sqlite out.sqlite --kernels 1000000
"""

from __future__ import annotations

import argparse
import math
import shutil
import sqlite3
from pathlib import Path
from typing import Any

# Event tables tiled per copy, with the columns that hold times / correlation ids.
TILED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "correlationId"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "correlationId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "correlationId"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "correlationId"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("start", "end", "correlationId"),
    "NVTX_EVENTS": ("start", "end", None),
}


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def scale_sqlite(src: Path, dst: Path, copies: int) -> dict[str, int]:
    """Write ``dst``: ``src`` with its event tables repeated ``copies`` times.

    Returns the row count of each tiled table."""
    if copies < 1:
        raise ValueError("copies must be >= 1")
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        present = _tables(con) & TILED.keys()
        # One capture span (first to last event over all tiled tables) plus a 1 us gap per copy.
        lo, hi = math.inf, -math.inf
        max_corr = 0
        for table in present:
            sql = f"SELECT min(start), max(coalesce(end, start)) FROM {table}"
            a, b = con.execute(sql).fetchone()
            if a is not None:
                lo, hi = min(lo, a), max(hi, b)
            if TILED[table][2]:
                (c,) = con.execute(f"SELECT max(correlationId) FROM {table}").fetchone()
                max_corr = max(max_corr, c or 0)
        span = int(hi - lo) + 1000
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("CREATE TEMP TABLE k(i INTEGER PRIMARY KEY)")  # copy index 1..copies-1
        con.executemany("INSERT INTO k(i) VALUES (?)", ((i,) for i in range(1, copies)))
        for table in present:
            start, end, corr = TILED[table]
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
            exprs = []
            for col in cols:
                if col in (start, end):
                    exprs.append(f"t.[{col}] + k.i * {span}")
                elif corr and col == corr:
                    exprs.append(f"t.[{col}] + k.i * {max_corr + 1}")
                elif col == "id":  # NVTX/runtime rows have no PK of their own in most schemas
                    exprs.append("NULL")
                else:
                    exprs.append(f"t.[{col}]")
            col_list = ", ".join(f"[{c}]" for c in cols)
            con.execute(
                f"INSERT INTO {table} ({col_list}) SELECT {', '.join(exprs)} "
                f"FROM {table} AS t CROSS JOIN k"
            )
        con.commit()
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in sorted(present)}
    finally:
        con.close()


def scale_parquet(src: Path, dst: Path, copies: int) -> dict[str, int]:
    """The same tiling on an nsys ``parquetdir`` export: every file of ``src`` is written to
    ``dst`` with nsys's own schema (types and field metadata kept), event tables repeated."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    if copies < 1:
        raise ValueError("copies must be >= 1")
    dst.mkdir(parents=True, exist_ok=True)
    tables = {p.stem: pq.read_table(p) for p in sorted(src.glob("*.parquet"))}
    present = [t for t in TILED if t in tables and tables[t].num_rows]
    lo, hi, max_corr = math.inf, -math.inf, 0
    for name in present:
        t = tables[name]
        start = t.column("start").to_numpy()
        end = t.column("end").to_numpy(zero_copy_only=False)
        end = (
            np.where(np.isnan(end.astype("float64")), start, end) if end.dtype.kind == "f" else end
        )
        lo, hi = min(lo, int(start.min())), max(hi, int(np.nanmax(end)))
        corr = TILED[name][2]
        if corr:
            max_corr = max(
                max_corr, int(np.nan_to_num(t.column(corr).to_numpy(zero_copy_only=False)).max())
            )
    span = int(hi - lo) + 1000
    counts = {}
    for name, table in tables.items():
        if name in present:
            start_col, end_col, corr = TILED[name]
            k = np.repeat(np.arange(copies, dtype=np.int64), table.num_rows)
            columns = []
            for field in table.schema:
                tiled = pa.concat_arrays([table.column(field.name).combine_chunks()] * copies)
                if field.name in (start_col, end_col):
                    tiled = _shift(tiled, k * span)
                elif corr and field.name == corr:
                    tiled = _shift(tiled, k * (max_corr + 1))
                columns.append(tiled.cast(field.type))
            table = pa.Table.from_arrays(columns, schema=table.schema)
            counts[name] = table.num_rows
        pq.write_table(table, dst / f"{name}.parquet")
    return counts


def _shift(values: Any, offsets: Any) -> Any:
    """values + offsets, keeping nulls (a NULL end or correlation id stays NULL)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.add(values.cast(pa.int64()), pa.array(offsets))


def copies_for_kernels(src: Path, kernels: int) -> int:
    """How many copies of ``src`` give at least ``kernels`` kernel rows."""
    con = sqlite3.connect(src)
    try:
        (n,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    finally:
        con.close()
    return max(1, math.ceil(kernels / n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--kernels", type=int, required=True, help="at least this many kernel rows")
    ap.add_argument("--parquet", type=Path, help="also tile this parquetdir export of src")
    ap.add_argument("--parquet-dst", type=Path, help="where the tiled parquet dir goes")
    args = ap.parse_args()
    copies = copies_for_kernels(args.src, args.kernels)
    counts = scale_sqlite(args.src, args.dst, copies)
    if args.parquet and args.parquet_dst:
        scale_parquet(args.parquet, args.parquet_dst, copies)
    for table, n in counts.items():
        print(f"{table:40s} {n:>10,d}")


if __name__ == "__main__":
    main()
