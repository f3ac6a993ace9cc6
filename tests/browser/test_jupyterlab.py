"""JupyterLab 4 with the real front end: open notebooks/01_quickstart.ipynb, Run All, and use
the %%nsys result as a person would: it renders as the live ipywidgets view (not its static
HTML), its charts draw with no internet (altair's JupyterChart, vega-embed from the kernel),
hovering a bar shows its tooltip, clicking a bar selects that kernel in the picker, brushing the
timeline's overview zooms the timeline, and the picker answers Profile. The quickstart opens the
runs bundled with the package (``nsight_magic.examples``); the server is ``lab.start_lab``'s."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import failed
from .lab import CELL_OUTPUT, Lab, Ran, bar_marks, open_tab, run_all

pytestmark = pytest.mark.browser

NOTEBOOK = "notebooks/01_quickstart.ipynb"
NSYS_TABS = ["Kernels", "NVTX", "Timeline", "Memory", "Gaps", "Idle", "Profile a kernel"]


@pytest.fixture(scope="module")
def ran(lab: Lab, browser: Any, screenshots: Path) -> Iterator[Ran]:
    """The quickstart after Run All."""
    with run_all(lab, browser, screenshots, NOTEBOOK, "Nsight Systems: llm prefill", 7) as r:
        yield r


@pytest.fixture(autouse=True)
def screenshot_on_failure(
    request: pytest.FixtureRequest, ran: Ran, screenshots: Path
) -> Iterator[None]:
    yield
    if failed(request):
        ran.page.screenshot(path=str(screenshots / f"jupyterlab_failure_{request.node.name}.png"))


def test_nsys_result_is_live_widget(ran: Ran) -> None:
    """The %%nsys result shows as the ipywidgets view (Tab with the view's labels), not as its
    static text/html fallback: the widget manager of JupyterLab worked."""
    from playwright.sync_api import expect

    nsys = ran.nsys
    nsys.scroll_into_view_if_needed()
    expect(nsys).not_to_contain_text("Error displaying widget")
    expect(nsys.locator(".jupyter-widgets.widget-vbox").first).to_be_visible()
    # ... and not the static form (the same findings as plain HTML, for readers with no kernel).
    expect(nsys.locator(".nsight-magic.nsys")).to_have_count(0)
    tabs = nsys.locator(".jupyter-widget-tab > .lm-TabBar .lm-TabBar-tab")
    expect(tabs).to_have_text(NSYS_TABS)
    # The Kernels page is open and lists the report's real kernels by their short names.
    kernels = nsys.locator(".widget-html table").first
    expect(kernels).to_contain_text("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT")
    expect(kernels).to_contain_text("vectorized_layer_norm_kernel")


def test_widget_charts_render_offline(ran: Ran, screenshots: Path) -> None:
    """Every chart in the tabs is drawn live by vega-embed (an SVG with marks, not a picture),
    with no internet: the library came from the kernel, nothing was asked of a CDN."""
    from playwright.sync_api import expect

    for tab in ("Kernels", "NVTX", "Timeline"):
        page_ = open_tab(ran.nsys, tab)
        expect(page_).not_to_contain_text("live chart unavailable")
        expect(page_).not_to_contain_text("JavaScript Error")
        chart = page_.locator(".vega-embed svg.marks").first
        expect(chart).to_be_visible(timeout=60_000)
        assert bar_marks(page_.locator(".vega-embed").first).count() > 0
    ran.page.screenshot(path=str(screenshots / "jupyterlab_timeline.png"))
    assert not [u for u in ran.blocked if "esm.sh" in u or "cdn" in u], ran.blocked


def test_hover_shows_tooltip_with_full_name(ran: Ran, screenshots: Path) -> None:
    from playwright.sync_api import expect

    page_ = open_tab(ran.nsys, "Kernels")
    chart = page_.locator(".vega-embed").first
    bars = bar_marks(chart)
    expect(bars.first).to_be_visible(timeout=60_000)
    bars.first.hover()
    tooltip = ran.page.locator("#vg-tooltip-element")
    expect(tooltip).to_be_visible()
    # The full kernel name and its launch config, not just the axis label.
    expect(tooltip).to_contain_text("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT")
    expect(tooltip).to_contain_text("grid")
    expect(tooltip).to_contain_text("registers")
    chart.screenshot(path=str(screenshots / "jupyterlab_tooltip.png"))
    ran.page.mouse.move(0, 0)


def test_click_on_bar_selects_kernel_in_picker(ran: Ran, screenshots: Path) -> None:
    """Click the second bar (vectorized_layer_norm_kernel) in Kernels: the picker on its tab
    now has that kernel chosen, and the chart dims the other bars."""
    from playwright.sync_api import expect

    page_ = open_tab(ran.nsys, "Kernels")
    chart = page_.locator(".vega-embed").first
    bars = bar_marks(chart)
    expect(bars.nth(1)).to_be_visible(timeout=60_000)
    bars.nth(1).click()
    picker_page = open_tab(ran.nsys, "Profile a kernel")
    select = picker_page.locator(".widget-select select")
    expect(select).to_be_visible()
    chosen = select.locator("option:checked")
    expect(chosen).to_contain_text("vectorized_layer_norm_kernel", timeout=15_000)
    picker_page.screenshot(path=str(screenshots / "jupyterlab_picker_after_click.png"))
    # Back on Kernels: the picked bar stays opaque, the others are dimmed (focus param).
    page_ = open_tab(ran.nsys, "Kernels")
    bars = bar_marks(page_.locator(".vega-embed").first)
    expect(bars.nth(0)).to_have_attribute("opacity", "0.3")
    opacity = bars.nth(1).get_attribute("opacity")
    assert opacity in (None, "1"), opacity
    page_.screenshot(path=str(screenshots / "jupyterlab_kernels_focus.png"))


def test_brush_on_timeline_zooms(ran: Ran, screenshots: Path) -> None:
    """Drag across the middle of the overview: the timeline below re-reads that window (its
    status says so, 'Show all' is enabled) and its x axis starts past zero."""
    from playwright.sync_api import expect

    page_ = open_tab(ran.nsys, "Timeline")
    overview, detail = page_.locator(".vega-embed").nth(0), page_.locator(".vega-embed").nth(1)
    expect(overview.locator("svg.marks")).to_be_visible(timeout=60_000)
    expect(page_).to_contain_text("whole capture")
    ticks = detail.locator("g.role-axis-label text")
    first_tick = ticks.first.text_content()
    area = overview.locator("g.mark-rect.role-mark").first.bounding_box()
    plot = overview.locator("path.background").first.bounding_box()
    y = plot["y"] + plot["height"] / 2
    x0, x1 = plot["x"] + plot["width"] * 0.4, plot["x"] + plot["width"] * 0.6
    assert area is not None
    ran.page.mouse.move(x0, y)
    ran.page.mouse.down()
    ran.page.mouse.move(x1, y, steps=8)
    ran.page.mouse.up()
    # The overview spans 0-9 ms here: a fifth of it is a window of about 1.8 ms.
    expect(page_).to_contain_text(re.compile(r"window 1\.[6-9]\d* ms"), timeout=15_000)
    expect(page_.locator("button", has_text="Show all")).to_be_enabled()
    expect(ticks.first).not_to_have_text(first_tick)
    page_.screenshot(path=str(screenshots / "jupyterlab_timeline_zoomed.png"))
    page_.locator("button", has_text="Show all").click()
    expect(page_).to_contain_text("whole capture")


def test_picker_reacts_to_profile(ran: Ran, screenshots: Path) -> None:
    """Profile a kernel tab: choose a kernel, press Profile; with no GPU and no ncu here the
    picker must answer with its one-line status (progress, then the error)."""
    from playwright.sync_api import expect

    nsys, page = ran.nsys, ran.page
    picker_page = open_tab(nsys, "Profile a kernel")
    picker = picker_page.locator(".widget-select select")
    expect(picker).to_be_visible()
    options = picker.locator("option")
    assert options.count() >= 2
    second = options.nth(1).get_attribute("value")
    picker.select_option(index=1)
    expect(picker).to_have_value(second)

    button = picker_page.locator("button", has_text="Profile with ncu")
    expect(button).to_be_enabled()
    button.click()
    # No ncu on this machine: the run ends, the button comes back, and the line says why.
    failed = picker_page.locator(".widget-html", has_text="profile failed:")
    expect(failed).to_have_count(1)
    expect(button).to_be_enabled()
    text = failed.inner_text().strip()
    assert "\n" not in text, text
    # The quickstart's run was opened from a file: the one line must say so (no TypeError).
    assert "opened from a report file" in text, text

    nsys.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(screenshots / "jupyterlab_quickstart.png"))
    nsys.screenshot(path=str(screenshots / "jupyterlab_quickstart_picker.png"))


def test_ncu_view_shows_advice_first_and_live_roofline(ran: Ran, screenshots: Path) -> None:
    from playwright.sync_api import expect

    ncu = ran.page.locator(CELL_OUTPUT).filter(has_text="Nsight Compute: llm prefill: top GEMM")
    expect(ncu).to_have_count(1)
    ncu.scroll_into_view_if_needed()
    tabs = ncu.locator(".jupyter-widget-tab > .lm-TabBar .lm-TabBar-tab")
    expect(tabs.first).to_have_text("Advice")
    ncu.locator(".lm-TabBar-tab", has_text="Roofline").click()
    roofline = ncu.locator(".vega-embed:visible").first
    expect(roofline.locator("svg.marks")).to_be_visible(timeout=60_000)
    expect(roofline).to_contain_text("DRAM")  # the slope is in the legend
    expect(roofline).to_contain_text("nvjet_sm90")  # the point is labelled
    expect(ncu).to_contain_text("compute-bound")
    ncu.screenshot(path=str(screenshots / "jupyterlab_roofline.png"))
