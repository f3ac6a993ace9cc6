"""P2 notebook weight: how many bytes one displayed ``%%nsys`` result adds to a saved .ipynb.

A notebook with one cell that displays an ``NsysRun`` of the tiled report (1k / 100k / 1M kernels)
is executed for real with nbclient (widget state stored, as JupyterLab saves it) and written with
nbformat; the weight is its size minus the same notebook whose cell displays nothing. That counts
everything the result leaves in the file: the widget view and widget state, the static HTML with
its PNG charts, and the text form. Target: <= 1 MB and flat as kernels grow.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from .ingest import SIZES, build_inputs

_CELL = """
from nsight_magic.reports import open_report
from nsight_magic.results import NsysRun
run = NsysRun(open_report({path!r}), meta={{"name": "bench"}})
{show}
"""


def _saved_size(path: Path, show: str, workdir: Path) -> int:
    nb = new_notebook(cells=[new_code_cell(_CELL.format(path=str(path), show=show))])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True).execute()
    out = workdir / f"weight_{path.name}_{'run' if show else 'none'}.ipynb"
    nbformat.write(nb, out)
    return out.stat().st_size


def run(workdir: Path | None = None, sizes: dict[str, int] | None = None) -> list[dict]:
    sizes = sizes or SIZES
    workdir = workdir or Path(tempfile.mkdtemp(prefix="nsight-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, paths in build_inputs(workdir, sizes).items():
        t0 = time.perf_counter()
        base = _saved_size(paths["parquet"], "None", workdir)
        full = _saved_size(paths["parquet"], "run", workdir)
        row = {"size": label, "bytes": full - base, "s": time.perf_counter() - t0}
        rows.append(row)
        print(
            f"P2 {label:>5} kernels: one displayed NsysRun adds {row['bytes'] / 1e6:.3f} MB "
            f"to the .ipynb (target <= 1 MB)",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks weight", description=__doc__)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--sizes", default=",".join(SIZES))
    args = ap.parse_args(argv)
    run(args.workdir, {k: SIZES[k] for k in args.sizes.split(",")})
