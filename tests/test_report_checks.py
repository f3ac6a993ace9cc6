"""Loaders check what they load: a report that lost launches, names or its string table is refused
with a typed error that names what is missing, or loads what is whole and says what was lost;
a named pipe is refused without being opened. Damaged inputs are cut or edited real fixtures."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nsight_magic.errors import CorruptReportError, ReportError, UnsupportedReportError
from nsight_magic.reports import open_report
from nsight_magic.reports.ncu.container import scan
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.reports.nsys.report import NsysReport
from nsight_magic.reports.nsys.source import open_export

NCU_NAMES = ["ncu_small_roofline", "ncu_small_full", "ncu_gemm_metrics", "ncu_gemm_roofline"]
NCU_LAUNCHES = {"ncu_small_roofline": 3, "ncu_small_full": 3, "ncu_gemm_metrics": 2}
NSYS_FRAMES = ["kernels", "cuda_api", "nvtx", "kernel_summary", "nvtx_gpu_projection"]


def cut(src: Path, dst: Path, fraction: float) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * fraction)])
    return dst


# --- .ncu-rep: the block layout -----------------------------------------------------------------
@pytest.mark.parametrize("name", NCU_NAMES)
def test_layout_of_whole_reports(ncu_reports, name):
    layout = scan(ncu_reports[name])
    assert layout.whole and layout.end == layout.size
    assert layout.results == NCU_LAUNCHES.get(name, 2) == len(NcuReport.open(ncu_reports[name]))


@pytest.mark.parametrize(
    ("fraction", "complete"),
    [(0.5, 1), (0.9, 1), (0.99, 2), (0.999, 2)],
)
def test_layout_says_where_a_cut_file_ends(ncu_reports, tmp_path, fraction, complete):
    path = cut(ncu_reports["ncu_small_full"], tmp_path / "cut.ncu-rep", fraction)
    layout = scan(path)
    assert not layout.whole and layout.results == complete
    assert "truncated" in layout.problem and f"{layout.size:,}" in layout.problem


@pytest.mark.parametrize(("fraction", "kept"), [(0.9, 1), (0.99, 2)])
def test_cut_ncu_report_keeps_its_whole_launches_and_says_so(ncu_reports, tmp_path, fraction, kept):
    """ncu_report returns the cut launch with no name, no duration and no metrics (3 launches
    at 99%): it is left out, and the warnings say the file is truncated and which launch."""
    full = NcuReport.open(ncu_reports["ncu_small_full"])
    report = NcuReport.open(cut(ncu_reports["ncu_small_full"], tmp_path / "c.ncu-rep", fraction))
    assert len(report) == kept
    truncated, left_out = report.warnings
    assert "truncated" in truncated and "left out: launch " in left_out
    kernels = report.kernels()
    assert (kernels["name"] != "").all() and kernels["duration_ns"].notna().all()
    assert kernels["name"].tolist() == full.kernels()["name"].tolist()[:kept]
    assert len(report.sol()) == len(report.roofline()) == kept
    assert set(report.advice()["launch"]) == set(range(kept))
    assert report.metrics()["launch"].nunique() == kept


def test_half_an_ncu_report_is_refused_with_where_it_ends(ncu_reports, tmp_path):
    """At 50% ncu_report reads no launch at all (it needs blocks after the first result)."""
    path = cut(ncu_reports["ncu_small_full"], tmp_path / "half.ncu-rep", 0.5)
    with pytest.raises(CorruptReportError, match="holds no complete profiled kernel") as info:
        NcuReport.open(path)
    assert "ends at byte 11,618,666" in str(info.value) and "truncated" in str(info.value)


def test_damaged_block_is_named(ncu_reports, tmp_path):
    """The first source entry of block 2 claims 100 bytes where its block holds 24,424: the
    entries no longer add up to the block's payload, and the error says which block."""
    data = bytearray(ncu_reports["ncu_gemm_metrics"].read_bytes())
    entry = 8 + 2 + 4 + 131 + 4 + 47  # magic+size, FileHeader, block 1, block 2's header
    assert int.from_bytes(data[entry : entry + 4], "little") == 24424
    data[entry : entry + 4] = (100).to_bytes(4, "little")
    path = tmp_path / "bad.ncu-rep"
    path.write_bytes(bytes(data))
    layout = scan(path)
    assert layout.problem.startswith("block 2 (at byte 145) is damaged: its entries take 104")
    with pytest.raises(CorruptReportError, match=r"block 2 \(at byte 145\) is damaged"):
        NcuReport.open(path)


