"""The tabs only some runs have, in the real front end and in the static form: the Ops tab of a
run with PyTorch op ranges (tests/data/nsys_ops.sqlite) and the Ranks tab of a multi-rank run
(the two per-rank reports of tests/data/nsys_2rank_r*.sqlite merged by
``nsight_magic.load_runs``). A notebook showing both is written into the lab's root and Run
All'd in JupyterLab; their static HTML is opened from file:// with every request refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, failed
from .lab import CELL_OUTPUT, Lab, Ran, bar_marks, open_tab, run_all

pytestmark = pytest.mark.browser

DATA = REPO / "tests" / "data"
NOTEBOOK = "notebooks/llm_tabs.ipynb"
OPS = "Nsight Systems: llm ops"
RANKS = "Nsight Systems: two ranks"
CELLS = [
    f"""from nsight_magic.reports import open_report
from nsight_magic.results import NsysRun

NsysRun(open_report({str(DATA / "nsys_ops.sqlite")!r}), meta={{"name": "llm ops"}})""",
    f"""import nsight_magic

nsight_magic.load_runs({[str(DATA / f"nsys_2rank_r{r}.sqlite") for r in (0, 1)]!r},
                       name="two ranks")""",
]


@pytest.fixture(scope="module")
def ran(lab: Lab, browser: Any, screenshots: Path) -> Iterator[Ran]:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, lab.root / NOTEBOOK)
    with run_all(lab, browser, screenshots, NOTEBOOK, OPS, len(CELLS)) as r:
        yield r


@pytest.fixture(autouse=True)
def screenshot_on_failure(request: pytest.FixtureRequest, ran: Ran, screenshots: Path):
    yield
    if failed(request):
        ran.page.screenshot(path=str(screenshots / f"llm_tabs_failure_{request.node.name}.png"))


def test_ops_tab(ran: Ran, screenshots: Path) -> None:
    """Ops: the table of ops by GPU time with their shapes and MFU, and the chart drawn live."""
    from playwright.sync_api import expect

    page_ = open_tab(ran.nsys, "Ops")
    table = page_.locator(".widget-html table").first
    expect(table).to_contain_text("aten::mm")
    expect(table).to_contain_text("[[")  # shapes as PyTorch printed them
    expect(table.locator("th", has_text="MFU")).to_be_visible()
    chart = page_.locator(".vega-embed").first
    expect(chart.locator("svg.marks")).to_be_visible(timeout=60_000)
    assert bar_marks(chart).count() == 15
    picker = open_tab(ran.nsys, "Profile a kernel").locator(".widget-select select")
    expect(picker.locator("option", has_text="<- aten::mm").first).to_be_attached()
    page_ = open_tab(ran.nsys, "Ops")
    page_.screenshot(path=str(screenshots / "jupyterlab_ops_tab.png"))


def test_ranks_tab(ran: Ran, screenshots: Path) -> None:
    """Ranks: the straggler named, the per-rank timeline and the skew chart drawn live, busy %
    and NCCL collectives per rank."""
    from playwright.sync_api import expect

    view = ran.page.locator(CELL_OUTPUT).filter(has_text=RANKS)
    expect(view).to_have_count(1)
    view.scroll_into_view_if_needed()
    expect(view).to_contain_text("ranks: 2")
    page_ = open_tab(view, "Ranks")
    expect(page_).to_contain_text("straggler (most often last into a collective): rank")
    charts = page_.locator(".vega-embed")
    expect(charts).to_have_count(2)
    for i in range(2):
        expect(charts.nth(i).locator("svg.marks")).to_be_visible(timeout=60_000)
        assert bar_marks(charts.nth(i)).count() > 0
    expect(charts.nth(0)).to_contain_text("rank 1 / GPU 1 / stream")
    expect(page_).to_contain_text("NCCL collectives per rank")
    expect(page_).to_contain_text("AllReduce")
    page_.screenshot(path=str(screenshots / "jupyterlab_ranks_tab.png"))


@pytest.mark.parametrize("which", ["ops", "ranks"])
def test_static_sections_read_offline(
    which: str, offline_page: tuple[Any, list[str]], screenshots: Path, tmp_path: Path
) -> None:
    """The same findings in the static form, as a reader with no kernel and no network sees."""
    from playwright.sync_api import expect

    import nsight_magic
    from nsight_magic.reports import open_report
    from nsight_magic.results import NsysRun

    if which == "ops":
        run = NsysRun(open_report(DATA / "nsys_ops.sqlite"), meta={"name": "llm ops"})
        section, images = "PyTorch ops", ["top ops"]
    else:
        files = [DATA / f"nsys_2rank_r{r}.sqlite" for r in (0, 1)]
        run = nsight_magic.load_runs(files, name="two ranks")
        section, images = "NCCL collectives per rank", ["rank skew", "per-rank timeline"]
    path = tmp_path / f"{which}.html"
    path.write_text(f"<html><body>{run.to_html()}</body></html>", encoding="utf-8")
    page, refused = offline_page
    page.goto(path.as_uri(), wait_until="load")
    view = page.locator(".nsight-magic.nsys")
    heading = view.locator("h4", has_text=section)
    expect(heading).to_be_visible()  # a folded section shows its heading; a click opens it
    if which == "ops":
        heading.click()
    expect(heading).to_be_visible()
    for alt in images:
        img = view.locator(f"img[alt='{alt}']")
        expect(img).to_be_visible()
        assert img.evaluate("e => e.complete && e.naturalWidth > 0"), alt
    assert not refused, refused
    heading.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / f"static_{which}_section.png"))
