"""Damaged exports never give silent numbers: real fixture exports, copied and damaged with
sqlite3 the way a broken or hand-edited export is, give a typed ReportError (missing or NULL key
columns) or a warning on the run and in the view (negative or absurd durations); an export
beside a .nsys-rep that came from another report is detected."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from nsight_magic.errors import CorruptReportError, ReportError, StaleExportError
from nsight_magic.reports import open_report
from nsight_magic.reports.nsys.export import export_origin, stamp_path, write_stamp
from nsight_magic.results.run_loading import nsys_run
from nsight_magic.views.nsys_view import nsys_static_html

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def _damaged(tmp_path: Path, source: Path, *sql: str) -> Path:
    """A copy of ``source`` with ``sql`` applied; the tables it updates are first rebuilt
    without their NOT NULL constraints (as a damaged or foreign writer leaves them)."""
    path = tmp_path / "damaged.sqlite"
    shutil.copy(source, path)
    with sqlite3.connect(path) as db:
        for statement in sql:
            if statement.startswith("UPDATE "):
                table = statement.split()[1]
                db.execute(f'CREATE TABLE "tmp_{table}" AS SELECT * FROM "{table}"')
                db.execute(f'DROP TABLE "{table}"')
                db.execute(f'ALTER TABLE "tmp_{table}" RENAME TO "{table}"')
            db.execute(statement)
    return path


@pytest.mark.parametrize(
    ("sql", "frame", "match"),
    [
        (f"UPDATE {KERNEL} SET demangledName = NULL", "kernels", "demangledName is NULL in 26"),
        (f"ALTER TABLE {KERNEL} RENAME COLUMN demangledName TO renamed", "kernels",
         "has no demangledName column"),
        (f"UPDATE {KERNEL} SET start = NULL WHERE rowid % 2 = 0", "kernels", "start is NULL in 13"),
        (f"UPDATE {KERNEL} SET globalPid = NULL", "kernels", "globalPid is NULL"),
        ("UPDATE NVTX_EVENTS SET globalTid = NULL", "nvtx", "NVTX_EVENTS.globalTid is NULL"),
        ("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = NULL", "memcpy", "MEMCPY.start is NULL"),
        ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL", "cuda_api",
         "RUNTIME.globalTid is NULL"),
    ],
)  # fmt: skip
def test_missing_or_null_key_columns_are_a_typed_error(
    tmp_path: Path, nsys_small_sqlite: Path, sql: str, frame: str, match: str
) -> None:
    report = open_report(_damaged(tmp_path, nsys_small_sqlite, sql))
    with pytest.raises(CorruptReportError, match=match):
        getattr(report, frame)()


def test_summary_and_projection_refuse_null_names_too(
    tmp_path: Path, nsys_small_sqlite: Path
) -> None:
    """The cheap kernel read behind the summary checks the same keys (12 names never become
    one "" row)."""
    report = open_report(
        _damaged(tmp_path, nsys_small_sqlite, f"UPDATE {KERNEL} SET demangledName = NULL")
    )
    for frame in ("kernel_summary", "nvtx_gpu_projection"):
        with pytest.raises(ReportError, match="demangledName"):
            getattr(report, frame)()


def test_a_clean_copy_still_reads(tmp_path: Path, nsys_small_sqlite: Path) -> None:
    report = open_report(_damaged(tmp_path, nsys_small_sqlite))
    assert len(report.kernels()) == 26 and report.warnings == []


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        (f"UPDATE {KERNEL} SET \"end\" = start - 1000 WHERE rowid <= 3", "3 of 26 kernel rows end "
         "before they start"),
        (f"UPDATE {KERNEL} SET \"end\" = start + 200000000000000 WHERE rowid = 1",
         "1 of 26 kernel rows last over a day"),
        ("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET \"end\" = start - 5", "memcpy rows end before"),
    ],
)  # fmt: skip
def test_negative_or_absurd_durations_warn_on_the_run_and_in_the_view(
    tmp_path: Path, nsys_small_sqlite: Path, sql: str, match: str
) -> None:
    report = open_report(_damaged(tmp_path, nsys_small_sqlite, sql))
    assert any(match in w for w in report.warnings), report.warnings
    run = nsys_run(report, None, {"name": "damaged"})
    assert any(match in w for w in run.warnings)
    html = nsys_static_html(run.frames)
    assert match.split(" rows")[0] in html and "damaged" in html


# --- a stale export beside a .nsys-rep ---------------------------------------------------------
@pytest.fixture
def rep_pair(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """x.nsys-rep (nsys_small's) with no nsys on PATH to export it again."""
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    monkeypatch.delenv("NSIGHT_MAGIC_NSYS", raising=False)
    rep = tmp_path / "x.nsys-rep"
    shutil.copy(data_dir / "nsys_small.nsys-rep", rep)
    return rep


def test_unrelated_unstamped_export_is_read_with_a_warning(rep_pair: Path, data_dir: Path) -> None:
    """An unrelated x.sqlite (nsys_llm's, newer than the .nsys-rep) is not silently taken for
    the report: without nsys it is read, and the report says nothing proves it is this one."""
    shutil.copy(data_dir / "nsys_llm.sqlite", rep_pair.with_suffix(".sqlite"))
    report = open_report(rep_pair)
    assert any("without proof" in w and "x.sqlite" in w for w in report.warnings)


def test_stamped_export_of_this_report_is_read_silently(rep_pair: Path, data_dir: Path) -> None:
    export = rep_pair.with_suffix(".sqlite")
    shutil.copy(data_dir / "nsys_small.sqlite", export)
    write_stamp(rep_pair, export)  # what export_report writes after `nsys export`
    os.utime(rep_pair, ns=(1, 1))  # a copy with another mtime: the hash still matches
    assert export_origin(rep_pair, export) == "same"
    report = open_report(rep_pair)
    assert len(report.kernels()) == 26 and report.warnings == []


def test_export_stamped_from_another_report_is_refused(rep_pair: Path, data_dir: Path) -> None:
    export = rep_pair.with_suffix(".sqlite")
    shutil.copy(data_dir / "nsys_small.sqlite", export)
    write_stamp(rep_pair, export)
    shutil.copy(data_dir / "nsys_gemm.nsys-rep", rep_pair)  # the .nsys-rep was replaced
    assert export_origin(rep_pair, export) == "other"
    with pytest.raises(StaleExportError, match="exported from another report"):
        open_report(rep_pair)
    stamp_path(export).write_text("{not json")
    assert export_origin(rep_pair, export) == "unknown"


def test_a_capture_without_a_kernel_table_renders(tmp_path: Path, nsys_small_sqlite: Path) -> None:
    """nsys leaves empty tables out (a copy-only cell): the Kernels section says so and shows
    the copies, with no error in either form of the view."""
    path = _damaged(tmp_path, nsys_small_sqlite, f"DROP TABLE {KERNEL}")
    run = nsys_run(open_report(path), None, {"name": "copies only"})
    assert run.frames.kernel_table().empty
    html = nsys_static_html(run.frames)
    kernels = html.split("NVTX ranges")[0]  # the Kernels section: the note, then the copies
    assert "No kernels in this capture" in kernels and "HtoD" in kernels and "DtoH" in kernels
    assert "Error" not in html
    widget = run.widget()
    kernels_page = widget.children[1].children[0].children[0].value  # [header, tabs, link]
    assert "No kernels in this capture" in kernels_page


def test_our_own_export_beside_an_unrelated_one_is_used(rep_pair: Path, data_dir: Path) -> None:
    """With an unstamped x.sqlite (maybe the user's own data) in the way, nsys exports to
    x.nsm.sqlite instead of overwriting it; that stamped export is what a later open reads."""
    shutil.copy(data_dir / "nsys_llm.sqlite", rep_pair.with_suffix(".sqlite"))
    own = rep_pair.with_suffix(".nsm.sqlite")
    shutil.copy(data_dir / "nsys_small.sqlite", own)
    write_stamp(rep_pair, own)  # as export_report(rep, out=own) leaves it
    report = open_report(rep_pair)
    assert report.path == own and len(report.kernels()) == 26 and report.warnings == []


# --- damage that read silently before (issue 35, item 9) ---------------------------------------
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
FIRST_PUSH = "(SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 59)"


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        (f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = {INT64_MIN} WHERE rowid = 1",
         f"1 of 214 {RUNTIME} rows lie outside the capture window nsys recorded"),
        (f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET \"end\" = {INT64_MAX} WHERE rowid = 1",
         f"1 of 214 {RUNTIME} rows lie outside the capture window"),
        (f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = {INT64_MAX - 9}, \"end\" = "
         f"{INT64_MAX - 8} WHERE rowid = 1", f"{RUNTIME} rows lie outside the capture window"),
        ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET \"end\" = start - 10 WHERE rowid <= 2",
         "2 of 214 CUDA API rows end before they start"),
        (f"UPDATE NVTX_EVENTS SET \"end\" = {INT64_MAX} WHERE rowid = {FIRST_PUSH}",
         "NVTX_EVENTS rows lie outside the capture window"),
        ("UPDATE NVTX_EVENTS SET eventType = 999 WHERE eventType = 59",
         "NVTX_EVENTS holds rows of event type 999, which nsys does not define"),
        (f"INSERT INTO {KERNEL} SELECT * FROM {KERNEL} WHERE rowid <= 5",
         "5 of 31 kernel rows repeat another row exactly"),
        ("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = -bytes WHERE rowid = 1",
         "1 of 2 memcpy rows have a negative byte count"),
    ],
)  # fmt: skip
def test_damage_that_read_silently_now_warns(
    tmp_path: Path, nsys_small_sqlite: Path, sql: str, match: str
) -> None:
    statements = [sql]
    if sql.startswith("INSERT"):  # the copy keeps no UNIQUE/PRIMARY KEY that would refuse it
        statements = [f"UPDATE {KERNEL} SET start = start", sql]
    report = open_report(_damaged(tmp_path, nsys_small_sqlite, *statements))
    assert any(match in w for w in report.warnings), report.warnings
    run = nsys_run(report, None, {"name": "damaged"})
    assert any(match in w for w in run.warnings)


