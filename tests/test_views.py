"""Widget trees of the nsys / ncu / compare views on the real fixtures (built without a kernel),
the charts as live widgets, and the links between charts and the picker driven the way the
browser drives them (the selection state a click sends)."""

from __future__ import annotations

import ipywidgets as w
import pytest

from nsight_magic.errors import ReportError
from nsight_magic.reports import open_report
from nsight_magic.results import NcuRun, NsysRun
from nsight_magic.views import html, ncu_view, nsys_view
from nsight_magic.views.live import BRUSH, PICK, LiveChart

SOFTMAX = (
    "void <unnamed>::softmax_warp_forward<float, float, float, (int)9, (bool)0, (bool)0>"
    "(T2 *, const T1 *, int, int, int, const bool *, int, bool)"
)
NSYS_TABS = ("Kernels", "NVTX", "Timeline", "Memory", "Gaps", "Idle", "Profile a kernel")
NCU_TABS = ("Advice", "Launches", "Sections", "Roofline", "MFU")


@pytest.fixture(scope="module")
def nsys_run(nsys_small_sqlite, tmp_path_factory):
    return NsysRun(open_report(nsys_small_sqlite), tmp_path_factory.mktemp("nsys-run"),
                   {"name": "small"})  # fmt: skip


@pytest.fixture(scope="module")
def ncu_run(ncu_reports):
    return NcuRun(open_report(ncu_reports["ncu_small_full"]), meta={"name": "full"})


def click(chart: LiveChart, **fields) -> None:
    """What the browser sends when a mark is clicked: the point selection's Vega signal."""
    signal = {"vlPoint": {"or": [fields]}, **{f: [v] for f, v in fields.items()}}
    store = [{"unit": "", "fields": [{"field": f, "type": "E"} for f in fields],
              "values": list(fields.values())}]  # fmt: skip
    chart._vl_selections = {**chart._vl_selections, PICK: {"value": signal, "store": store}}


def brush(chart: LiveChart, lo_ms: float, hi_ms: float) -> None:
    """What the browser sends when the overview is brushed from lo to hi (ms)."""
    store = [{"unit": "", "fields": [{"field": "start_ms", "channel": "x", "type": "R"}],
              "values": [[lo_ms, hi_ms]]}]  # fmt: skip
    chart._vl_selections = {
        **chart._vl_selections,
        BRUSH: {"value": {"start_ms": [lo_ms, hi_ms]}, "store": store},
    }


def test_nsys_widget_tree(nsys_run):
    view = nsys_run.widget()
    header, tabs, report = view.children
    assert isinstance(tabs, w.Tab) and tabs.titles == NSYS_TABS
    assert isinstance(report, w.Output)  # the .nsys-rep beside the opened export, linked
    assert (
        "<code>nsys-ui tests/data/nsys_small.nsys-rep</code>"
        in report.outputs[0]["data"]["text/html"]
    )
    assert "NVIDIA H200" in header.value and "26" in header.value
    assert str(nsys_run.run_dir) in header.value
    kernels_tab, nvtx_tab, timeline_tab, memory_tab, gaps_tab, idle_tab, _picker = tabs.children
    # Only the first page is built at display; the others when opened (``page``, or a tab
    # selected in the front end: test_tabs_are_built_when_first_opened).
    assert "computed when this tab is opened" in idle_tab.children[0].value
    for title in NSYS_TABS[1:5]:
        view.page(title)
    assert "30.528 us" in kernels_tab.children[0].value
    # Short names in the table, the full template name on hover.
    assert ">softmax_warp_forward&lt;9, 0, 0&gt;</td>" in kernels_tab.children[0].value
    assert f'title="{html.esc(SOFTMAX)}"' in kernels_tab.children[0].value
    assert "nsight_magic:L3: for step in range(3): ..." in nvtx_tab.children[0].value
    assert isinstance(kernels_tab.children[1], LiveChart)
    assert kernels_tab.children[1].spec["encoding"]["x"]["field"] == "total_us"
    assert isinstance(nvtx_tab.children[1], LiveChart)
    assert "Profile this range" in str([c.description for c in nvtx_tab.children[2].children[2]
                                        .children if isinstance(c, w.Button)])  # fmt: skip
    assert all(isinstance(c, LiveChart) for c in timeline_tab.children[1:3])
    # the Memory tab: where the GPU memory went (none here: says how), then the copies
    texts = [c.value for c in memory_tab.children if isinstance(c, w.HTML)]
    assert "--memory" in texts[0]
    assert any("40.08" in t for t in texts)  # HtoD GB/s: 4194304 B / 104640 ns
    assert isinstance(memory_tab.children[-1], LiveChart)  # the copies chart
    assert "GPU idle" in gaps_tab.children[0].value
    assert "Why the GPU idled" in view.load_idle().children[0].value


