"""Execute a notebook with nbclient and write it back with outputs plus a static HTML copy.

    python tools/run_notebook.py notebooks/01_quickstart.ipynb --html build/ [--inplace]

The executed .ipynb keeps the widget state (so JupyterLab shows live widgets after reopening);
the HTML copy drops the widget views so every output shows its static form (tables, PNG charts),
which reads with no kernel, no JavaScript and no network: nbconvert would otherwise pick the
widget view, which needs the widget manager from a CDN, and its ``lab`` template loads
require.js, MathJax and mermaid from CDNs, which the page's template here leaves out (the page
has no math and no diagrams for them to draw).

The kernel talks to this process over IPC sockets, not TCP: ipykernel warns that TCP runs
unencrypted, and a local run has no need for it.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from traitlets.config import Config

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# nbconvert's lab page less its scripts: require.js, MathJax, mermaid (CDNs) and the widget
# manager's loader (no widget views are left to load)
STATIC_PAGE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def execute(path: Path, timeout: int = 900, kernel: str = "python3") -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    # IPC sockets by an absolute path: the kernel runs in the notebook's folder, so a relative
    # one (jupyter_client's default) would name another file there
    sockets = tempfile.mkdtemp(prefix="nsight-magic-kernel-")
    config = Config()
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = f"{sockets}/ipc"
    client = NotebookClient(
        nb,
        config=config,  # the kernel manager nbclient makes (and shuts down) reads it
        timeout=timeout,
        kernel_name=kernel,
        store_widget_state=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
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
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"static_page.html.j2": STATIC_PAGE})],
        template_file="static_page.html.j2",
    )
    body, _ = exporter.from_notebook_node(static_copy(nb))
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
