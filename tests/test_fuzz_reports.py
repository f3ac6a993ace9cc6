"""Fuzz the report loaders with mutated REAL fixtures: whatever the bytes, opening a report and
reading every frame it offers (and ``roofline()``, ``sol()``, ``advice()`` for ncu) either works or
raises a ``ReportError`` subclass, never anything else; and a report that loads never has a
kernel named None or "".

Counts: ``make test`` runs 1,960 mutated reports: sqlite 1,600, ncu 120 (80 of the --metrics
report, 40 of a --set roofline report, whose rule results feed ``advice()``), parquet 240. Each
example flips, zeroes, truncates or splices bytes of one real report. ``derandomize`` keeps CI
repeatable; ``make fuzz`` (NSIGHT_MAGIC_FUZZ_SCALE=4) runs the long campaign, 7,840 cases, each
shard drawing new cases beyond the short one's; NSIGHT_MAGIC_FUZZ_SCALE=0.1 a quick tenth.

SQL edits (issue 43, item 4): damage that reads without error, made with sqlite3 on a copy of
nsys_small.sqlite, must leave the report's numbers (``NUMBERS``) equal to the clean export's, or
raise a ReportError, or show a warning. ``make test`` runs the item's 10 edits and 160 random
ones, 40 per class over every table with rows: row duplication, time shifts (of start / end /
timestamp columns by hours to weeks), extreme values and overflow (int64 extremes, 2**62 + rowid
in time, size and duration columns). ~0.1 s each (copy, edit, open, read); about 17 s of CPU.

Time (2-core dev machine): ncu cases take ~0.2 s each (every ``.ncu-rep`` is read by
``ncu_report`` in a child process, ``reports.ncu.extract``, which turns ncu_report's C++ aborts
on some mutations into a CorruptReportError instead of killing pytest), parquet ~0.12 s (mutate
one table file, load, restore it), sqlite ~0.02 s. Issue 25 (``make test`` <= 6 min on 2 cores)
cut the campaign in ``make test`` from 10,000 to 7,200 and then to 1,960 (~1 min of CPU instead
of ~4.5), the long one moving to ``make fuzz``. The kinds run as seeded shards
(``@seed(shard)``: repeatable, and each shard draws other cases than the rest), so that
``pytest -n 2`` spreads them over both cores."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from nsight_magic import open_report
from nsight_magic.errors import ReportError
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.reports.nsys.report import NsysReport

SCALE = float(os.environ.get("NSIGHT_MAGIC_FUZZ_SCALE", "1"))
FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@st.composite
def mutations(draw: st.DrawFn, size: int) -> list[tuple[str, int, int]]:
    """A short list of (kind, offset, value) edits within a file of ``size`` bytes."""
    kinds = st.sampled_from(["flip", "zero", "truncate", "splice"])
    edits = st.tuples(kinds, st.integers(0, size - 1), st.integers(0, 255))
    return draw(st.lists(edits, min_size=1, max_size=4))


def mutate(data: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for kind, offset, value in edits:
        if not buf:
            break
        offset %= len(buf)
        if kind == "flip":
            buf[offset] ^= value or 0xFF
        elif kind == "zero":
            buf[offset : offset + 512] = bytes(len(buf[offset : offset + 512]))
        elif kind == "truncate":
            del buf[offset:]
        else:  # splice: repeat a page-sized slice elsewhere (plausible but wrong structure)
            chunk = buf[offset : offset + 4096]
            pos = (offset * 7 + value) % len(buf)
            buf[pos : pos + len(chunk)] = chunk
    return bytes(buf)


# What a view or a user can ask of a report: the loaders' frames, the nsys summaries nsys stats
# also prints, and ncu's roofline, SOL and advice. (The other summaries are analysis functions
# of these frames.)
NSYS_READS = (
    "meta",
    "cuda_api",
    "kernels",
    "nvtx",
    "memcpy",
    "memset",
    "graph_launches",
    "processes",
    "gpu_work",
    "gpus",
    "gpu_info",
    "capture_window",
    "kernel_summary",
    "nvtx_gpu_projection",
)
NCU_READS = (
    "kernels",
    "metrics",
    "sol",
    "roofline",
    "advice",
    "advice_note",
    "nvtx_ranges",
    "device",
)


def read_everything(report: NsysReport | NcuReport) -> None:
    """Touch every frame a view would read, so lazy loading is fuzzed too."""
    for name in NSYS_READS if isinstance(report, NsysReport) else NCU_READS:
        getattr(report, name)()
    assert isinstance(report.warnings, list)
    if isinstance(report, NcuReport):
        for launch in range(len(report)):
            report.sections(launch)
    names = report.kernels()["name"]
    assert names.notna().all() and (names.astype(str) != "").all(), "a kernel named None or ''"


def check_typed(path: Path) -> None:
    # The contract: it reads, or raises a typed ReportError; anything else fails the test.
    with contextlib.suppress(ReportError):
        read_everything(open_report(path))


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="fuzz-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def shards(total: int, count: int) -> list[Any]:
    """``count`` pytest params ``(shard, cases)`` whose cases add up to ``total``."""
    return [
        pytest.param(i, total // count + (i < total % count), id=f"{i + 1}of{count}")
        for i in range(count)
    ]


@pytest.mark.parametrize(("shard", "cases"), shards(1600, 2))
def test_fuzz_nsys_sqlite(data_dir: Path, scratch: Path, shard: int, cases: int) -> None:
    original = (data_dir / "nsys_small.sqlite").read_bytes()
    target = scratch / f"fuzz-{shard}.sqlite"

    @seed(shard)
    @settings(FUZZ, max_examples=round(cases * SCALE))
    @given(mutations(len(original)))
    def run(edits: list[tuple[str, int, int]]) -> None:
        target.write_bytes(mutate(original, edits))
        check_typed(target)

    run()


NCU_CASES = [("ncu_gemm_metrics", *s.values) for s in shards(80, 1)]
NCU_CASES += [("ncu_gemm_roofline", *s.values) for s in shards(40, 1)]


@pytest.mark.parametrize(("name", "shard", "cases"), NCU_CASES)
def test_fuzz_ncu_rep(
    ncu_reports: dict[str, Path], scratch: Path, name: str, shard: int, cases: int
) -> None:
    original = ncu_reports[name].read_bytes()
    target = scratch / f"fuzz-{shard}.ncu-rep"

    @seed(shard)
    @settings(FUZZ, max_examples=round(cases * SCALE))
    @given(mutations(len(original)))
    def run(edits: list[tuple[str, int, int]]) -> None:
        target.write_bytes(mutate(original, edits))
        check_typed(target)

    run()


@pytest.mark.parametrize(("shard", "cases"), shards(240, 1))
def test_fuzz_nsys_parquet(data_dir: Path, scratch: Path, shard: int, cases: int) -> None:
    src = data_dir / "nsys_small_pq"
    target = scratch / f"pq-{shard}"
    shutil.copytree(src, target)
    originals = {p.name: p.read_bytes() for p in sorted(target.glob("*.parquet"))}

    @seed(shard)
    @settings(FUZZ, max_examples=round(cases * SCALE))
    @given(st.sampled_from(sorted(originals)), mutations(64 * 1024))
    def run(name: str, edits: list[tuple[str, int, int]]) -> None:
        victim = target / name
        victim.write_bytes(mutate(originals[name], edits))
        try:
            check_typed(target)
        finally:  # one damaged file per case: put it back (cheaper than copying the dir)
            victim.write_bytes(originals[name])

    run()


# --- SQL edits of a real export (issue 43, item 4) ----------------------------------------------
# Damage that reads without error: the report's numbers must equal the clean export's, or a
# typed ReportError is raised, or ``warnings`` says what is wrong; never other numbers silently.
INT64_MAX = 2**63 - 1
DAY = 86_400 * 10**9
NUMBERS = (
    "kernel_summary",
    "memory_time_summary",
    "memory_size_summary",
    "copies_by_kind",
    "nvtx_gpu_projection",
    "gpu_busy_pct",
    "capture_window",
)
# the item's own ten edits (issue 43, 4), each a case of its own
ITEM4_FORMS = [
    'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = {M}, "end" = {M} WHERE rowid = 1',
    'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 1000000000000000, "end" = "end" + '
    "1000000000000000 WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)",
    "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    "INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS",
    "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = {M}",
    "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = {M} WHERE rowid = 1",
    "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = -1 WHERE rowid = 1",
    'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = -1, "end" = -1 WHERE rowid = 2',
    'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + 10080000000000 WHERE rowid = 1',
    'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start + 10080000000000',
]
# columns whose values are magnitudes (times, sizes): where shifts, extremes and overflow go.
# Ids (correlation, stream, string ids) are left out: a changed id is another real-looking row.
MAGNITUDES = ("start", "end", "timestamp", "bytes", "duration")
TIMES = ("start", "end", "timestamp")
SHIFTS = (10**13, 10**15, -(10**15), 2 * DAY, -2 * DAY)
EXTREMES = (INT64_MAX, -INT64_MAX - 1, 2**62, -(2**62))


def _tables(path: Path) -> dict[str, list[str]]:
    """Every table of the export with rows -> its columns."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            t: [r[1] for r in db.execute(f'PRAGMA table_info("{t}")')]
            for t in sorted(names)
            if db.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
        }


