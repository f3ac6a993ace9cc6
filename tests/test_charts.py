"""Chart builders on frames from the real fixtures: marks, encodings, row counts, log scales
and roofline ceilings checked on ``chart.to_dict()`` (nothing is rendered here except one PNG)."""

from __future__ import annotations

import pandas as pd
import pytest

from nsight_magic.analysis.kernels import kernel_summary
from nsight_magic.analysis.nvtx_projection import nvtx_gpu_projection, project_nvtx_to_gpu
from nsight_magic.reports.nsys import cupti, nvtx_events, source, strings
from nsight_magic.views import charts, static


@pytest.fixture(scope="module")
def small(nsys_small_sqlite):
    src = source.open_export(nsys_small_sqlite)
    names = strings.load_string_table(src)
    api = cupti.load_cuda_api(src, names)
    frames = {
        "kernels": cupti.load_kernels(src, names, api),
        "nvtx": nvtx_events.load_nvtx(src, names),
        "memcpy": cupti.load_memcpy(src),
        "memset": cupti.load_memset(src),
        "cuda_api": api,
    }
    frames["summary"] = kernel_summary(frames["kernels"])
    trace = project_nvtx_to_gpu(
        frames["nvtx"], api, frames["kernels"], frames["memcpy"], frames["memset"]
    )
    frames["projection"] = nvtx_gpu_projection(trace)
    return frames


@pytest.fixture(scope="module")
def stats_kern(data_dir) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nsys_stats" / "nsys_small_cuda_gpu_kern_sum.csv")


def _rows(spec: dict) -> list[dict]:
    (rows,) = spec["datasets"].values()
    return rows


def test_top_kernels_chart_matches_nsys_stats(small, stats_kern):
    spec = charts.top_kernels_chart(small["summary"], n=5).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["x"]["field"] == "total_us"
    assert spec["encoding"]["y"]["sort"] == "-x"
    rows = _rows(spec)
    assert len(rows) == 5
    # Same top 5 and totals as NVIDIA's own cuda_gpu_kern_sum.
    assert [r["name"] for r in rows] == stats_kern["Name"].head(5).tolist()
    assert rows[0]["total_us"] == pytest.approx(30528 / 1e3)
    assert rows[0]["instances"] == 3


def test_nvtx_ranges_chart_projection(small):
    spec = charts.nvtx_ranges_chart(small["projection"]).to_dict()
    rows = {r["range_label"]: r for r in _rows(spec)}
    assert len(rows) == len(small["projection"])
    # From nsys_small_nvtx_gpu_proj_sum.csv: the cell range projects to 143.568856 ms.
    assert rows["nsight_magic:cell"]["proj_ms"] == pytest.approx(143.568856)
    assert rows[":LLM@prefill"]["instances"] == 3
    assert rows[":side-work"]["style"] == "StartEnd"
    assert spec["encoding"]["color"]["field"] == "style"


def test_timeline_chart_lanes_and_rows(small):
    # timeline_frame is another engineer's module; the builder only needs its columns.
    timeline = pytest.importorskip("nsight_magic.analysis.timeline")
    frame = timeline.timeline_frame(small["kernels"], small["memcpy"], small["nvtx"])
    spec = charts.timeline_chart(frame).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["x2"]["field"] == "end_ms"
    assert len(_rows(spec)) == len(frame) <= charts.MAX_ROWS
    assert set(spec["encoding"]["y"]["sort"]) == set(frame["lane"].astype(str))


def test_timeline_chart_caps_rows(small):
    k = small["kernels"]
    frame = pd.DataFrame(
        {
            "lane": "stream " + k["stream_id"].astype(str),
            "start_ns": k["start_ns"],
            "end_ns": k["end_ns"],
            "name": k["name"],
            "count": 1,
        }
    )
    big = pd.concat([frame] * 200, ignore_index=True)  # 31 kernels x 200 > 5000 rows
    rows = _rows(charts.timeline_chart(big).to_dict())
    assert len(rows) == charts.MAX_ROWS
    assert min(r["start_ms"] for r in rows) == 0.0


def test_memcpy_chart_by_kind(small, data_dir):
    spec = charts.memcpy_chart(small["memcpy"]).to_dict()
    rows = {r["kind"]: r for r in _rows(spec)}
    assert set(rows) == {"HtoD", "DtoH"}
    ref = pd.read_csv(data_dir / "nsys_stats" / "nsys_small_cuda_gpu_mem_time_sum.csv")
    d2h = ref.loc[ref["Operation"].str.contains("Device-to-Host"), "Total Time (ns)"].item()
    assert rows["DtoH"]["total_ns"] == d2h
    assert rows["HtoD"]["bytes"] == 4194304
    assert rows["HtoD"]["bandwidth_gbps"] == pytest.approx(4194304 / 104640)


def test_delta_chart_signs():
    deltas = pd.DataFrame(
        {"name": ["a", "b", "c"], "delta_ns": [-5000, 20000, 0], "ratio": [0.5, 3.0, 1.0]}
    )
    rows = _rows(charts.delta_chart(deltas, n=2).to_dict())
    assert [r["full_name"] for r in rows] == ["b", "a"]
    assert rows[0]["direction"].startswith("slower")


def test_png_and_fail_soft(small):
    chart = charts.memcpy_chart(small["memcpy"])
    png = static.chart_png(chart)
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"
    assert static.chart_img_html(chart).startswith('<img alt="chart" src="data:image/png;base64,')
    assert "chart omitted" in static.chart_img_html(None, "timeline")


