"""nsys exporter tables: the .sqlite and parquet-dir exports of one report load identically,
names resolve, and schema checks refuse what we cannot read."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.errors import CorruptReportError, UnsupportedReportError
from nsight_magic.nsys import tables
from nsight_magic.nsys.report import NsysReport

FRAMES = ["kernels", "nvtx", "memcpy", "memset", "cuda_api"]


@pytest.fixture(scope="module")
def small(nsys_small_sqlite: Path) -> NsysReport:
    return NsysReport.open(nsys_small_sqlite)


@pytest.mark.parametrize("frame", FRAMES)
def test_sqlite_and_parquet_give_equal_frames(
    frame: str, nsys_small_sqlite: Path, nsys_small_parquet: Path
) -> None:
    a = getattr(NsysReport.open(nsys_small_sqlite), frame)()
    b = getattr(NsysReport.open(nsys_small_parquet), frame)()
    assert len(a) > 0
    pd.testing.assert_frame_equal(a, b)


def test_kernel_frame_contract(small: NsysReport) -> None:
    k = small.kernels()
    assert list(k.columns) == [
        "start_ns", "end_ns", "duration_ns", "name", "short_name", "mangled_name", "device_id",
        "context_id", "stream_id", "correlation_id", "pid", "tid", "grid_x", "grid_y", "grid_z",
        "block_x", "block_y", "block_z", "registers_per_thread", "static_smem_bytes",
        "dynamic_smem_bytes",
    ]  # fmt: skip
    assert len(k) == 26
    assert (k["duration_ns"] == k["end_ns"] - k["start_ns"]).all()
    assert k["start_ns"].is_monotonic_increasing
    assert set(k["stream_id"]) == {7, 14}  # default stream + the side stream
    first = k.iloc[0]
    assert first["start_ns"] == 55822673 and first["duration_ns"] == 3104
    assert first["short_name"] == "vectorized_elementwise_kernel"
    assert first["mangled_name"].startswith("_ZN2at6native29vectorized_elementwise_kernel")
    assert (first["grid_x"], first["block_x"], first["registers_per_thread"]) == (1024, 128, 28)
    # The launching thread comes from the runtime call with the same correlation id.
    assert set(k["tid"]) == {516} and set(k["pid"]) == {516}
    scan = k[k["short_name"] == "DeviceScanKernel"].iloc[0]
    assert scan["static_smem_bytes"] == 7696 and scan["stream_id"] == 14


def test_nvtx_domains_styles_and_levels(small: NsysReport) -> None:
    n = small.nvtx()
    assert len(n) == 17  # 19 events minus the two domain-create events
    by_range = n.drop_duplicates("range").set_index("range")
    assert by_range.loc["cell", "domain"] == "nsight_magic"
    assert by_range.loc["LLM@prefill", "domain"] == ""  # default domain
    assert by_range.loc["cub::DeviceScan::InclusiveScan", "domain"] == "CCCL"
    assert by_range.loc["side-work", "style"] == "StartEnd"
    assert (n.loc[n["range"] != "side-work", "style"] == "PushPop").all()
    levels = by_range["level"].to_dict()
    assert levels["cell"] == 0
    assert levels["L3: for step in range(3): ..."] == 1
    assert levels["LLM@prefill"] == 2 and levels["decode"] == 2 and levels["decode/step"] == 3
    assert levels["side-work"] == 2 and levels["cub::DeviceScan::InclusiveScan"] == 3
    # nvtx_sum reference: decode/step total range time and instance count.
    steps = n[n["range"] == "decode/step"]
    assert len(steps) == 3 and steps["duration_ns"].sum() == 59475308


def test_memcpy_kinds_from_enum_table(small: NsysReport) -> None:
    m = small.memcpy()
    assert m["kind"].tolist() == ["HtoD", "DtoH"]
    assert m["label"].tolist() == ["Host-to-Device", "Device-to-Host"]
    assert (m["bytes"] == 4 << 20).all()
    assert m["bandwidth_gbps"].iloc[0] == pytest.approx(4194304 / 104640)
    s = small.memset()
    assert len(s) == 3 and (s["bytes"] == 4).all()


def test_gpu_info(small: NsysReport) -> None:
    info = small.gpu_info()
    assert info["name"] == "NVIDIA H200"
    assert info["sm_count"] == 132
    assert info["sm_clock_max_hz"] == 1_980_000_000
    assert info["memory_bytes"] == 150109880320
    assert info["memory_bandwidth_bytes_per_s"] == 4814304000000
    assert info["compute_capability"] == "9.0"


def test_cuda_api_equals_nsys_stats(small: NsysReport, data_dir: Path) -> None:
    api = small.cuda_api()
    ours = api.groupby("name")["duration_ns"].agg(["size", "sum"])
    ref = pd.read_csv(data_dir / "nsys_stats" / "nsys_small_cuda_api_sum.csv").set_index("Name")
    # cuda_api_sum lists the CUDA API calls; names carry nsys's suffix rule ("_v10000" stays).
    assert set(ref.index) <= set(ours.index)
    sub = ours.loc[ref.index]
    np.testing.assert_array_equal(sub["size"].to_numpy(), ref["Num Calls"].to_numpy())
    np.testing.assert_array_equal(sub["sum"].to_numpy(), ref["Total Time (ns)"].to_numpy())


def test_missing_table_gives_empty_frame_with_columns(
    tmp_path: Path, nsys_small_sqlite: Path
) -> None:
    db = tmp_path / "no_memcpy.sqlite"
    shutil.copy(nsys_small_sqlite, db)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY")
    rep = NsysReport.open(db)
    full = NsysReport.open(nsys_small_sqlite)
    assert rep.memcpy().empty
    assert list(rep.memcpy().columns) == list(full.memcpy().columns)
    assert (rep.memcpy().dtypes == full.memcpy().dtypes).all()
    # Projection still works and loses exactly the two copies.
    assert rep.nvtx_gpu_projection()["gpu_ops"].iloc[0] == 31 - 2


def test_missing_parquet_table(tmp_path: Path, nsys_small_parquet: Path) -> None:
    pq_dir = tmp_path / "pq"
    shutil.copytree(nsys_small_parquet, pq_dir)
    (pq_dir / "CUPTI_ACTIVITY_KIND_MEMSET.parquet").unlink()
    rep = NsysReport.open(pq_dir)
    assert rep.memset().empty and len(rep.kernels()) == 26


def test_unknown_schema_major_is_refused(tmp_path: Path, nsys_small_sqlite: Path) -> None:
    db = tmp_path / "future.sqlite"
    shutil.copy(nsys_small_sqlite, db)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE META_DATA_EXPORT SET value = '4' WHERE name = 'EXPORT_SCHEMA_VERSION_MAJOR'"
        )
    with pytest.raises(UnsupportedReportError, match="schema"):
        tables.open_export(db)


def test_sqlite_without_nsys_tables_is_unsupported(tmp_path: Path) -> None:
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(UnsupportedReportError):
        tables.open_export(db)


def test_not_sqlite_is_corrupt(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database at all" * 10)
    with pytest.raises(CorruptReportError):
        tables.open_export(bad)


def test_frames_are_cached(small: NsysReport) -> None:
    assert small.kernels() is small.kernels()
    assert small.nvtx_gpu_projection() is small.nvtx_gpu_projection()
