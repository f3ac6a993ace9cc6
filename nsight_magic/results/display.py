"""A result's live view first, its static copy after (``%config NsightMagic.static_view``:
"auto", the default, does so in notebook editors; "background" always; "inline" never). The
static copy (tables and PNG charts, what a saved notebook shows without a kernel) is built in a
thread once the widget is on screen and put into the same output with ``update_display``.

Why "auto" asks the frontend: a notebook editor (JupyterLab, Notebook 7) applies an output's
later update and saves it; a headless runner (nbclient, ``nbconvert --execute``, papermill)
keeps only what a cell shows while it runs, so the last cell's static copy would be lost
there. Editors name the cell in the execute request's metadata (``cellId``); headless runners
send none."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

_STATIC_BUILDS: list[threading.Thread] = []


def static_later(mode: str) -> bool:
    """Whether a result shows its widget first and its static copy after, for ``mode``
    (``NsightMagic.static_view``: "auto", "inline" or "background")."""
    return mode == "background" or (mode == "auto" and notebook_editor())


def notebook_editor() -> bool:
    """Whether the running cell was sent by a notebook editor: its execute request names the
    cell (``cellId``, as JupyterLab and Notebook 7 send); False outside a kernel and for
    requests without it (nbclient, papermill, a console)."""
    from IPython import get_ipython

    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    try:
        get_parent = getattr(kernel, "get_parent", None)  # ipykernel >= 6
        parent = (
            get_parent("shell") if callable(get_parent) else getattr(shell, "parent_header", None)
        )
    except Exception:
        return False
    metadata = parent.get("metadata") if isinstance(parent, dict) else None
    return isinstance(metadata, dict) and bool(metadata.get("cellId"))


def show_live_first(run: Any) -> None:
    """The result's widget now; its static copy built in a thread and put into the same output
    (``update_display``). The next cell waits for it (``_finish_static_builds``), so a notebook
    run top to bottom saves every static copy."""
    from IPython import get_ipython
    from IPython.display import display, update_display

    first, rest = run.live_bundle()
    handle = display(first, raw=True, display_id=True)

    def build() -> None:
        with contextlib.suppress(Exception):  # the placeholder line then stays and says why
            update_display(rest(), raw=True, display_id=handle.display_id)

    thread = threading.Thread(target=build, name="nsight_magic static view", daemon=True)
    thread.start()
    _STATIC_BUILDS.append(thread)
    shell = get_ipython()
    if shell is not None and _finish_static_builds not in shell.events.callbacks["pre_run_cell"]:
        shell.events.register("pre_run_cell", _finish_static_builds)


def _finish_static_builds(*_: Any) -> None:
    while _STATIC_BUILDS:
        _STATIC_BUILDS.pop().join(120)
