"""open_report dispatches on what the path is and turns bad input into typed errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nsight_magic.errors import (
    CorruptReportError,
    EmptyReportError,
    ReportError,
    ReportNotFoundError,
    ToolNotFoundError,
    UnsupportedReportError,
)
from nsight_magic.reports import open_report, report_kind
from nsight_magic.reports.nsys.export import export_argv, sibling_export
from nsight_magic.reports.nsys.report import NsysReport


def test_opens_sqlite_parquet_and_rep(data_dir: Path) -> None:
    assert report_kind(data_dir / "nsys_small.sqlite") == "nsys-sqlite"
    assert report_kind(data_dir / "nsys_small_pq") == "nsys-parquet"
    assert report_kind(data_dir / "nsys_small.nsys-rep") == "nsys-rep"
    for path in ("nsys_small.sqlite", "nsys_small_pq", "nsys_small.nsys-rep"):
        rep = open_report(data_dir / path)
        assert isinstance(rep, NsysReport)
        assert len(rep.kernels()) == 26


def test_nsys_rep_uses_the_sibling_export(data_dir: Path) -> None:
    rep = open_report(data_dir / "nsys_gemm.nsys-rep")
    assert rep.path == data_dir / "nsys_gemm.sqlite"
    assert rep.rep_path == data_dir / "nsys_gemm.nsys-rep"


def test_kind_comes_from_content_not_suffix(tmp_path: Path, data_dir: Path) -> None:
    renamed = tmp_path / "report.bin"
    shutil.copy(data_dir / "nsys_small.sqlite", renamed)
    assert isinstance(open_report(renamed), NsysReport)


def test_ncu_rep_is_recognised(tmp_path: Path, data_dir: Path) -> None:
    import lzma

    with lzma.open(data_dir / "ncu_gemm_metrics.ncu-rep.xz") as fh:
        head = fh.read(64)
    path = tmp_path / "x.ncu-rep"
    path.write_bytes(head)
    assert report_kind(path) == "ncu-rep"


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ReportNotFoundError):
        open_report(tmp_path / "nope.sqlite")


@pytest.mark.parametrize("name", ["empty.sqlite", "empty.nsys-rep", "empty.ncu-rep"])
def test_zero_bytes(tmp_path: Path, name: str) -> None:
    (tmp_path / name).touch()
    with pytest.raises(EmptyReportError):
        open_report(tmp_path / name)


def test_empty_dir(tmp_path: Path) -> None:
    with pytest.raises(EmptyReportError):
        open_report(tmp_path)


def test_dir_without_parquet(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UnsupportedReportError):
        open_report(tmp_path)


@pytest.mark.parametrize("name", ["garbage.sqlite", "garbage.nsys-rep", "garbage.ncu-rep"])
def test_garbage_with_report_suffix_is_corrupt(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"\x00\x01garbage" * 100)
    with pytest.raises(CorruptReportError):
        open_report(tmp_path / name)


def test_unknown_file_is_unsupported(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a report")
    with pytest.raises(UnsupportedReportError):
        open_report(tmp_path / "notes.txt")


@pytest.mark.parametrize("keep", [100, 4096, 50_000, 200_000])
def test_truncated_sqlite_is_a_report_error(tmp_path: Path, data_dir: Path, keep: int) -> None:
    data = (data_dir / "nsys_small.sqlite").read_bytes()
    path = tmp_path / "cut.sqlite"
    path.write_bytes(data[:keep])
    with pytest.raises(ReportError):
        rep = open_report(path)
        rep.kernels(), rep.nvtx(), rep.memcpy(), rep.nvtx_gpu_projection()


def test_damaged_parquet_table_is_corrupt(tmp_path: Path, data_dir: Path) -> None:
    pq_dir = tmp_path / "pq"
    shutil.copytree(data_dir / "nsys_small_pq", pq_dir)
    table = pq_dir / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    table.write_bytes(table.read_bytes()[:200])
    rep = open_report(pq_dir)  # opening reads only the metadata table
    with pytest.raises(CorruptReportError):
        rep.kernels()


def test_rep_without_export_needs_nsys(tmp_path: Path, data_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys on PATH
    monkeypatch.delenv("NSIGHT_MAGIC_NSYS", raising=False)
    rep = tmp_path / "alone.nsys-rep"
    shutil.copy(data_dir / "nsys_small.nsys-rep", rep)
    with pytest.raises(ToolNotFoundError, match="Nsight Systems"):
        open_report(rep)


def test_export_argv_and_sibling(data_dir: Path) -> None:
    argv = export_argv("/opt/nsys", "a b.nsys-rep", "a b.sqlite", "sqlite")
    assert argv == [
        "/opt/nsys", "export", "--type", "sqlite", "--force-overwrite=true", "--include-json=true",
        "-o", "a b.sqlite", "a b.nsys-rep",
    ]  # fmt: skip
    # a parquet dir has no JSON to include: the flag is the SQLite export's only
    assert "--include-json=true" not in export_argv("/opt/nsys", "r.nsys-rep", "r_pq", "parquetdir")
    assert sibling_export(data_dir / "nsys_small.nsys-rep") == (data_dir / "nsys_small.sqlite")
