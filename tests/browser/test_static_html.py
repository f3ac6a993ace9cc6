"""The static HTML copies of executed notebooks, as a reader with no kernel and no network sees
them: opened from file:// in headless Chromium, every request off the file refused.

01_quickstart is executed here on the CPU (tools/run_notebook.py: bundled real reports); 02 and
03 were executed on an H200 and are committed with their outputs, so they are only converted
(``run_notebook.to_html``), never re-executed. Each page must show the nsys view's static form:
kernel table rows with the report's real kernel names, the Timeline section, PNG charts that
decoded (naturalWidth > 0), and no "chart omitted" / CDN-script fallbacks."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, require

pytestmark = pytest.mark.browser

NOTEBOOKS = REPO / "notebooks"
# notebook -> (nsys views it shows, kernel names that must be in its first kernel table,
#              at least this many chart images)
EXPECTED = {
    "01_quickstart": (
        ["Nsight Systems: llm prefill", "Nsight Systems: tour"],
        ["nvjet_sm90_tst_256x128", "vectorized_layer_norm_kernel"],
        10,
    ),
    "02_llm_drilldown": (["Nsight Systems: prefill", "Nsight Systems: decode"], ["nvjet_sm90"], 9),
    "03_compare": (["Nsight Systems: before", "Nsight Systems: after"], ["sm80_xmma_gemm"], 7),
}
NSIGHT_CHARTS = ["top kernels", "NVTX ranges", "timeline"]


def _run_notebook() -> Any:
    spec = importlib.util.spec_from_file_location(
        "run_notebook", REPO / "tools" / "run_notebook.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def html_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """name -> static HTML file: 01 executed now, 02/03 converted from their committed outputs."""
    require("nbclient")
    require("nbconvert")
    import nbformat

    rn = _run_notebook()
    out = tmp_path_factory.mktemp("static_html")
    kernel_tmp = out / "kernel_tmp"  # the examples unpack their reports into temp folders
    kernel_tmp.mkdir()
    files = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(kernel_tmp))
        # The kernel imports this checkout's package, whatever the venv has installed.
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.getenv("PYTHONPATH")])))
        executed = rn.execute(NOTEBOOKS / "01_quickstart.ipynb", timeout=300)
    files["01_quickstart"] = out / "01_quickstart.html"
    files["01_quickstart"].write_text(rn.to_html(executed), encoding="utf-8")
    for name in ("02_llm_drilldown", "03_compare"):
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        assert any(c.get("outputs") for c in nb.cells), f"{name} is committed without outputs"
        files[name] = out / f"{name}.html"
        files[name].write_text(rn.to_html(nb), encoding="utf-8")
    yield files


@pytest.mark.parametrize("name", list(EXPECTED))
def test_static_html_reads_offline(
    name: str, html_files: dict[str, Path], offline_page: tuple[Any, list[str]], screenshots: Path
) -> None:
    from playwright.sync_api import expect

    page, refused = offline_page
    titles, kernel_names, min_images = EXPECTED[name]
    page.set_default_timeout(15_000)
    page.goto(html_files[name].as_uri(), wait_until="load")

    views = page.locator(".nsight-magic.nsys")
    expect(views).to_have_count(len(titles))
    # the summary and the top kernels lead; the other tabs wait behind their headings: open them
    page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
    for view, title in zip(views.all(), titles, strict=True):
        expect(view).to_contain_text(title)
        expect(view.locator("h4", has_text="Timeline")).to_be_visible()
        for alt in NSIGHT_CHARTS:
            expect(view.locator(f"img[alt='{alt}']")).to_be_visible()
    first = views.first
    kernel_table = first.locator("h4:has-text('Kernels') + table")
    expect(kernel_table).to_be_visible()
    assert kernel_table.locator("tbody tr, tr:has(td)").count() >= 3
    for kernel in kernel_names:
        expect(kernel_table.locator("td", has_text=kernel).first).to_be_visible()

    # Every image decoded: PNG data URIs, nothing fetched.
    images = page.locator(".jp-OutputArea-output img")
    sizes = images.evaluate_all(
        "els => els.map(e => [e.alt, e.complete, e.naturalWidth, e.naturalHeight])"
    )
    assert len(sizes) >= min_images, sizes
    broken = [s for s in sizes if not (s[1] and s[2] > 0 and s[3] > 0)]
    assert not broken, f"images that did not decode: {broken}"

    # No fallback a reader would see instead of a finding.
    for text in ("chart omitted", "Error loading script", "Error displaying widget"):
        expect(page.get_by_text(text)).to_have_count(0)
    assert page.locator("script[src*='vega']").count() == 0
    # Nothing off the file: the page template has no CDN scripts (tools/run_notebook.py).
    assert refused == [], refused

    first.scroll_into_view_if_needed()
    first.screenshot(path=str(screenshots / f"static_{name}.png"))
    page.screenshot(path=str(screenshots / f"static_{name}_page.png"), full_page=True)


def test_static_tables_fit_a_1280px_page(
    html_files: dict[str, Path], offline_page: tuple[Any, list[str]]
) -> None:
    """At 1280 px no table of the quickstart's static page runs past its output's right edge
    (it used to cut the kernel table's last column): long kernel names wrap instead. 02 and 03
    are committed with outputs rendered before that fix, so only the page executed here."""
    page, _refused = offline_page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(html_files["01_quickstart"].as_uri(), wait_until="load")
    page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
    overflow = page.evaluate(
        """() => [...document.querySelectorAll('.nsight-magic table')].map(t => {
            const area = t.closest('.jp-OutputArea-output').getBoundingClientRect();
            const last = t.querySelector('tr').lastElementChild.getBoundingClientRect();
            const title = (t.previousElementSibling || {}).textContent || '';
            return [title.slice(0, 40), Math.round(last.right - area.right)];
        }).filter(([, over]) => over > 0)"""
    )
    assert page.locator(".nsight-magic table").count() >= 4
    assert overflow == [], f"tables past the page's edge (title, px): {overflow}"
