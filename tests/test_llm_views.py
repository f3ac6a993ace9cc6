"""The views of real LLM-shaped and multi-rank reports: report warnings in the header, CUDA
graph launches, GPU work per process, PyTorch ops and ranks (widget trees built without a
kernel, and the static HTML), each checked against the analysis frames of the same report."""

from __future__ import annotations

import html
import re
from pathlib import Path

import ipywidgets as w
import pytest

import nsight_magic
from nsight_magic.analysis.mfu import NO_OP_RANGE
from nsight_magic.analysis.model_flops import GEMM_OPS
from nsight_magic.analysis.ncu_metrics import OCCUPANCY_THEORETICAL
from nsight_magic.reports import open_report
from nsight_magic.reports.nsys.merge import RankedReport
from nsight_magic.results import NcuRun, NsysRun
from nsight_magic.views.html import fmt_flops, fmt_ns, fmt_ratio
from nsight_magic.views.live import LiveChart
from nsight_magic.views.ncu_view import NO_SOL
from nsight_magic.views.nsys_view import NsysView

WARNING = "&#9888;"


def run_of(data_dir: Path, name: str) -> NsysRun:
    return NsysRun(open_report(data_dir / f"{name}.sqlite"), meta={"name": name})


def tabs_of(view: w.VBox) -> dict[str, w.Widget]:
    """Title -> page, each page opened (the nsys view builds a page when it is first opened)."""
    _header, tabs, _report = view.children
    if isinstance(view, NsysView):
        for title in tabs.titles:
            view.page(title)
    return dict(zip(tabs.titles, tabs.children, strict=True))


def text(widget: w.Widget) -> str:
    """All HTML a widget tree shows, tags kept."""
    if isinstance(widget, w.HTML):
        return widget.value
    return "".join(text(c) for c in getattr(widget, "children", ()))


@pytest.fixture(scope="module")
def graph_level(data_dir: Path) -> NsysRun:
    return run_of(data_dir, "nsys_graphs_graph")


def test_report_warnings_are_one_line_each_in_the_header(graph_level: NsysRun) -> None:
    # the report's own warning, then the cold-run line (this fixture was a first run:
    # tests/test_cold_run.py)
    warning, cold = graph_level.warnings
    assert cold.startswith("Cold run: 2 CUDA module load(s)") and "--warmup 1" in cold
    view = graph_level.widget()
    for page in (view.children[0].value, graph_level.to_html()):
        assert page.count(WARNING) == 2 and html.escape(warning) in page
        assert html.escape(cold) in page
    assert "<b>CUDA graph launches (whole graphs)</b>: 5" in view.children[0].value


def test_graph_level_trace_says_its_kernels_are_graph_launches(graph_level: NsysRun) -> None:
    kernels = tabs_of(graph_level.widget())["Kernels"]
    page = text(kernels)
    assert "This report holds 5 CUDA graph launches instead of per-kernel rows" in page
    assert ">[CUDA graph launch 1]</td>" in page
    timeline = tabs_of(graph_level.widget())["Timeline"].children[2]
    spec = timeline.spec
    bars = spec["datasets"][spec["data"]["name"]]
    assert sum(b["kind"] == "graph launch" for b in bars) == 5
    assert "graph launch" in spec["encoding"]["color"]["scale"]["domain"]


def test_node_level_graph_kernels_are_marked(data_dir: Path) -> None:
    run = run_of(data_dir, "nsys_graphs_node")
    page = text(tabs_of(run.widget())["Kernels"])
    assert ">as CUDA graph node</th>" in page
    table = run.frames.kernel_table()
    assert sorted(table["graph_node_instances"].tolist()) == [0, 0, 5, 5, 5]
    spec = tabs_of(run.widget())["Timeline"].children[2].spec
    assert "graph kernel" in spec["encoding"]["color"]["scale"]["domain"]
    assert "as CUDA graph node" in run.to_html()
    plain = tabs_of(run_of(data_dir, "nsys_small").widget())["Kernels"]
    assert "as CUDA graph node" not in text(plain)  # no graph kernels: no column


