"""Per-process GPU work on the real report of a cell that starts a child Python process."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from nsight_magic.analysis.processes import PROCESS_COLUMNS, process_count, process_summary
from nsight_magic.reports.nsys.report import NsysReport


def _processes(path: Path) -> pd.DataFrame:
    """pid, name from the export's PROCESSES table (what NsysReport.processes() will give)."""
    with sqlite3.connect(path) as db:
        return pd.read_sql_query("SELECT pid, name FROM PROCESSES", db)


def test_cell_and_child_process(data_dir: Path) -> None:
    path = data_dir / "nsys_procs.sqlite"
    report = NsysReport.open(path)
    out = process_summary(report.kernels(), report.memcpy(), _processes(path), report.memset())
    assert list(out.columns) == PROCESS_COLUMNS
    assert out["pid"].tolist() == [992, 1029] and (out["name"] == "python3").all()
    cell, child = out.iloc[0], out.iloc[1]
    # by hand from nsys_stats/nsys_procs_cuda_gpu_trace.csv:
    # the cell (pid 992): sgemm 10241 + split-k 3232 + clamp 1536 + sum 5313 = 20322 ns, one
    # 4-byte memset of 896 ns -> 21218 ns
    assert (cell["kernels"], cell["kernel_time_ns"]) == (4, 20322)
    assert (cell["memset_count"], cell["memset_time_ns"], cell["memcpy_count"]) == (1, 896, 0)
    assert cell["gpu_time_ns"] == 21218
    # the child (pid 1029): randn 5216 + cos 2944 + sum 5632 = 13792 ns, a 1088 ns memset and
    # the 4-byte device-to-host copy of the result (2080 ns) -> 16960 ns
    assert (child["kernels"], child["kernel_time_ns"]) == (3, 13792)
    assert (child["memcpy_count"], child["memcpy_bytes"], child["memcpy_time_ns"]) == (1, 4, 2080)
    assert child["gpu_time_ns"] == 16960
    # 21218 / (21218 + 16960) = 55.58 %
    assert cell["gpu_time_pct"] == 100 * 21218 / 38178
    # every kernel nsys stats lists is in one of the two rows
    ref = pd.read_csv(data_dir / "nsys_stats" / "nsys_procs_cuda_gpu_kern_sum.csv")
    assert out["kernels"].sum() == ref["Instances"].sum()
    assert out["kernel_time_ns"].sum() == ref["Total Time (ns)"].sum()
    assert (out["devices"] == "0").all()
    assert child["first_start_ns"] == 3664517775 and child["last_end_ns"] == 3712547487


def test_without_names_or_work(data_dir: Path) -> None:
    small = NsysReport.open(data_dir / "nsys_small.sqlite")
    out = process_summary(small.kernels())
    assert len(out) == 1 and out.at[0, "name"] == "" and out.at[0, "kernels"] == 26
    assert process_summary(small.kernels().iloc[:0]).empty


NSYS_SQLITE = sorted(p.name for p in Path(__file__).parent.joinpath("data").glob("nsys_*.sqlite"))


@pytest.mark.parametrize("name", NSYS_SQLITE)
def test_the_cheap_answers_agree_with_the_tables_they_stand_for(data_dir: Path, name: str) -> None:
    """The header and the view ask "more than one process?" and "any op ranges?" before
    building the per-process and op tables (the common answer, no, then costs neither); on
    every real report the cheap answer is the one the full table gives."""
    from nsight_magic.results import NsysRun

    frames = NsysRun(NsysReport.open(data_dir / name), meta={"name": name}).frames
    report = frames.report
    rows = len(frames.process_table())
    others = (report.memcpy(), report.memset(), report.graph_launches())
    assert process_count(report.kernels(), *others, stop_at=10**9) == rows
    assert frames.several_processes() == (rows > 1)
    assert frames.has_op_ranges() or frames.op_table().empty
    if name == "nsys_ops.sqlite":
        assert frames.has_op_ranges() and not frames.op_table().empty
    if name == "nsys_procs.sqlite":
        assert rows == 2 and frames.header()["processes"] == ["python3 (992)", "python3 (1029)"]
