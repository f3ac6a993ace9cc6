"""Execute a notebook with nbclient and write it back with outputs plus a static HTML copy.

    python tools/run_notebook.py notebooks/01_quickstart.ipynb --html build/ [--inplace]

The executed .ipynb keeps the widget state (so JupyterLab shows live widgets after reopening);
the HTML copy drops the widget views so every output shows its static form (tables, PNG charts),
which reads with no kernel, no JavaScript and no network (nbconvert would otherwise pick the
widget view, which needs the widget manager from a CDN).
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def execute(path: Path, timeout: int = 900, kernel: str = "python3") -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel,
        store_widget_state=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    return nb


def static_copy(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with widget views removed, so outputs fall back to text/html / image/png."""
    out = copy.deepcopy(nb)
    out.metadata.pop("widgets", None)
    for cell in out.cells:
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(WIDGET_VIEW, None)
    return out


def to_html(nb: nbformat.NotebookNode) -> str:
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(static_copy(nb))
    return body


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook", type=Path)
    ap.add_argument("--html", type=Path, help="folder for the static HTML copy")
    ap.add_argument("--inplace", action="store_true", help="write outputs back into the notebook")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = ap.parse_args()

    t0 = time.perf_counter()
    nb = execute(args.notebook, timeout=args.timeout)
    print(f"executed {args.notebook} in {time.perf_counter() - t0:.1f} s")
    if args.inplace:
        nbformat.write(nb, args.notebook)
        print(f"wrote outputs into {args.notebook}")
    if args.html:
        args.html.mkdir(parents=True, exist_ok=True)
        target = args.html / (args.notebook.stem + ".html")
        target.write_text(to_html(nb), encoding="utf-8")
        print(f"wrote {target}")


if __name__ == "__main__":
    main()
