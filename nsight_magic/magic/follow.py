"""The profiling workers follow the notebook's imports (``session/prewarm.py``): at
``%load_ext`` in a Jupyter kernel the nsys worker starts and imports torch and what the earlier
cells imported; as each cell starts, the live workers import what it imports, beside the
notebook's own import. A Run All whose prelude imports torch and transformers then finds its
worker ready right after the setup cell (the worker's own imports under ``nsys launch``
outlasted a 7.8 s setup cell on the H200)."""

from __future__ import annotations

import contextlib
import importlib.util
from typing import Any

from ..session.manager import MANAGER


def start(shell: Any) -> None:
    """Start the nsys worker for ``shell``'s notebook and follow its cells' imports (once per
    shell: a reload of the extension keeps one hook)."""
    callbacks = shell.events.callbacks["pre_run_cell"]
    if _cell_starts not in callbacks:
        shell.events.register("pre_run_cell", _cell_starts)
    earlier = list(getattr(shell.history_manager, "input_hist_parsed", [])[1:])
    MANAGER.start_at_load(earlier, torch=_has_torch())


def _has_torch() -> bool:
    """The notebook's Python has torch: the worker (the same Python) imports it at once."""
    return importlib.util.find_spec("torch") is not None


def stop(shell: Any) -> None:
    """``%unload_ext``: imports are no longer followed."""
    with contextlib.suppress(ValueError):
        shell.events.unregister("pre_run_cell", _cell_starts)


def _cell_starts(info: Any) -> None:
    """A cell starts: what it imports, imported by the live workers meanwhile (one that fails
    there is the cell's to report when a profiled cell needs it). Never raises (IPython would
    print its traceback above the user's cell)."""
    with contextlib.suppress(Exception):
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            MANAGER.follow_imports(shell.transform_cell(info.raw_cell or ""))
