"""Chart builders on the frames results hand them (real fixtures): marks, encodings, row counts,
log scales, roofline ceilings and verdicts, link params; checked on ``chart.to_dict()`` against
NVIDIA's own ``nsys stats`` / ``ncu --page raw`` output (one PNG is rendered)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from nsight_magic.reports import open_report
from nsight_magic.results import NcuRun, NsysRun
from nsight_magic.views import charts, static
from nsight_magic.views.live import FOCUS, PICK
from nsight_magic.views.roofline_chart import roofline_chart
from nsight_magic.views.timeline_chart import MAX_ROWS, timeline_chart, timeline_overview


@pytest.fixture(scope="module")
def small(nsys_small_sqlite):
    return NsysRun(open_report(nsys_small_sqlite), meta={"name": "small"}).frames


@pytest.fixture(scope="module")
def stats_kern(data_dir) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nsys_stats" / "nsys_small_cuda_gpu_kern_sum.csv")


def _rows(spec: dict, name: str | None = None) -> list[dict]:
    if name is not None:
        return spec["datasets"][name]
    (rows,) = spec["datasets"].values()
    return rows


def _param_names(spec: dict) -> set[str]:
    return {p["name"] for p in spec.get("params", [])}


def test_top_kernels_chart_matches_nsys_stats(small, stats_kern):
    spec = charts.top_kernels_chart(small.kernel_table(), n=5).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["x"]["field"] == "total_us"
    assert spec["encoding"]["y"]["sort"] == "-x"
    rows = _rows(spec)
    assert len(rows) == 5
    # Same top 5 and totals as NVIDIA's own cuda_gpu_kern_sum; full names kept for hover/pick.
    assert [r["name"] for r in rows] == stats_kern["Name"].head(5).tolist()
    assert rows[0]["total_us"] == pytest.approx(30528 / 1e3)
    assert rows[0]["instances"] == 3
    # Short labels on the axis, unique even where two kernels share a short name.
    labels = [r["label"] for r in rows]
    assert len(set(labels)) == 5 and all(len(x) <= charts.LABEL_WIDTH + 3 for x in labels)
    assert "softmax_warp_forward<9, 0, 0>" in labels  # analysis.names: numeric template args
    # Tooltips carry the full name and the launch config.
    tips = {t["field"] for t in spec["encoding"]["tooltip"]}
    assert {"name", "grid", "block", "registers"} <= tips
    softmax = next(r for r in rows if r["label"] == "softmax_warp_forward<9, 0, 0>")
    assert softmax["grid"].startswith("(") and softmax["registers"] > 0
    # Linked: click picks by name, "focus" dims the others.
    assert _param_names(spec) == {PICK, FOCUS}
    pick = next(p for p in spec["params"] if p["name"] == PICK)
    assert pick["select"]["fields"] == ["name"] and pick["select"]["on"] == "click"
    assert FOCUS in spec["encoding"]["opacity"]["condition"]["test"]


def test_nvtx_ranges_chart_projection(small):
    spec = charts.nvtx_ranges_chart(small.nvtx_table()).to_dict()
    rows = {r["name"]: r for r in _rows(spec)}
    assert len(rows) == len(small.nvtx_table())
    # From nsys_small_nvtx_gpu_proj_sum.csv: the cell range projects to 143.568856 ms.
    assert rows["nsight_magic:cell"]["proj_ms"] == pytest.approx(143.568856)
    assert rows[":LLM@prefill"]["instances"] == 3
    assert rows[":side-work"]["style"] == "StartEnd"
    assert spec["encoding"]["color"]["field"] == "style"
    assert _param_names(spec) == {PICK, FOCUS}


def test_timeline_chart_lanes_rows_and_names(small):
    frame = small.timeline()
    spec = timeline_chart(frame, small.origin_ns()).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["x2"]["field"] == "end_ms"
    (lookup,) = [t for t in spec["transform"] if "lookup" in t]
    bars = pd.DataFrame(_rows(spec, spec["data"]["name"]))
    names = pd.DataFrame(_rows(spec, lookup["from"]["data"]["name"]))
    assert len(bars) == len(frame) <= MAX_ROWS
    assert set(spec["encoding"]["y"]["sort"]) == set(frame["lane"].astype(str))
    # Each full name rides once in the lookup table; bars carry its key.
    assert names["name"].is_unique and set(names["name"]) == set(frame["name"])
    assert bars["key"].max() == len(names) - 1
    assert (bars["start_ms"] >= 0).all() and (bars["end_ms"] >= bars["start_ms"]).all()
    # The saved data stays small: no derived or repeated columns (duration is computed in Vega).
    assert set(bars.columns) == {"lane", "kind", "key", "count", "start_ms", "end_ms"}
    assert _param_names(spec) == {PICK, FOCUS}


def test_timeline_window_fixes_the_x_range(small):
    lo, hi = small.origin_ns() + 40_000_000, small.origin_ns() + 60_000_000
    frame = small.timeline((lo, hi))
    spec = timeline_chart(frame, small.origin_ns(), (lo, hi)).to_dict()
    assert spec["encoding"]["x"]["scale"]["domain"] == [40.0, 60.0]
    bars = pd.DataFrame(_rows(spec, spec["data"]["name"]))
    assert (bars["end_ms"] >= 40.0).all() and (bars["start_ms"] <= 60.0).all()
    overview = timeline_overview(small.timeline(rows=300), small.origin_ns()).to_dict()
    brush = overview["params"][0]
    assert brush["select"] == {"type": "interval", "encodings": ["x"]}
    assert set(_rows(overview)[0]) == {"lane", "kind", "start_ms", "end_ms"}


def test_timeline_chart_caps_rows(small):
    frame = small.timeline()
    big = pd.concat([frame] * (MAX_ROWS // len(frame) + 2), ignore_index=True)
    spec = timeline_chart(big).to_dict()
    assert len(_rows(spec, spec["data"]["name"])) == MAX_ROWS


def test_memcpy_chart_by_kind(small, data_dir):
    spec = charts.memcpy_chart(small.copies()).to_dict()
    rows = {r["kind"]: r for r in _rows(spec)}
    assert set(rows) == {"HtoD", "DtoH"}
    ref = pd.read_csv(data_dir / "nsys_stats" / "nsys_small_cuda_gpu_mem_time_sum.csv")
    d2h = ref.loc[ref["Operation"].str.contains("Device-to-Host"), "Total Time (ns)"].item()
    assert rows["DtoH"]["time_us"] == pytest.approx(d2h / 1e3)
    assert rows["HtoD"]["mb"] == pytest.approx(4194304 / 1e6)
    assert rows["HtoD"]["bandwidth_gb_per_s"] == pytest.approx(4194304 / 104640)


def test_delta_chart_signs():
    deltas = pd.DataFrame(
        {"name": ["a", "b", "c"], "delta_ns": [-5000, 20000, 0], "ratio": [0.5, 3.0, 1.0]}
    )
    rows = _rows(charts.delta_chart(deltas, n=2).to_dict())
    assert [r["full_name"] for r in rows] == ["b", "a"]
    assert rows[0]["direction"].startswith("slower")


def test_png_and_fail_soft(small):
    chart = charts.memcpy_chart(small.copies())
    png = static.chart_png(chart)
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"
    assert static.chart_img_html(chart).startswith('<img alt="chart" src="data:image/png;base64,')
    assert "chart omitted" in static.chart_img_html(None, "timeline")


# --- ncu charts ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gemm(ncu_reports, data_dir):
    parent = NsysRun(open_report(data_dir / "nsys_gemm.sqlite"), meta={"name": "gemm"})
    return NcuRun(open_report(ncu_reports["ncu_gemm_roofline"]), parent=parent).frames


def _raw(data_dir, name: str) -> pd.DataFrame:
    raw = pd.read_csv(data_dir / "ncu_raw" / f"{name}.raw.csv", low_memory=False).iloc[1:]
    return raw.reset_index(drop=True)


def _num(value: str) -> float:
    return float(str(value).replace(",", ""))


def test_roofline_chart_ceilings_labels_and_verdicts(gemm, data_dir):
    points, ceilings = gemm.roofline()
    spec = roofline_chart(points, ceilings).to_dict()
    roof_layer, dots, labels = spec["layer"]
    assert roof_layer["mark"]["type"] == "line" and dots["mark"]["type"] == "point"
    assert labels["mark"]["type"] == "text" and labels["encoding"]["text"]["field"] == "short_name"
    for layer in (roof_layer, dots):
        assert layer["encoding"]["x"]["scale"]["type"] == "log"
        assert layer["encoding"]["y"]["scale"]["type"] == "log"
    lines = pd.DataFrame(spec["datasets"][roof_layer["data"]["name"]])
    drawn = pd.DataFrame(spec["datasets"][dots["data"]["name"]])
    assert len(drawn) == len(points) == 2

    # Every ceiling is a line of its own in the legend ("<label> <peak>"), the DRAM slope too.
    assert {c.split(" ")[0] for c in lines["ceiling"]} == set(ceilings["label"])
    assert lines["ceiling"].nunique() == len(ceilings)
    assert any(c.startswith("DRAM") and c.endswith("TB/s") for c in lines["ceiling"])
    # Ceilings = the report's own peak_sustained x its own clock (ncu's raw CSV).
    raw = _raw(data_dir, "ncu_gemm_roofline")
    clock = raw["sm__cycles_elapsed.avg.per_second"].map(_num)
    tensor = raw[
        "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained"
    ].map(_num)
    expected_tensor = float(tensor[0] * clock[0])  # only the bf16 GEMM runs on tensor cores
    tensor_line = lines[lines["ceiling"].str.startswith("Tensor")]
    assert tensor_line["flops_per_s"].tolist() == pytest.approx([expected_tensor] * 2, rel=1e-3)
    dram = raw["dram__bytes.sum.peak_sustained"].map(_num) * raw[
        "dram__cycles_elapsed.avg.per_second"
    ].map(_num)
    ridge = tensor_line["ai"].min()  # the roof starts where the DRAM slope meets it
    assert ridge == pytest.approx(expected_tensor / float(dram.median()), rel=1e-3)
    dram_line = lines[lines["ceiling"].str.startswith("DRAM")].sort_values("order")
    slope = dram_line["flops_per_s"] / dram_line["ai"]
    assert slope.tolist() == pytest.approx([float(dram.median())] * 2, rel=1e-3)

    # Points: the verdict per kernel and the full name + launch config on hover.
    by_name = drawn.set_index("name")
    bf16 = raw["Kernel Name"][0]
    assert by_name.loc[bf16, "precision"] == "Tensor"
    assert by_name.loc[bf16, "verdict"].startswith("compute-bound")
    assert (drawn["ceiling_pct"] > 0).all() and (drawn["ceiling_pct"] <= 100).all()
    tips = {t["field"] for t in dots["encoding"]["tooltip"]}
    assert {"name", "short_name", "verdict", "grid", "block", "registers"} <= tips
    pick = next(p for p in spec["params"] if p["name"] == PICK)
    assert pick["select"]["fields"] == ["name", "launch"]


def test_sol_chart(gemm):
    sol = gemm.sol()
    spec = charts.sol_chart(sol).to_dict()
    rows = _rows(spec)
    assert len(rows) == 2 * len(sol)
    assert spec["encoding"]["x"]["scale"]["domain"] == [0, 100]
    assert {r["throughput"] for r in rows} == {"Compute (SM)", "Memory"}


def test_utilisation_chart_shows_hfu_mfu_and_peak_used(gemm, data_dir):
    nsys_kernels = open_report(data_dir / "nsys_gemm.sqlite").kernels()
    frame = gemm.mfu()["kernels"]
    spec = charts.utilisation_chart(frame).to_dict()
    assert spec["mark"]["type"] == "bar" and spec["encoding"]["yOffset"]["field"] == "measure"
    assert "(derived: H200 bf16 dense = 132 SMs x 1830 MHz" in spec["title"]["subtitle"]
    rows = _rows(spec)
    # No model FLOPs known here (no PyTorch op ranges around the launches): MFU bars are left
    # out, never drawn from the hardware count.
    assert frame["mfu_frac"].isna().all() and {r["measure"] for r in rows} == {"HFU"}
    hfu = {r["full_name"]: r for r in rows}
    points = gemm.run.report.roofline()
    bf16 = points.loc[points["tensor_op_path"].str.contains("bf16"), "name"].item()
    # HFU = ncu's FLOP count / the nsys (real clock) time of that kernel / the dense peak.
    nsys_ns = nsys_kernels.loc[nsys_kernels["short_name"] == bf16, "duration_ns"].iloc[0]
    flops = points.loc[points["name"] == bf16, "flop_count_total"].item()
    peak = hfu[bf16]["peak_tflops"] * 1e12
    assert hfu[bf16]["pct"] == pytest.approx(100 * flops / (nsys_ns * 1e-9) / peak)
    assert 0 < hfu[bf16]["pct"] < 100


def test_returned_chart_carries_png_and_leaves_the_renderer(small) -> None:
    """A chart we hand out (``with_png``) displays as Vega-Lite AND a real PNG, while the
    user's active altair renderer stays theirs (``%load_ext``: tests/test_coexistence.py)."""
    import base64

    import altair as alt
    from IPython.core.formatters import DisplayFormatter

    from nsight_magic.views.static import with_png

    before = alt.renderers.active
    chart = charts.top_kernels_chart(small.kernel_table())  # builders hand out with_png charts
    bundle, _ = DisplayFormatter().format(chart)
    assert alt.renderers.active == before
    assert any(k.startswith("application/vnd.vegalite") for k in bundle)
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "_repr_mimebundle_" not in json.dumps(chart.to_dict())  # not in the spec
    # the user's own chart (or one derived from ours) keeps the user's renderer: no PNG
    theirs, _ = DisplayFormatter().format(chart.properties(title="mine"))
    assert "image/png" not in theirs
    again, _ = DisplayFormatter().format(with_png(chart.properties(title="mine")))
    assert "image/png" in again