def test_ncu_warnings_of_a_cut_report(ncu_reports: dict[str, Path], tmp_path: Path) -> None:
    data = ncu_reports["ncu_small_full"].read_bytes()
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(data[: int(len(data) * 0.99)])
    run = NcuRun(open_report(cut), meta={"name": "cut"})
    assert len(run.warnings) == 2
    header = run.widget().children[0].value
    for page in (header, run.to_html()):
        assert page.count(WARNING) == 2
        assert all(html.escape(line) in page for line in run.warnings)


def test_advice_note_when_ncu_ran_no_rules(ncu_reports: dict[str, Path]) -> None:
    run = NcuRun(open_report(ncu_reports["ncu_gemm_metrics"]), meta={"name": "metrics"})
    assert run.advice().empty
    advice = tabs_of(run.widget())["Advice"].value
    assert html.escape(run.advice_note()) in advice and "--metrics only" in advice
    assert tabs_of(run.widget())["MFU"].children  # says what it could not show, if anything
    # no SOL metrics in a --metrics report: the blank SOL columns say why
    launches = text(tabs_of(run.widget())["Launches"])
    assert html.escape(NO_SOL) in launches and html.escape(NO_SOL) in run.to_html()


def test_blank_mfu_and_partial_range_coverage_say_why(
    ncu_reports: dict[str, Path], data_dir: Path
) -> None:
    """The bundled drill-down (1 of 86 launches, no op ranges): the MFU tab shows the
    coverage of each range and why MFU is blank; occupancy is the theoretical one, labelled."""
    from nsight_magic import examples

    run = examples.llm_kernel()
    page = text(tabs_of(run.widget())["MFU"])
    assert ">launches profiled</th>" in page and "1/86 launches profiled" in page
    assert html.escape(NO_OP_RANGE[:40]) in page
    launches = text(tabs_of(run.widget())["Launches"])
    assert "18.8%" in launches and html.escape(OCCUPANCY_THEORETICAL[:30]) in launches


def test_hfu_and_mfu_named_apart(ncu_reports: dict[str, Path], data_dir: Path) -> None:
    parent = run_of(data_dir, "nsys_gemm")
    run = NcuRun(open_report(ncu_reports["ncu_gemm_roofline"]), meta={"name": "g"}, parent=parent)
    page = text(tabs_of(run.widget())["MFU"])
    assert ">HFU (hardware FLOPs)</th>" in page and ">MFU (model FLOPs)</th>" in page
    frames = run.mfu_frames()
    assert (
        frames["kernels"]["hfu_frac"].notna().all() and frames["kernels"]["mfu_frac"].isna().all()
    )
    assert "derived: H200 bf16 dense" in page


def test_processes(data_dir: Path) -> None:
    run = run_of(data_dir, "nsys_procs")
    view = run.widget()
    assert "<b>processes</b>: python3 (992), python3 (1029)" in view.children[0].value
    page = text(tabs_of(view)["Processes"])
    summary = run.process_summary()
    assert summary["pid"].tolist() == [992, 1029]
    assert page.index(">992</td>") < page.index(">1029</td>")
    assert "GPU work per process" in run.to_html()
    single = run_of(data_dir, "nsys_small")  # one process: no tab, no processes in the header
    assert "Processes" not in tabs_of(single.widget())
    assert "<b>processes</b>" not in single.widget().children[0].value