def test_tabs_are_built_when_first_opened(nsys_run):
    """A notebook editor shows nothing of a result until its whole widget has arrived: only the
    Kernels page is built at display. Selecting a tab (what a click in the front end sets)
    builds its page once; a click on a kernel builds the picker, which then leads the focus."""
    view = nsys_run.widget()
    lazy = view.tabs
    assert [lazy.built(t) for t in NSYS_TABS] == [True] + [False] * (len(NSYS_TABS) - 1)
    waiting = view.children[1].children[2].children[0].value
    assert "Built when this tab is first opened" in waiting
    kernel_chart = view.children[1].children[0].children[1]
    top = nsys_run.frames.kernel_table()["name"].iloc[0]
    assert kernel_chart.params.focus == top  # the picker's first choice, before the picker
    view.children[1].selected_index = NSYS_TABS.index("Timeline")
    assert lazy.built("Timeline") and not lazy.built("Profile a kernel")
    detail = view.children[1].children[2].children[2]
    assert detail is view.timeline.detail and detail.params.focus == top
    page = view.children[1].children[2]
    view.children[1].selected_index = 0
    view.children[1].selected_index = NSYS_TABS.index("Timeline")
    assert view.children[1].children[2] is page and page.children[2] is detail  # built once
    click(kernel_chart, name=SOFTMAX)
    assert lazy.built("Profile a kernel") is False  # the picker exists; its tab is not shown
    assert view.picker.kernel.value == SOFTMAX and detail.params.focus == SOFTMAX
    picker_page = view.page("Profile a kernel")
    assert picker_page.children[2] is view.picker.kernel


def test_a_page_that_fails_to_build_says_why_and_leaves_the_others(nsys_run, monkeypatch):
    def broken(*_a, **_k):
        raise ReportError("the copies table is damaged")

    view = nsys_run.widget()
    monkeypatch.setattr(nsys_view, "memory_html", broken)
    memory = view.page("Memory")
    assert memory.children[0].value.count("Memory not shown: ReportError") == 1
    assert "the copies table is damaged" in memory.children[0].value
    assert "GPU idle" in view.page("Gaps").children[0].value


def test_live_chart_state_is_small_and_answers_for_the_bundle(nsys_run):
    chart = nsys_run.widget().children[1].children[0].children[1]
    assert len(chart._esm) < 4000  # the loader, not the 0.9 MB library
    sent = []
    chart.send = lambda content, buffers=None: sent.append((content, buffers))
    chart._answer(chart, {"type": "nsight_magic:vega-bundle"}, [])
    ((content, buffers),) = sent
    assert content == {"type": "nsight_magic:vega-bundle"}
    assert b"vega" in buffers[0] and len(buffers[0]) > 500_000
    chart._answer(chart, {"type": "something else"}, [])  # ignored
    assert len(sent) == 1


def test_click_on_kernel_bar_selects_it_in_picker_and_highlights(nsys_run):
    view = nsys_run.widget()
    kernel_chart = view.children[1].children[0].children[1]
    timeline = view.timeline
    click(kernel_chart, name=SOFTMAX)
    assert view.picker.kernel.value == SOFTMAX
    # The picker's choice comes back as the charts' "focus" (the others dim).
    assert kernel_chart.params.focus == SOFTMAX and timeline.detail.params.focus == SOFTMAX
    view.picker.kernel.value = view.picker.kernel.options[0][1]
    assert kernel_chart.params.focus == view.picker.kernel.options[0][1]


def test_click_on_timeline_bar_and_short_names_select_in_picker(nsys_run):
    view = nsys_run.widget()
    view.picker.range_filter.value = ("", "LLM@prefill")  # softmax is not in this range
    click(view.timeline.detail, name=SOFTMAX)
    assert view.picker.range_filter.value == "(all kernels)" and view.picker.kernel.value == SOFTMAX
    assert view.picker.select("softmax_warp_forward<9, 0, 0>")  # a kernel's short name
    # the short form 7 kernels share (each one's label adds a tag): names none of them
    assert not view.picker.select("vectorized_elementwise_kernel<4>")


def test_brush_zooms_the_timeline_to_the_window(nsys_run):
    view = nsys_run.widget()
    timeline = view.timeline
    before = timeline.detail.spec
    brush(timeline.overview, 40.0, 60.0)
    origin = nsys_run.frames.origin_ns()
    assert timeline.window == (origin + 40_000_000, origin + 60_000_000)
    after = timeline.detail.spec
    assert after["encoding"]["x"]["scale"]["domain"] == [40.0, 60.0]
    rows = after["datasets"][after["data"]["name"]]
    assert 0 < len(rows) < len(before["datasets"][before["data"]["name"]])
    assert all(r["end_ms"] >= 40.0 and r["start_ms"] <= 60.0 for r in rows)
    assert "window 20.000 ms" in timeline.status.value and not timeline.reset.disabled
    timeline.reset.click()
    assert timeline.window is None and "whole capture" in timeline.status.value


