"""Open in the Nsight GUIs: every nsys/ncu view links its report (a relative link a notebook's
output resolves against the notebook's folder) and names the exact nsys-ui / ncu-ui command;
``run.open_in_gui()`` says plainly what is missing here (no GUI on this machine, no display).
On the saved H200 runs of notebook 02 and on a report opened by path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import nsight_magic
from nsight_magic.errors import ToolNotFoundError
from nsight_magic.reports import open_report
from nsight_magic.results import NcuRun, NsysRun

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(REPO)  # the kernel's cwd is the notebook's folder; here the repo's
    monkeypatch.setenv("PATH", "/nonexistent")  # no nsys-ui / ncu-ui on this machine
    return REPO


def _prefill() -> Path:
    found = sorted((REPO / "notebooks" / "runs" / "02_llm_drilldown").glob("*-prefill"))
    if not found:
        pytest.skip("no saved prefill run")
    return found[-1].relative_to(REPO)


def test_nsys_view_links_its_report_and_names_the_command(in_repo: Path) -> None:
    run = nsight_magic.load_run(_prefill())
    assert run.report_file == in_repo / _prefill() / "report.nsys-rep"  # load_run makes it absolute
    assert run.gui_command() == ["nsys-ui", f"{_prefill()}/report.nsys-rep"]
    page = run.to_html()
    link = re.search(r'<a href="([^"]+)" download="report.nsys-rep">', page)
    assert link and link[1] == f"{_prefill()}/report.nsys-rep"  # relative: served by Jupyter
    assert f"<code>nsys-ui {_prefill()}/report.nsys-rep</code>" in page
    assert (in_repo / link[1]).stat().st_size > 0  # the link reaches the real file


def test_ncu_child_links_its_ncu_rep(in_repo: Path) -> None:
    (child_dir,) = (_prefill() / "ncu").iterdir()
    child = nsight_magic.load_run(child_dir)
    assert isinstance(child, NcuRun)
    assert child.gui_command() == ["ncu-ui", f"{child_dir}/report.ncu-rep"]
    assert 'download="report.ncu-rep">' in child.to_html()
    assert "open it in Nsight Compute" in child.to_html()


def test_live_view_carries_the_link_as_a_notebook_output(in_repo: Path) -> None:
    """In the widget the link sits in an Output widget, whose HTML Jupyter renders as an output
    (relative links resolved against the notebook), not in an HTML widget."""
    view = nsight_magic.load_run(_prefill()).widget()
    (output,) = [c for c in view.children if type(c).__name__ == "Output"]
    (shown,) = output.outputs
    assert 'download="report.nsys-rep"' in shown["data"]["text/html"]


def test_report_opened_by_path_finds_the_rep_beside_its_export(in_repo: Path) -> None:
    run = NsysRun(open_report(DATA / "nsys_small.sqlite"))
    assert run.report_file == DATA / "nsys_small.nsys-rep"
    assert run.gui_command() == ["nsys-ui", "tests/data/nsys_small.nsys-rep"]


def test_export_alone_says_why_there_is_no_gui_link(in_repo: Path) -> None:
    run = nsight_magic.examples.llm()  # a bundled .sqlite, no .nsys-rep
    assert run.report_file is None
    assert "No .nsys-rep here for nsys-ui (it cannot open an export)." in run.to_html()
    with pytest.raises(ToolNotFoundError, match=r"cannot open \.sqlite or parquet exports"):
        run.open_in_gui()


def test_open_in_gui_without_the_gui_says_how_to_get_it(in_repo: Path) -> None:
    run = nsight_magic.load_run(_prefill())
    with pytest.raises(ToolNotFoundError) as err:
        run.open_in_gui()
    message = str(err.value)
    assert "nsys-ui (the Nsight Systems GUI) is not installed here" in message
    assert "https://developer.nvidia.com/nsight-systems" in message
    assert "run `nsys-ui report.nsys-rep`" in message