# --- damage that still read silently (issue 43, item 4): the report checked as a whole ---------
MEMCPY, MEMSET = "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
LAST_KERNEL = f"(SELECT max(rowid) FROM {KERNEL})"
OUTSIDE = "rows lie outside the capture window nsys recorded (0 to 0.203 s"


def _rebuilt(table: str) -> str:
    """A no-op UPDATE that makes ``_damaged`` rebuild ``table`` without its keys, so that an
    INSERT of copies of its rows goes in."""
    return f"UPDATE {table} SET start = start"


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        # a kernel at int64's end: busy % read 1.9e-11 %
        (f"UPDATE {KERNEL} SET start = {INT64_MAX}, \"end\" = {INT64_MAX} WHERE rowid = 3",
         f"1 of 26 {KERNEL} {OUTSIDE}, with 1 s of slack after its end) (row 3: start "
         f"{INT64_MAX}, end {INT64_MAX})"),
        # the last kernel 1e15 ns (11.6 days) later: busy % 1.7e-7 %
        (f"UPDATE {KERNEL} SET start = start + 1000000000000000, \"end\" = \"end\" + "
         f"1000000000000000 WHERE rowid = {LAST_KERNEL}", f"1 of 26 {KERNEL} {OUTSIDE}"),
        # a 2.8-hour kernel (under the day durations.py allows): busy % 99.99 %
        (f"UPDATE {KERNEL} SET \"end\" = start + 10080000000000 WHERE rowid = 1",
         f"1 of 26 {KERNEL} {OUTSIDE}"),
        # a CUDA API call at t = -1 (before nsys started): busy % shifted ~5 %
        (f"UPDATE {RUNTIME} SET start = -1 WHERE rowid = 1",
         f"1 of 214 {RUNTIME} {OUTSIDE}, with 1 s of slack after its end) (row 1: start -1"),
        (f"UPDATE {RUNTIME} SET start = -1, \"end\" = -1 WHERE rowid = 7",
         f"1 of 214 {RUNTIME} {OUTSIDE}, with 1 s of slack after its end) (row 7: start -1"),
        (f"UPDATE {MEMSET} SET start = start - 1000000000000000 WHERE rowid = 2",
         f"1 of 3 {MEMSET} {OUTSIDE}"),
        # NVTX ranges may open before the capture (a warm worker's), but not two days before
        ("UPDATE NVTX_EVENTS SET start = start - 172800000000000 WHERE eventType = 59",
         f"NVTX_EVENTS {OUTSIDE}, with ranges opening up to a day before it)"),
        # a table no frame reads is checked too
        (f"UPDATE DIAGNOSTIC_EVENT SET timestamp = {INT64_MIN} WHERE rowid = 2",
         f"1 of 15 DIAGNOSTIC_EVENT {OUTSIDE}, with a day of slack either side) (row 2: "
         f"timestamp {INT64_MIN})"),
        # duplicated rows of every activity table: copies read 16 MiB instead of 8 ...
        (f"INSERT INTO {MEMCPY} SELECT * FROM {MEMCPY}",
         f"2 of 4 memcpy rows repeat another row exactly ({MEMCPY}; the first at start"),
        (f"INSERT INTO {MEMSET} SELECT * FROM {MEMSET} WHERE rowid = 1",
         f"1 of 4 memset rows repeat another row exactly ({MEMSET}"),
        # ... and the NVTX projection doubled
        ("INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS",
         "17 of 34 NVTX range rows repeat another row exactly (NVTX_EVENTS"),
        (f"INSERT INTO {RUNTIME} SELECT * FROM {RUNTIME} WHERE rowid <= 4",
         f"4 of 218 CUDA API rows repeat another row exactly ({RUNTIME}"),
        # 10 TB in 1.5 ms: under 1 PiB, but faster than any memory
        (f"UPDATE {MEMCPY} SET bytes = 10000000000000 WHERE rowid = 1",
         "1 of 2 memcpy rows move over 100,000 GB/s"),
        # a copy of int64's largest size: its total wrapped to -2
        (f"UPDATE {MEMCPY} SET bytes = {INT64_MAX} WHERE rowid = 1",
         f"1 of 2 memcpy rows move over 1 PiB in one op (up to {INT64_MAX:,} bytes)"),
    ],
)  # fmt: skip
def test_damage_of_any_table_warns_naming_the_table_and_rows(
    tmp_path: Path, nsys_small_sqlite: Path, sql: str, match: str
) -> None:
    statements = [sql]
    if sql.startswith("INSERT"):
        statements = [_rebuilt(sql.split()[2]), sql]
    report = open_report(_damaged(tmp_path, nsys_small_sqlite, *statements))
    assert any(match in w for w in report.warnings), report.warnings
    run = nsys_run(report, None, {"name": "damaged"})
    assert any(match in w for w in run.warnings)


