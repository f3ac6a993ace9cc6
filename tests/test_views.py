"""Widget trees of the nsys / ncu / compare views on the real fixtures (built without a kernel)."""

from __future__ import annotations

import ipywidgets as w
import pytest

from nsight_magic.results import NcuRun, NsysRun
from nsight_magic.views import ncu_view, nsys_view


@pytest.fixture(scope="module")
def nsys_run(nsys_small_sqlite, tmp_path_factory):
    report = pytest.importorskip("nsight_magic.reports.nsys.report").NsysReport.open(
        nsys_small_sqlite
    )
    return NsysRun(report, tmp_path_factory.mktemp("nsys-run"), {"name": "small"})


@pytest.fixture(scope="module")
def ncu_run(ncu_reports):
    report = pytest.importorskip("nsight_magic.reports.ncu.report").NcuReport.open(
        ncu_reports["ncu_small_full"]
    )
    return NcuRun(report, meta={"name": "full"})


def _outputs_chart(out: w.Output) -> bool:
    """The Output holds an altair chart: its repr (default renderer) or, once the extension is
    loaded (static charts), the Vega-Lite mimetype with a PNG beside it."""
    for o in out.outputs:
        data = o.get("data", {})
        if "Chart(...)" in data.get("text/plain", ""):
            return True
        if any(k.startswith("application/vnd.vegalite") for k in data) and "image/png" in data:
            return True
    return False


def test_nsys_widget_tree(nsys_run):
    view = nsys_run.widget()
    header, tabs = view.children
    assert isinstance(tabs, w.Tab)
    assert tabs.titles == ("Kernels", "NVTX", "Timeline", "Memory", "Gaps", "Profile a kernel")
    assert "NVIDIA H200" in header.value and "26" in header.value
    assert str(nsys_run.run_dir) in header.value
    kernels_tab, nvtx_tab, timeline_tab, memory_tab, gaps_tab, _picker = tabs.children
    assert "30.528 us" in kernels_tab.children[0].value
    assert "nsight_magic:L3: for step in range(3): ..." in nvtx_tab.children[0].value
    assert _outputs_chart(kernels_tab.children[1])
    assert _outputs_chart(timeline_tab.children[0])
    assert "40.08" in memory_tab.children[0].value  # HtoD GB/s: 4194304 B / 104640 ns
    assert "GPU idle" in gaps_tab.children[0].value


def test_nvtx_tab_lists_statements_first_in_line_order(nsys_run):
    ordered = nsys_view.ordered_projection(nsys_run.nvtx_gpu_projection())
    head = ordered["range"].tolist()[:5]
    assert head[0] == "cell"
    lines = [int(r.split(":")[0][1:]) for r in head[1:]]
    assert lines == sorted(lines)
    assert (ordered["domain"].iloc[: len(head)] == "nsight_magic").all()
    rest = ordered[ordered["domain"] != "nsight_magic"]
    assert rest["proj_total_ns"].is_monotonic_decreasing


def test_header_numbers_match_report(nsys_run):
    items = nsys_view.header_items(nsys_run)
    start, end = nsys_run.capture_window()
    assert items["captured"] == nsys_view.tables.fmt_ns(end - start)
    assert items["GPU busy"] == f"{nsys_run.gpu_busy_pct():.1f}%"


def test_ncu_widget_tree_and_sections(ncu_run):
    view = ncu_run.widget()
    header, tabs = view.children
    assert tabs.titles == ("Launches", "Sections", "Roofline", "MFU")
    assert "profiled launches</b>: 3" in header.value
    launches, sections, roofline, _mfu = tabs.children
    names = ncu_run.kernels()["name"].tolist()
    assert "sm80_xmma_gemm_f32f32" in launches.children[0].value
    picker, details = sections.children
    assert [v for _, v in picker.options] == [0, 1, 2]
    first = details.value
    assert first == ncu_view.sections_html(ncu_run, 0)
    picker.value = 2
    assert details.value != first
    section_names = list(ncu_run.sections(2))
    assert section_names and all(n in details.value for n in section_names[:3])
    assert isinstance(roofline, w.Output) and _outputs_chart(roofline)
    assert len(names) == 3


def test_compare_widget(nsys_run, data_dir):
    from nsight_magic.results.comparison import compare

    cmp = compare(nsys_run, data_dir / "nsys_gemm.sqlite")
    view = cmp.widget()
    header, tabs = view.children
    assert tabs.titles == ("Kernels", "NVTX")
    assert "Compare: small -&gt; nsys_gemm.sqlite" in header.value
