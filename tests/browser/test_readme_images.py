"""What the README shows, taken from the real front end: the saved H100 prefill run of notebook
02 and the picker's ncu child of it, opened with ``nsight_magic.load_run`` in a notebook Run
All'd in JupyterLab. Checks the report link of each view (Jupyter serves the very file to
download) and writes the screenshots of README.md (the picker) and docs/ (the roofline, the Idle
tab).

Screenshots go to build/screenshots/readme/; ``NSIGHT_MAGIC_README_IMAGES=docs/images`` (what
``make readme-images`` sets) writes them where the README takes them from."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, failed
from .lab import CELL_OUTPUT, Lab, Ran, open_tab, run_all

pytestmark = pytest.mark.browser

NOTEBOOK = "notebooks/readme_views.ipynb"
PREFILL = sorted((REPO / "notebooks" / "runs" / "02_llm_drilldown").glob("*-prefill"))
VIEW = "Nsight Systems: prefill"
MAX_BYTES = 200_000  # a README image stays small


def _cells(prefill: Path) -> list[str]:
    rel = prefill.relative_to(REPO / "notebooks").as_posix()
    (child,) = (prefill / "ncu").iterdir()
    return [
        f"import nsight_magic\n\nrun = nsight_magic.load_run({rel!r})\nrun",
        f"kernel = nsight_magic.load_run({rel + '/ncu/' + child.name!r})\nkernel",
    ]


@pytest.fixture(scope="module")
def ran(lab: Lab, browser: Any, screenshots: Path) -> Iterator[Ran]:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    if not PREFILL:
        pytest.skip("no saved prefill run in notebooks/runs")
    cells = _cells(PREFILL[-1])
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, lab.root / NOTEBOOK)
    with run_all(lab, browser, screenshots, NOTEBOOK, VIEW, len(cells)) as r:
        yield r


@pytest.fixture(scope="module")
def images(screenshots: Path) -> list[Path]:
    out = [screenshots / "readme"]
    if os.environ.get("NSIGHT_MAGIC_README_IMAGES"):
        out.append(REPO / os.environ["NSIGHT_MAGIC_README_IMAGES"])
    for folder in out:
        folder.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(autouse=True)
def screenshot_on_failure(request: pytest.FixtureRequest, ran: Ran, screenshots: Path):
    yield
    if failed(request):
        ran.page.screenshot(path=str(screenshots / f"readme_failure_{request.node.name}.png"))


def _save(locator: Any, name: str, images: list[Path]) -> None:
    for folder in images:
        locator.screenshot(path=str(folder / name))
        assert (folder / name).stat().st_size < MAX_BYTES, f"{name} is too large for the README"


@pytest.mark.parametrize(
    ("view", "report"),
    [(VIEW, "report.nsys-rep"), ("Nsight Compute: prefill:", "report.ncu-rep")],
)
def test_view_links_the_report_jupyter_serves(ran: Ran, lab: Lab, view: str, report: str) -> None:
    """The link under each view downloads the run's own report (Jupyter resolves the relative
    link against the notebook's folder), and the GUI command names the same file."""
    from playwright.sync_api import expect

    output = ran.page.locator(CELL_OUTPUT).filter(has_text=view)
    link = output.locator(f"a[download='{report}']")
    expect(link).to_have_count(1)
    href = link.get_attribute("href") or ""
    assert "/files/" in href and href.split("?")[0].endswith(report), href
    got = ran.page.request.get(href)
    assert got.ok, (href, got.status)
    rel = href.split("/files/", 1)[1].split("?")[0]
    assert got.body() == (lab.root / rel).read_bytes()  # the very file, whole
    tool = "nsys-ui" if report.endswith("nsys-rep") else "ncu-ui"
    expect(output.locator("code", has_text=f"{tool} runs/02_llm_drilldown/")).to_have_count(1)


def test_readme_picker_image(ran: Ran, images: list[Path]) -> None:
    from playwright.sync_api import expect

    picker = open_tab(ran.nsys, "Profile a kernel")
    expect(picker.locator(".widget-select select")).to_be_visible()
    ran.nsys.scroll_into_view_if_needed()
    _save(ran.nsys, "picker.png", images)


def test_readme_roofline_image(ran: Ran, images: list[Path]) -> None:
    from playwright.sync_api import expect

    ncu = ran.page.locator(CELL_OUTPUT).filter(has_text="Nsight Compute: prefill:")
    expect(ncu).to_have_count(1)
    ncu.locator(".lm-TabBar-tab", has_text="Roofline").first.click()
    roofline = ncu.locator(".vega-embed:visible").first
    expect(roofline.locator("svg.marks")).to_be_visible(timeout=60_000)
    expect(roofline).to_contain_text("nvjet_sm90")
    ncu.scroll_into_view_if_needed()
    _save(ncu, "roofline.png", images)


def test_readme_idle_image(ran: Ran, images: list[Path]) -> None:
    """The Idle tab (computed when first opened): its one-sentence causes are on screen."""
    from playwright.sync_api import expect

    idle = open_tab(ran.nsys, "Idle")
    expect(idle).to_contain_text("of idle time", timeout=60_000)
    ran.nsys.scroll_into_view_if_needed()
    # the view is as high as its tallest tab: cut the picture below the Idle page's last text
    box = ran.nsys.bounding_box()
    bottom = idle.evaluate(
        "el => Math.max(...[...el.querySelectorAll('table, li, p, h3, h4, b')]"
        ".map(e => e.getBoundingClientRect().bottom + window.scrollY))"
    )
    clip = {"x": box["x"], "y": box["y"], "width": box["width"],
            "height": bottom - box["y"] + 12}  # fmt: skip
    for folder in images:
        ran.page.screenshot(path=str(folder / "idle.png"), clip=clip, full_page=True)
        assert (folder / "idle.png").stat().st_size < MAX_BYTES