def test_a_graph_launch_outside_the_window_or_twice_warns(tmp_path: Path, data_dir: Path) -> None:
    graph = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
    report = open_report(
        _damaged(
            tmp_path,
            data_dir / "nsys_graphs_graph.sqlite",
            f'UPDATE {graph} SET "end" = {INT64_MAX} WHERE rowid = 2',
            f"INSERT INTO {graph} SELECT * FROM {graph} WHERE rowid = 1",
        )
    )
    found = "\n".join(report.warnings)
    assert f"1 of 6 {graph} rows lie outside the capture window" in found, found
    assert f"1 of 6 CUDA graph launch rows repeat another row exactly ({graph}" in found


def test_totals_of_int64_extremes_do_not_wrap(tmp_path: Path, nsys_small_sqlite: Path) -> None:
    """Three sets of int64's largest size: the total is 3 x that (float), not a wrapped int."""
    report = open_report(
        _damaged(tmp_path, nsys_small_sqlite, f"UPDATE {MEMSET} SET bytes = {INT64_MAX}")
    )
    sizes = report.memory_size_summary().set_index("operation")["total_bytes"]
    assert sizes["[CUDA memset]"] == pytest.approx(3 * INT64_MAX)
    assert any("3 of 3 memset rows move over 1 PiB" in w for w in report.warnings)
    copies = _damaged(tmp_path, nsys_small_sqlite, f"UPDATE {MEMCPY} SET bytes = {INT64_MAX}")
    report = open_report(copies)
    by_kind = report.copies_by_kind()
    assert (by_kind["bytes"] == INT64_MAX).all() and (by_kind["bandwidth_gb_per_s"] > 0).all()
    assert sum(int(b) for b in by_kind["bytes"]) == 2 * INT64_MAX  # never -2
    widest = _damaged(
        tmp_path,
        nsys_small_sqlite,
        f'UPDATE {KERNEL} SET start = {INT64_MIN}, "end" = {INT64_MAX} WHERE rowid = 1',
    )
    report = open_report(widest)
    assert 0.0 <= report.gpu_busy_pct() <= 100.0  # the window's width passes int64


