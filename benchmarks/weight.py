"""P2 notebook weight: how many bytes one displayed ``%%nsys`` result adds to a saved .ipynb.

A notebook with one cell that displays an ``NsysRun`` of the tiled report (1k / 100k / 1M kernels)
is executed for real with nbclient (widget state stored, as JupyterLab saves it) and written with
nbformat; the weight is its size minus the same notebook whose cell displays nothing. That counts
everything the result leaves in the file: the widget view and widget state, the static HTML with
its PNG charts, and the text form. Target: <= 1 MB and flat as kernels grow.

The views some runs add are weighed on the real fixtures that show them (``FIXTURES``): the Ops
tab (PyTorch op ranges), the Ranks and Processes tabs (one report of a 2-rank job, and the two
per-rank reports merged by ``nsight_magic.load_runs``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from .ingest import DATA, SIZES, build_inputs

_CELL = """
from nsight_magic.reports import open_report
from nsight_magic.results import NsysRun
run = NsysRun(open_report({path!r}), meta={{"name": "bench"}})
{show}
"""
_RANKS_CELL = """
import nsight_magic
run = nsight_magic.load_runs({paths!r})
{show}
"""
# label -> (what its view adds, the cell that shows its run, given what to show)
FIXTURES: dict[str, tuple[str, Callable[[str], str]]] = {
    "ops": ("Ops tab", lambda show: _CELL.format(path=str(DATA / "nsys_ops.sqlite"), show=show)),
    "2rank": (
        "Ranks + Processes tabs",
        lambda show: _CELL.format(path=str(DATA / "nsys_2rank.sqlite"), show=show),
    ),
    "load_runs": (
        "Ranks + Processes tabs, 2 reports merged",
        lambda show: _RANKS_CELL.format(
            paths=[str(DATA / f"nsys_2rank_r{r}.sqlite") for r in (0, 1)], show=show
        ),
    ),
}


def _saved_size(path: Path, show: str, workdir: Path) -> int:
    return _notebook_size(_CELL.format(path=str(path), show=show), f"{path.name}_{show}", workdir)


def _notebook_size(source: str, label: str, workdir: Path) -> int:
    nb = new_notebook(cells=[new_code_cell(source)])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True).execute()
    out = workdir / f"weight_{label}.ipynb"
    nbformat.write(nb, out)
    return out.stat().st_size


def run(workdir: Path | None = None, sizes: dict[str, int] | None = None) -> list[dict]:
    sizes = sizes or SIZES
    workdir = workdir or Path(tempfile.mkdtemp(prefix="nsight-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for label, paths in build_inputs(workdir, sizes).items():
        t0 = time.perf_counter()
        base = _saved_size(paths["parquet"], "None", workdir)
        full = _saved_size(paths["parquet"], "run", workdir)
        row: dict[str, Any] = {"size": label, "bytes": full - base, "s": time.perf_counter() - t0}
        rows.append(row)
        print(
            f"P2 {label:>5} kernels: one displayed NsysRun adds {row['bytes'] / 1e6:.3f} MB "
            f"to the .ipynb (target <= 1 MB)",
            flush=True,
        )
    return rows


def run_fixtures(workdir: Path | None = None, names: list[str] | None = None) -> list[dict]:
    """The same weight for the real fixtures whose views add tabs (``FIXTURES``)."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="nsight-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for label in names or list(FIXTURES):
        what, cell = FIXTURES[label]
        t0 = time.perf_counter()
        base = _notebook_size(cell("None"), f"{label}_none", workdir)
        full = _notebook_size(cell("run"), f"{label}_run", workdir)
        row: dict[str, Any] = {"size": label, "bytes": full - base, "s": time.perf_counter() - t0}
        rows.append(row)
        print(
            f"P2 {label:>9} ({what}): one displayed NsysRun adds {row['bytes'] / 1e6:.3f} MB "
            f"to the .ipynb (target <= 1 MB)",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks weight", description=__doc__)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument(
        "--fixtures", default=",".join(FIXTURES), help="subset of " + ",".join(FIXTURES)
    )
    args = ap.parse_args(argv)
    if args.sizes:
        run(args.workdir, {k: SIZES[k] for k in args.sizes.split(",")})
    if args.fixtures:
        run_fixtures(args.workdir, args.fixtures.split(","))