def test_whole_ncu_report_has_no_warnings(ncu_reports):
    assert NcuReport.open(ncu_reports["ncu_gemm_roofline"]).warnings == []


# --- nsys: the string table --------------------------------------------------------------------
def edited(src: Path, dst: Path, *sql: str) -> Path:
    shutil.copy(src, dst)
    with sqlite3.connect(dst) as conn:
        for statement in sql:
            conn.execute(statement)
    return dst


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ("DELETE FROM StringIds", "is empty"),
        ("DROP TABLE StringIds", "is missing"),
    ],
)
def test_lost_string_table_is_refused(nsys_small_sqlite, tmp_path, sql, says):
    """Without StringIds every kernel used to collapse into one row named ""."""
    rep = NsysReport.open(edited(nsys_small_sqlite, tmp_path / "s.sqlite", sql))
    for frame in NSYS_FRAMES:
        with pytest.raises(CorruptReportError, match=f"StringIds\\) {says}") as info:
            getattr(rep, frame)()
        assert "names cannot be read" in str(info.value)
    assert rep.gpu_work().kernels == 26  # what needs no names still reads


def test_one_lost_kernel_name_is_refused(nsys_small_sqlite, tmp_path):
    sql = (
        "DELETE FROM StringIds WHERE id = "
        "(SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)"
    )
    rep = NsysReport.open(edited(nsys_small_sqlite, tmp_path / "one.sqlite", sql))
    with pytest.raises(CorruptReportError, match="lacks 1 of the ids") as info:
        rep.kernel_summary()
    assert "CUPTI_ACTIVITY_KIND_KERNEL.demangledName" in str(info.value)


def test_blank_kernel_name_is_refused(nsys_small_sqlite, tmp_path):
    sql = (
        "UPDATE StringIds SET value = '' WHERE id = "
        "(SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)"
    )
    rep = NsysReport.open(edited(nsys_small_sqlite, tmp_path / "blank.sqlite", sql))
    with pytest.raises(CorruptReportError, match="has an empty text for 1 of the ids"):
        rep.kernels()


def test_parquet_export_without_string_table(nsys_small_parquet, tmp_path):
    pq_dir = tmp_path / "pq"
    shutil.copytree(nsys_small_parquet, pq_dir)
    (pq_dir / "StringIds.parquet").unlink()
    with pytest.raises(CorruptReportError, match="is missing"):
        NsysReport.open(pq_dir).kernels()


# --- paths that are no report files ------------------------------------------------------------
@contextmanager
def no_hang(seconds: int = 10) -> Iterator[None]:
    """Fail instead of blocking forever (opening a FIFO for reading waits for a writer)."""

    def fail(*_: object) -> None:
        raise AssertionError("opening the path blocked")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


OPENERS: dict[str, Callable[[Path], object]] = {
    "open_report": open_report,
    "NcuReport.open": NcuReport.open,
    "NsysReport.open": NsysReport.open,
    "open_export": open_export,
}


@pytest.mark.parametrize("opener", sorted(OPENERS))
@pytest.mark.parametrize("suffix", [".ncu-rep", ".sqlite", ".nsys-rep"])
def test_named_pipe_is_refused_without_opening_it(tmp_path, opener, suffix):
    fifo = tmp_path / f"pipe{suffix}"
    os.mkfifo(fifo)
    with no_hang(), pytest.raises(UnsupportedReportError, match="is a named pipe"):
        OPENERS[opener](fifo)


def test_named_pipe_inside_a_parquet_export(nsys_small_parquet, tmp_path):
    pq_dir = tmp_path / "pq"
    shutil.copytree(nsys_small_parquet, pq_dir)
    table = pq_dir / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    table.unlink()
    os.mkfifo(table)
    rep = NsysReport.open(pq_dir)
    with no_hang(), pytest.raises(UnsupportedReportError, match="is a named pipe"):
        rep.kernels()


def test_folder_that_is_no_export(tmp_path):
    (tmp_path / "notes.parquet").write_bytes(b"PAR1")
    with pytest.raises(ReportError):
        open_report(tmp_path)
    with pytest.raises(UnsupportedReportError, match="is a folder"):
        NcuReport.open(tmp_path)