def test_without_a_recorded_window_far_rows_are_judged_against_the_gpu_work(
    tmp_path: Path, nsys_small_sqlite: Path
) -> None:
    bad_api = f"UPDATE {RUNTIME} SET start = {INT64_MIN} WHERE rowid = 1"
    gone = _damaged(tmp_path, nsys_small_sqlite, "DROP TABLE ANALYSIS_DETAILS", bad_api)
    warnings = open_report(gone).warnings
    assert any("1 of 214 CUDA API rows start or end over a day away" in w for w in warnings)
    zero = _damaged(tmp_path, nsys_small_sqlite, "UPDATE ANALYSIS_DETAILS SET duration = 0")
    warnings = open_report(zero).warnings
    assert any(
        "ANALYSIS_DETAILS does not hold one positive capture duration" in w for w in warnings
    )


def test_a_kernel_table_stored_as_a_view_is_read_and_warned(
    tmp_path: Path, nsys_small_sqlite: Path
) -> None:
    path = _damaged(
        tmp_path,
        nsys_small_sqlite,
        f"ALTER TABLE {KERNEL} RENAME TO kernel_rows",
        f"CREATE VIEW {KERNEL} AS SELECT * FROM kernel_rows",
    )
    report = open_report(path)
    assert int(report.kernel_summary()["instances"].sum()) == 26  # not 0
    assert any(f"{KERNEL}: stored as a view" in w for w in report.warnings)


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        ("UPDATE StringIds SET value = 7", "texts stored under more than one id"),
        ("UPDATE StringIds SET value = 'x'", "texts stored under more than one id"),
        (f"UPDATE StringIds SET value = 'k' WHERE id IN (SELECT demangledName FROM {KERNEL})",
         "texts stored under more than one id"),
    ],
)  # fmt: skip
def test_string_tables_that_collapse_names_are_refused(
    tmp_path: Path, nsys_small_sqlite: Path, sql: str, match: str
) -> None:
    """Before, every kernel became one row of the summary under one name."""
    report = open_report(_damaged(tmp_path, nsys_small_sqlite, sql))
    with pytest.raises(CorruptReportError, match=match):
        report.kernel_summary()


