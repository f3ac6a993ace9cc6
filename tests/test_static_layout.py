"""The static copy of a view (what a saved notebook, GitHub and the demo page show) leads with
its summary and top kernels; the other tabs wait behind headings (``<details>``, no JavaScript),
and the report's GUI line, or the note that there is none, closes the view instead of opening
it. On the bundled real runs."""

from __future__ import annotations

import re

import nsight_magic

GUI_NOTE = "No .nsys-rep here for nsys-ui (it cannot open an export)."


def test_nsys_view_leads_with_summary_and_kernels() -> None:
    page = nsight_magic.examples.llm().to_html()
    header = page.index("Nsight Systems: llm prefill")
    kernels = page.index(">Kernels (by total GPU time)</h4>")
    first_fold = page.index("<details")
    assert header < kernels < first_fold
    assert "<details" not in page[:kernels]
    # every other tab is folded, by its heading
    folded = re.findall(r"<details[^>]*><summary[^>]*><h4[^>]*>([^<]+)</h4></summary>", page)
    assert folded[:5] == [
        "NVTX ranges (GPU-projected)",
        "Timeline",
        "Memory copies",
        "Gaps",
        "Idle: why the GPU idled",
    ]
    # the note that an export has no GUI report closes the view
    assert page.count(GUI_NOTE) == 1
    assert page.index(GUI_NOTE) > page.rindex("</details>")
    assert "<script" not in page


def test_ncu_view_ends_with_its_gui_line() -> None:
    page = nsight_magic.examples.llm_kernel().to_html()
    advice = page.index("Advice (ncu rules")
    assert page.index("Nsight Compute:") < advice
    note = "No .ncu-rep here for ncu-ui (it cannot open an export)."  # an example: no report
    assert page.count(note) == 1
    assert page.index(note) > page.index("HFU / MFU") > advice


def test_the_html_copy_loads_nothing_and_runs_no_script() -> None:
    """tools/run_notebook.py's page (make demo's build/01_quickstart.html): nbconvert's lab page
    less require.js, MathJax and mermaid from CDNs, so "no JavaScript, no network" holds."""
    import importlib.util
    from pathlib import Path

    import nbformat

    repo = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("run_notebook", repo / "tools/run_notebook.py")
    assert spec is not None and spec.loader is not None
    run_notebook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_notebook)
    notebook = nbformat.read(repo / "notebooks" / "03_compare.ipynb", as_version=4)
    page = run_notebook.to_html(notebook)
    assert "<script" not in page
    assert not re.search(r"src=\"https?://|<link[^>]*href=\"https?://", page)  # nothing fetched
    assert "nsight-magic" in page and "<img" in page  # the static copies are there