# --- ncu charts: need the NcuReport of ncu/report.py --------------------------------------
@pytest.fixture(scope="module")
def gemm_roofline(ncu_reports):
    report_mod = pytest.importorskip("nsight_magic.reports.ncu.report")
    return report_mod.NcuReport.open(ncu_reports["ncu_gemm_roofline"])


def _raw(data_dir, name: str) -> pd.DataFrame:
    raw = pd.read_csv(data_dir / "ncu_raw" / f"{name}.raw.csv", low_memory=False).iloc[1:]
    return raw.reset_index(drop=True)


def _num(value: str) -> float:
    return float(str(value).replace(",", ""))


def test_roofline_chart_ceilings_from_report(gemm_roofline, data_dir):
    roof = gemm_roofline.roofline()
    chart = charts.roofline_chart(roof)
    spec = chart.to_dict()
    roof_layer, dots = spec["layer"]
    assert roof_layer["mark"]["type"] == "line" and dots["mark"]["type"] == "point"
    for layer in (roof_layer, dots):
        assert layer["encoding"]["x"]["scale"]["type"] == "log"
        assert layer["encoding"]["y"]["scale"]["type"] == "log"
    datasets = spec["datasets"]
    lines = pd.DataFrame(datasets[roof_layer["data"]["name"]])
    points = pd.DataFrame(datasets[dots["data"]["name"]])
    assert len(points) == len(roof) == 2

    # Ceilings = the report's own peak_sustained x its own SM clock (ncu's raw CSV).
    raw = _raw(data_dir, "ncu_gemm_roofline")
    clock = raw["sm__cycles_elapsed.avg.per_second"].map(_num)
    tensor = raw[
        "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained"
    ].map(_num)
    # Only the bf16 GEMM (row 0) runs on the tensor path, so its clock sets that ceiling.
    expected_tensor = float(tensor[0] * clock[0])
    flat = lines[lines["order"] == 2].set_index("ceiling")["flops_per_s"]
    assert flat["Tensor"] == pytest.approx(expected_tensor, rel=1e-3)
    dram = raw["dram__bytes.sum.peak_sustained"].map(_num) * raw[
        "dram__cycles_elapsed.avg.per_second"
    ].map(_num)
    ridge = lines[(lines["ceiling"] == "Tensor") & (lines["order"] == 1)].iloc[0]
    assert ridge["ai"] == pytest.approx(expected_tensor / float(dram.median()), rel=1e-3)
    # The bf16 GEMM is a tensor-core kernel; the fp32 sgemm is not.
    by_name = points.set_index("name")
    assert by_name.loc[raw["Kernel Name"][0], "precision"] == "Tensor"
    assert (points["pct_of_ceiling"] > 0).all() and (points["pct_of_ceiling"] <= 100).all()


def test_sol_chart(gemm_roofline):
    sol = gemm_roofline.sol()
    spec = charts.sol_chart(sol).to_dict()
    rows = _rows(spec)
    assert len(rows) == 2 * len(sol)
    assert spec["encoding"]["x"]["scale"]["domain"] == [0, 100]
    assert {r["throughput"] for r in rows} == {"Compute (SM)", "Memory"}


def test_mfu_chart_shows_peak_used(gemm_roofline, data_dir):
    from nsight_magic.analysis.mfu import kernel_mfu
    from nsight_magic.reports import open_report

    nsys_kernels = open_report(data_dir / "nsys_gemm.sqlite").kernels()
    points = gemm_roofline.roofline()
    mfu = kernel_mfu(
        points,
        kernels=gemm_roofline.kernels(),
        nsys_kernels=nsys_kernels,
        gpu_name=gemm_roofline.device()["name"],
    )
    spec = charts.mfu_chart(mfu).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert "(datasheet H200 bf16 dense)" in spec["title"]["subtitle"]
    rows = {r["full_name"]: r for r in _rows(spec)}
    bf16 = points.loc[points["tensor_op_path"].str.contains("bf16"), "name"].item()
    # MFU = ncu's FLOP count / the nsys (real clock) time of that kernel / the dense peak.
    nsys_ns = nsys_kernels.loc[nsys_kernels["short_name"] == bf16, "duration_ns"].iloc[0]
    flops = points.loc[points["name"] == bf16, "flops_total"].item()
    peak = rows[bf16]["peak_tflops"] * 1e12
    assert rows[bf16]["mfu_pct"] == pytest.approx(100 * flops / (nsys_ns * 1e-9) / peak)
    assert 0 < rows[bf16]["mfu_pct"] < 100


def test_static_chart_renderer_adds_png(data_dir) -> None:
    """With the extension's renderer, a displayed chart carries Vega-Lite AND a real PNG."""
    import base64

    import altair as alt

    from nsight_magic.reports import open_report
    from nsight_magic.views.static import RENDERER, enable_static_charts

    before = alt.renderers.active
    try:
        enable_static_charts()
        assert alt.renderers.active == RENDERER
        chart = charts.top_kernels_chart(
            open_report(data_dir / "nsys_small.sqlite").kernel_summary()
        )
        bundle = chart._repr_mimebundle_()
        bundle = bundle[0] if isinstance(bundle, tuple) else bundle
        assert any(k.startswith("application/vnd.vegalite") for k in bundle)
        assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        alt.renderers.enable(before)