def numbers(path: Path) -> tuple[dict[str, Any], list[str]]:
    report = open_report(path)
    return {name: getattr(report, name)() for name in NUMBERS}, report.warnings


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    for name, value in a.items():
        if isinstance(value, pd.DataFrame):
            try:
                pd.testing.assert_frame_equal(value, b[name])
            except AssertionError:
                return False
        elif value != b[name]:
            return False
    return True


def apply_sql(original: Path, target: Path, table: str, statements: list[str]) -> None:
    """``statements`` on a copy of ``original``; ``table`` is first rebuilt without its keys
    and NOT NULLs (as a foreign writer leaves it), so that copies of rows go in."""
    shutil.copy(original, target)
    with contextlib.closing(sqlite3.connect(target)) as db, db:
        db.execute(f'CREATE TABLE "tmp_{table}" AS SELECT * FROM "{table}"')
        db.execute(f'DROP TABLE "{table}"')
        db.execute(f'ALTER TABLE "tmp_{table}" RENAME TO "{table}"')
        for sql in statements:
            db.execute(sql)


def check_numbers_or_warned(path: Path, baseline: dict[str, Any], what: str) -> None:
    try:
        found, warnings = numbers(path)
    except ReportError:
        return
    assert _same(found, baseline) or warnings, f"{what}: other numbers and no warning"