def test_ops_tab_and_the_op_in_the_picker(data_dir: Path) -> None:
    run = run_of(data_dir, "nsys_ops")
    view = run.widget()
    ops = tabs_of(view)["Ops"]
    table = run.frames.op_table()
    summary = run.op_summary()
    assert table[["op", "shapes", "gpu_time_ns"]].equals(summary[["op", "shapes", "gpu_time_ns"]])
    page = text(ops)
    first = summary.iloc[0]
    assert f">{html.escape(first['op'])}</td>" in page
    assert isinstance(ops.children[1], LiveChart)
    # op MFU where model FLOPs are known (GEMMs), from analysis.mfu.op_mfu
    gemm = table[table["mfu_frac"].notna()]
    op_mfu = run.op_mfu(dtype="bf16").set_index(["op", "shapes"])["mfu_frac"]
    assert len(gemm) and set(gemm["op"]) <= GEMM_OPS and "aten::mm" in set(gemm["op"])
    for row in gemm.itertuples():
        assert row.mfu_frac == op_mfu[(row.op, row.shapes)]
    (peak,) = set(gemm["peak_source"])
    assert f"MFU peak: {html.escape(fmt_flops(gemm['peak_flops_per_s'].iloc[0]))} ({peak})" in page
    top_gemm = gemm.iloc[0]
    assert (
        f">{fmt_ratio(top_gemm['mfu_frac'])}</td>" in page
        and fmt_ratio(top_gemm["mfu_frac"]) != "0.0%"
    )
    # every nvjet GEMM kernel in the picker names the op that launched it
    labels = [label for label, name in view.picker.kernel.options if name.startswith("nvjet")]
    assert labels and all("<- aten::mm" in label for label in labels)
    # and the user's range each ran in (any thread: analysis.phases)
    assert all(label.endswith(("in LLM:decode_step", "in LLM:LLM@prefill")) for label in labels)
    assert "PyTorch ops" in run.to_html()
    # one op range per op call (1745 here): the Ops tab holds them, the NVTX tab, its chart
    # and the range choosers (picker filter, "profile this range") keep the user's ranges
    assert not run.frames.nvtx_table()["range"].str.startswith("aten::").any()
    user = run.nvtx_gpu_projection()
    user = user[~user["range"].str.startswith("aten::")]
    assert len(run.frames.nvtx_table()) == len(user) > 0
    assert "are in the Ops tab" in tabs_of(view)["NVTX"].children[0].value
    ranges = [value for _, value in view.picker.range_filter.options[1:]]
    assert ranges and not any(r.startswith("aten::") for _, r in ranges)


@pytest.mark.parametrize("which", ["one report", "per-rank reports"])
def test_ranks_tab(data_dir: Path, which: str) -> None:
    if which == "one report":
        run = run_of(data_dir, "nsys_2rank")
        ranked = RankedReport([run.report])
    else:
        files = [data_dir / "nsys_2rank_r0.sqlite", data_dir / "nsys_2rank_r1.sqlite"]
        run = nsight_magic.load_runs(files)
        ranked = run.report
        assert isinstance(ranked, RankedReport)
        assert run.name == "nsys_2rank_r0 + nsys_2rank_r1"
        assert {"rank", "report"} <= set(run.kernels().columns)
    view = run.widget()
    assert "<b>ranks</b>: 2" in view.children[0].value
    ranks = tabs_of(view)["Ranks"]
    page = text(ranks)
    summary = ranked.summary()
    straggler = summary["straggler_rank"]
    assert straggler == ranked.rank_skew()["last_rank"].mode().iloc[0]
    assert f"<b>straggler (most often last into a collective)</b>: rank {straggler}" in page
    assert "NCCL collectives per rank" in page and "GPU busy per rank" in page
    longest = ranked.collectives().sort_values("duration_ns", ascending=False).iloc[0]
    assert "The 10 longest NCCL kernels" in page and longest["kind"] == "AllReduce"
    assert f">{fmt_ns(longest['duration_ns'])}</td>" in page
    busy = ranked.rank_busy_pct()
    for pct in busy["busy_pct"]:
        assert f">{pct:.1f}%</td>" in page
    timeline, skew = ranks.children[1], ranks.children[2]
    lanes = timeline.spec["encoding"]["y"]["sort"]
    assert any(re.match(r"rank 1 / GPU 1 / stream \d+", lane) for lane in lanes)
    assert isinstance(skew, LiveChart)
    static = run.to_html()
    assert "Rank skew: the 10 largest" in static and "per-rank timeline" in static
    assert (
        "Ranks" in tabs_of(view)
        and "<b>ranks</b>" not in run_of(data_dir, "nsys_small").widget().children[0].value
    )
