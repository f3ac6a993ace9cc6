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
from nsight_magic.results.loading import nsys_run
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
FIRST_PUSH = "(SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 59)"


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        (f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = {INT64_MIN} WHERE rowid = 1",
         "1 of 214 CUDA API rows start or end over a day away from the GPU work"),
        (f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET \"end\" = {INT64_MAX} WHERE rowid = 1",
         "1 of 214 CUDA API rows start or end over a day away"),
        (f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = {INT64_MAX - 9}, \"end\" = "
         f"{INT64_MAX - 8} WHERE rowid = 1", "CUDA API rows start or end over a day away"),
        ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET \"end\" = start - 10 WHERE rowid <= 2",
         "2 of 214 CUDA API rows end before they start"),
        (f"UPDATE NVTX_EVENTS SET \"end\" = {INT64_MAX} WHERE rowid = {FIRST_PUSH}",
         "1 of 17 NVTX rows start or end over a day away"),
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
    """None of the real captures trips a damage check (they stay for real damage only)."""
    for path in sorted(data_dir.glob("nsys_*.sqlite")):
        report = open_report(path)
        damage = [w for w in report.warnings if "damaged" in w or "view" in w]
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