def test_nvtx_bar_click_chooses_range_to_profile(nsys_run):
    calls = []
    view = nsys_run.widget(profile_range_fn=lambda *a, **k: calls.append((a, k)) or None)
    nvtx_chart = view.page("NVTX").children[1]
    click(nvtx_chart, name=":decode")
    assert view.ranges.range.value == ("", "decode", "PushPop")
    view.ranges.background.button.click()
    view.ranges.background.thread.join(30)
    ((args, kwargs),) = calls
    assert args == ("", "decode", "PushPop") and kwargs["set"] == "roofline"
    # The stub returned None, which has no view: the failure is one line, nothing raised.
    assert "profile failed: AttributeError" in view.ranges.background.status.value


def test_profile_range_of_a_file_run_says_why(nsys_run):
    run = NsysRun(nsys_run.report, meta={"name": "from file"})
    view = run.widget()
    view.ranges.start()
    view.ranges.background.thread.join(30)
    assert "opened from a report file" in view.ranges.background.status.value


def test_nvtx_tab_lists_statements_first_in_line_order(nsys_run):
    ordered = nsys_run.frames.nvtx_table()
    head = ordered["range"].tolist()[:5]
    assert head[0] == "cell"
    lines = [int(r.split(":")[0][1:]) for r in head[1:]]
    assert lines == sorted(lines)
    assert (ordered["domain"].iloc[: len(head)] == "nsight_magic").all()
    rest = ordered[ordered["domain"] != "nsight_magic"]
    assert rest["proj_total_ns"].is_monotonic_decreasing


def test_header_numbers_match_report(nsys_run):
    items = nsys_view.header_items(nsys_run.frames)
    start, end = nsys_run.capture_window()
    assert items["captured"] == html.fmt_ns(end - start)
    assert items["GPU busy"] == f"{nsys_run.gpu_busy_pct():.1f}%"


def test_ncu_widget_tree_advice_first_and_sections(ncu_run):
    view = ncu_run.widget()
    header, tabs, report = view.children
    assert tabs.titles == NCU_TABS
    assert "open it in Nsight Compute: <code>ncu-ui " in report.outputs[0]["data"]["text/html"]
    assert "profiled launches</b>: 3" in header.value
    advice, launches, sections, roofline, _mfu = tabs.children
    if ncu_run.advice().empty:  # reports branch not merged: the tab says so in one line
        assert "No ncu rule results" in advice.value
    else:
        assert ncu_run.advice()["title"].iloc[0] in advice.value
    assert "sm80_xmma_gemm_f32f32" in launches.children[0].value
    picker, details = sections.children
    assert [v for _, v in picker.options] == [0, 1, 2]
    first = details.value
    assert first == ncu_view.sections_html(ncu_run.frames, 0)
    picker.value = 2
    assert details.value != first
    section_names = list(ncu_run.sections(2))
    assert section_names and all(n in details.value for n in section_names[:3])
    chart, verdicts = roofline.children
    assert isinstance(chart, LiveChart) and "-bound" in verdicts.value


def test_roofline_click_shows_launch_and_calls_back(ncu_run):
    picked = []
    view = ncu_run.widget(on_pick=picked.append)
    _advice, _launches, sections, roofline, _mfu = view.children[1].children
    kernels = ncu_run.kernels()
    click(roofline.children[0], name=kernels["name"][2], launch=2)
    assert sections.children[0].value == 2
    assert picked == [kernels["demangled"][2]]


def test_advice_ranked_first_in_static_html(ncu_run):
    page = ncu_run.to_html()
    assert page.index("Advice") < page.index("Profiled launches") < page.index("Roofline")


def test_compare_widget(nsys_run, data_dir):
    from nsight_magic.results.comparison import compare

    cmp = compare(nsys_run, data_dir / "nsys_gemm.sqlite")
    view = cmp.widget()
    header, tabs = view.children
    assert tabs.titles == ("Kernels", "NVTX")
    assert "Compare: small -&gt; nsys_gemm.sqlite" in header.value
    kernels, nvtx = tabs.children
    assert isinstance(kernels.children[1], LiveChart) and isinstance(nvtx.children[1], LiveChart)
    assert "softmax_warp_forward" in kernels.children[0].value


@pytest.mark.parametrize("na", [None, float("nan"), float("inf"), "pd.NA", "NaT", "text", object()])
def test_formatters_take_na_and_junk(na):
    """Every formatter answers "" for what is not a number (a damaged report's cells)."""
    import pandas as pd

    value = {"pd.NA": pd.NA, "NaT": pd.NaT}.get(na, na) if isinstance(na, str) else na
    for fmt in (html.fmt_ns, html.fmt_bytes, html.fmt_pct, html.fmt_num, html.fmt_flops,
                html.fmt_ratio, html.fmt_hz, html.fmt_gbps, html.fmt_signed_ns):  # fmt: skip
        assert fmt(value) == "", (fmt.__name__, value)
    assert html.shorten(pd.NA) == "" and html.shorten(None) == ""
    assert html.fmt_ns(30528) == "30.528 us" and html.fmt_ratio(0.5) == "50.0%"
    assert html.fmt_ratio(0.00042) == "0.042%" and html.fmt_ratio(0) == "0.0%"
