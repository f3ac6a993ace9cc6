"""A result's live view first, its static copy after: ``%config NsightMagic.static_view =
"background"``. The static copy (tables and PNG charts, what a saved notebook shows without a
kernel) costs about a second per few charts (vl-convert); here it is built in a thread once the
widget is on screen and put into the same output with ``update_display``."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

_STATIC_BUILDS: list[threading.Thread] = []


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