def test_clean_fixtures_give_no_damage_warning(data_dir: Path) -> None:
    """None of the real captures, sqlite or parquet, trips a damage check (they stay for real
    damage only): every time of every table lies in the window nsys recorded, no activity row
    repeats, no size is absurd. (The one other warning: graphs traced as whole graphs.)"""
    paths = [*sorted(data_dir.glob("nsys_*.sqlite")), *sorted(data_dir.glob("nsys_*_pq"))]
    assert len(paths) >= 24
    for path in paths:
        report = open_report(path)
        damage = [w for w in report.warnings if "traced as whole graphs" not in w]
        assert damage == [], (path.name, damage)


def test_a_pipe_as_the_export_stamp_never_blocks(rep_pair: Path, data_dir: Path) -> None:
    """A named pipe where the stamp goes (``.x.sqlite.source.json``): read as "no stamp"."""
    import threading

    shutil.copy(data_dir / "nsys_small.sqlite", rep_pair.with_suffix(".sqlite"))
    os.mkfifo(stamp_path(rep_pair.with_suffix(".sqlite")))
    box: dict[str, object] = {}
    thread = threading.Thread(target=lambda: box.update(r=open_report(rep_pair)), daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "open_report blocked on the stamp"
    assert any("without proof" in w for w in box["r"].warnings)  # type: ignore[attr-defined]


def test_a_parquet_export_is_checked_against_its_window_too(tmp_path: Path, data_dir: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    export = tmp_path / "pq"
    shutil.copytree(data_dir / "nsys_small_pq", export)
    path = export / f"{KERNEL}.parquet"
    table = pq.read_table(path)
    start = table["start"].to_pylist()
    start[4] = -5  # before nsys started
    table = table.set_column(table.schema.get_field_index("start"), "start", pa.array(start))
    pq.write_table(table, path)
    warnings = open_report(export).warnings
    assert any(f"1 of 26 {KERNEL} {OUTSIDE}" in w and "(row 5: start -5" in w for w in warnings)