@st.composite
def sql_edits(draw: st.DrawFn, tables: dict[str, list[str]], kind: str) -> tuple[str, list[str]]:
    """(table, statements) of one ``kind`` of edit on a table with rows."""
    every, offset = draw(st.integers(1, 5)), draw(st.integers(0, 4))
    rows = f"rowid % {every} = {offset % every}"
    if kind == "duplicate":
        table = draw(st.sampled_from(sorted(tables)))
        return table, [f'INSERT INTO "{table}" SELECT * FROM "{table}" WHERE {rows}']
    names = TIMES if kind == "shift" else MAGNITUDES
    tables = {t: c for t, c in tables.items() if any(m in c for m in names)}
    table = draw(st.sampled_from(sorted(tables)))
    col = draw(st.sampled_from([c for c in tables[table] if c in names]))
    if kind == "shift":
        value = f'"{col}" + {draw(st.sampled_from(SHIFTS))}'
    elif kind == "extreme":
        value = str(draw(st.sampled_from(EXTREMES)))
    else:  # overflow: each value fits int64, any two of them summed do not
        value = f"{2**62} + rowid"
    return table, [f'UPDATE "{table}" SET "{col}" = {value} WHERE {rows}']


@pytest.fixture(scope="module")
def small_baseline(data_dir: Path) -> dict[str, Any]:
    found, warnings = numbers(data_dir / "nsys_small.sqlite")
    assert warnings == []
    return found


@pytest.mark.parametrize("form", ITEM4_FORMS)
def test_item4_forms_warn(
    data_dir: Path, scratch: Path, small_baseline: dict[str, Any], form: str
) -> None:
    sql = form.replace("{M}", str(INT64_MAX))
    table = sql.split()[1] if sql.startswith("UPDATE") else sql.split()[2]
    target = scratch / "item4.sqlite"
    apply_sql(data_dir / "nsys_small.sqlite", target, table, [sql])
    found, warnings = numbers(target)
    assert not _same(found, small_baseline) and warnings, warnings  # each changes the numbers


SQL_KINDS = ("duplicate", "shift", "extreme", "overflow")


@pytest.mark.parametrize(("kind", "cases"), [(k, 40) for k in SQL_KINDS])
def test_fuzz_sql_edits(
    data_dir: Path, scratch: Path, small_baseline: dict[str, Any], kind: str, cases: int
) -> None:
    original = data_dir / "nsys_small.sqlite"
    tables = _tables(original)
    target = scratch / f"sql-{kind}.sqlite"

    @seed(SQL_KINDS.index(kind))
    @settings(FUZZ, max_examples=round(cases * SCALE))
    @given(sql_edits(tables, kind))
    def run(edit: tuple[str, list[str]]) -> None:
        table, statements = edit
        apply_sql(original, target, table, statements)
        check_numbers_or_warned(target, small_baseline, f"{table}: {statements}")

    run()
