"""nsys exporter tables: the .sqlite and parquet-dir exports of one report load identically,
names resolve, and schema checks refuse what we cannot read."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from nsight_magic.analysis.nvtx_projection import project_nvtx_to_gpu
from nsight_magic.errors import CorruptReportError, UnsupportedReportError
from nsight_magic.reports.nsys import cupti, source, strings
from nsight_magic.reports.nsys.report import NsysReport

DATA_SQLITE = Path(__file__).parent / "data" / "nsys_small.sqlite"

FRAMES = ["kernels", "nvtx", "memcpy", "memset", "cuda_api", "processes"]


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
        "dynamic_smem_bytes", "graph_node_id",
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
    assert m["bandwidth_gb_per_s"].iloc[0] == pytest.approx(4194304 / 104640)
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
        source.open_export(db)


def test_sqlite_without_nsys_tables_is_unsupported(tmp_path: Path) -> None:
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(UnsupportedReportError):
        source.open_export(db)


def test_not_sqlite_is_corrupt(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database at all" * 10)
    with pytest.raises(CorruptReportError):
        source.open_export(bad)


def test_frames_are_cached(small: NsysReport) -> None:
    assert small.kernels() is small.kernels()
    assert small.nvtx_gpu_projection() is small.nvtx_gpu_projection()


# --- the scale readers (Arrow columns, launching calls only, names by code) ---------------------
@pytest.fixture(params=["sqlite", "parquet"])
def export_path(request: pytest.FixtureRequest, nsys_small_sqlite: Path, nsys_small_parquet: Path):
    return nsys_small_sqlite if request.param == "sqlite" else nsys_small_parquet


@pytest.mark.parametrize(
    "frame", [*FRAMES, "kernel_summary", "nvtx_gpu_trace", "nvtx_gpu_projection"]
)
def test_adbc_and_sqlite3_readers_give_equal_frames(frame: str, nsys_small_sqlite: Path) -> None:
    fast = NsysReport.open(nsys_small_sqlite)
    plain = NsysReport.open(nsys_small_sqlite)
    plain.source.use_adbc = False  # the stdlib fallback, used when adbc is not installed
    assert fast.source.use_adbc
    pd.testing.assert_frame_equal(getattr(fast, frame)(), getattr(plain, frame)())


def test_launches_are_the_cuda_api_rows_that_launched_gpu_ops(export_path: Path) -> None:
    rep = NsysReport.open(export_path)
    corr = np.concatenate(
        [f()["correlation_id"].to_numpy() for f in (rep.kernels, rep.memcpy, rep.memset)]
    )
    launches = cupti.load_launches(rep.source, corr)
    api = rep.cuda_api()
    want = api[api["correlation_id"].isin(corr)][list(launches.columns)].reset_index(drop=True)
    assert len(launches) >= 26 + 2 + 3
    pd.testing.assert_frame_equal(launches, want)


def test_kernel_summary_and_projection_need_no_full_frames(export_path: Path) -> None:
    rep = NsysReport.open(export_path)
    summary, trace = rep.kernel_summary(), rep.nvtx_gpu_trace()
    assert "kernels" not in rep._cache and "cuda_api" not in rep._cache
    full = NsysReport.open(export_path)
    from nsight_magic.analysis.kernels import kernel_summary

    pd.testing.assert_frame_equal(summary, kernel_summary(full.kernels()))
    pd.testing.assert_frame_equal(
        trace,
        project_nvtx_to_gpu(
            full.nvtx(), full.cuda_api(), full.kernels(), full.memcpy(), full.memset()
        ),
    )
    # The narrow kernel frame is the full one's columns, same rows and order.
    core = rep._kernel_core()
    k = full.kernels()
    for col in core.columns:
        np.testing.assert_array_equal(core[col].astype(k[col].dtype).to_numpy(), k[col].to_numpy())


def test_string_table_lookups() -> None:
    values = pa.array(["cudaMalloc_v3020", "b", "b", "cudaStreamIsCapturing_v10000"])
    for ids in (np.array([3, 7, 8, 9]), np.array([3, 7, 8, 10**12])):  # dense / sparse ids
        table = strings.StringTable.from_columns(ids, values)
        look = np.array([ids[0], -1, ids[3], 12345, ids[1], ids[0]])
        assert table.take(look).to_pylist() == [
            "cudaMalloc_v3020", "", "cudaStreamIsCapturing_v10000", "", "b", "cudaMalloc_v3020",
        ]  # fmt: skip
        calls: list[str] = []

        def clean(name: str, calls: list[str] = calls) -> str:
            calls.append(name)
            return cupti.api_name(name)

        cleaned = table.take(look, clean).to_pylist()
        assert cleaned == ["cudaMalloc", "", "cudaStreamIsCapturing_v10000", "", "b", "cudaMalloc"]
        assert sorted(calls) == sorted(set(calls))  # once per distinct text
        cat = table.categorical(np.array([ids[1], ids[2], ids[0], -1]))
        assert list(cat.astype(str)) == ["b", "b", "cudaMalloc_v3020", ""]
        assert cat.codes[0] == cat.codes[1]  # equal texts, different ids: one group
    src = source.open_export(DATA_SQLITE)
    series = strings.load_string_ids(src)
    assert len(series) == 298 and series.index.is_monotonic_increasing
    pd.testing.assert_series_equal(strings.load_string_table(src).series(), series)
    with pytest.raises(ValueError, match="duplicate"):
        strings.StringTable.from_columns(np.array([1, 1]), pa.array(["a", "b"]))


def test_isin_ids_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        values = rng.integers(-5, 80, 500)
        wanted = rng.integers(-1, 60, rng.integers(0, 30))
        np.testing.assert_array_equal(cupti.id_set(wanted)(values), np.isin(values, wanted))
    big = np.array([-1, 1 << 40, 5, -(1 << 40)])
    np.testing.assert_array_equal(
        cupti.id_set(np.array([5, 1 << 40]))(big), [False, True, True, False]
    )


@pytest.mark.parametrize("row", [1, 20])  # the reader's type comes from the first rows
def test_text_in_an_integer_column_is_corrupt(tmp_path: Path, row: int) -> None:
    db = tmp_path / "bad_int.sqlite"
    shutil.copy(DATA_SQLITE, db)
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = {row}")
    for use_adbc in (True, False):
        rep = NsysReport.open(db)
        rep.source.use_adbc = use_adbc
        with pytest.raises(CorruptReportError):
            rep.kernel_summary()


def test_tiled_report_sqlite_and_parquet_agree(tmp_path: Path) -> None:
    """1,000+ kernels tiled by benchmarks/scale.py: both exports give the same frames."""
    from benchmarks.scale import copies_for_kernels, scale_parquet, scale_sqlite

    copies = copies_for_kernels(DATA_SQLITE, 1000)
    scale_sqlite(DATA_SQLITE, tmp_path / "k.sqlite", copies)
    scale_parquet(DATA_SQLITE.parent / "nsys_small_pq", tmp_path / "k_pq", copies)
    a, b = NsysReport.open(tmp_path / "k.sqlite"), NsysReport.open(tmp_path / "k_pq")
    for frame in ("kernel_summary", "nvtx_gpu_projection", "kernels", "nvtx", "cuda_api"):
        pd.testing.assert_frame_equal(getattr(a, frame)(), getattr(b, frame)())
    assert a.kernel_summary()["instances"].sum() == len(a.kernels()) >= 1000
    assert a.capture_window() == b.capture_window()


def test_parquet_row_groups_are_filtered_one_by_one(tmp_path: Path, nsys_small_parquet: Path):
    """Big parquet tables come in row groups; the launch filter runs per group."""
    import pyarrow.parquet as pq

    pq_dir = tmp_path / "pq"
    shutil.copytree(nsys_small_parquet, pq_dir)
    path = pq_dir / "CUPTI_ACTIVITY_KIND_RUNTIME.parquet"
    pq.write_table(pq.read_table(path), path, row_group_size=50)
    assert pq.ParquetFile(path).num_row_groups > 3
    split, whole = NsysReport.open(pq_dir), NsysReport.open(nsys_small_parquet)
    for frame in ("_launches", "kernels", "nvtx_gpu_trace", "nvtx_gpu_projection", "cuda_api"):
        pd.testing.assert_frame_equal(getattr(split, frame)(), getattr(whole, frame)())


def test_paths_with_uri_characters(tmp_path: Path) -> None:
    odd = tmp_path / "a dir#1?x" / "re port%20.sqlite"
    odd.parent.mkdir()
    shutil.copy(DATA_SQLITE, odd)
    for use_adbc in (True, False):
        rep = NsysReport.open(odd)
        rep.source.use_adbc = use_adbc
        assert len(rep.kernels()) == 26 and len(rep.kernel_summary()) > 0
    assert sorted(p.name for p in odd.parent.iterdir()) == ["re port%20.sqlite"]  # read-only
