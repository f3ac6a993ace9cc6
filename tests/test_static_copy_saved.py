"""A notebook executed headless (nbclient, as ``make demo`` and the GPU acceptance harness run
them) saves every result's static copy, the last cell's included: tables and its charts as PNGs,
rendered in helper processes of the real kernel (``views.render_pool``), none left as a
placeholder; and the helpers end with the kernel (issue 22)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
CELL = """
from nsight_magic.reports import open_report
from nsight_magic.results import NsysRun
NsysRun(open_report({path!r}), meta={{"name": {name!r}}})
"""
HELPERS = """
from nsight_magic.views import render_pool
print("helpers", [helper.proc.pid for helper in render_pool._helpers])
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_every_static_copy_is_saved_and_the_helpers_end(data_dir: Path, tmp_path: Path) -> None:
    names = ("nsys_small", "nsys_idle_decode")
    sources = [CELL.format(path=str(data_dir / f"{n}.sqlite"), name=n) for n in names]
    nb = new_notebook(cells=[new_code_cell(s) for s in [*sources, HELPERS, sources[0]]])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    nbformat.write(nb, tmp_path / "saved.ipynb")
    saved = nbformat.read(tmp_path / "saved.ipynb", as_version=4)

    shown = [saved.cells[i] for i in (0, 1, 3)]  # the last cell shows a result too
    for cell in shown:
        (output,) = cell.outputs
        page = output["data"]["text/html"]
        assert page.count('src="data:image/png;base64,') == 3, page[:300]
        assert "nsight-magic-chart-" not in page and "chart omitted" not in page
        assert "<table" in page and "application/vnd.jupyter.widget-view+json" in output["data"]

    (printed,) = saved.cells[2].outputs
    pids = [int(p) for p in re.findall(r"\d+", printed["text"])]
    assert pids, "the kernel rendered in helper processes"
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids), "a render helper outlived its kernel"
