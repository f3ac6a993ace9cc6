"""The profiling workers follow the notebook's imports (``session/runs/prewarm.py``): at
``%load_ext`` in a Jupyter kernel the nsys worker starts and imports torch and what the earlier
cells imported; as each cell starts, the live workers import what it imports, beside the
notebook's own import. A Run All whose prelude imports torch and transformers then finds its
worker ready right after the setup cell (the worker's own imports under ``nsys launch`` outlast
a setup cell: benchmarks/README.md, design measurements). As each cell ends, what it imported
that its text does not show (a lazy package's submodules: ``sys.modules`` grew) is followed too."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from typing import Any

from ..session.manager import MANAGER


def start(shell: Any) -> None:
    """Start the nsys worker for ``shell``'s notebook and follow its cells' imports (once per
    shell: a reload of the extension keeps one hook)."""
    _seen.update(sys.modules)
    for event, hook in (("pre_run_cell", _cell_starts), ("post_run_cell", _cell_ends)):
        if hook not in shell.events.callbacks[event]:
            shell.events.register(event, hook)
    earlier = list(getattr(shell.history_manager, "input_hist_parsed", [])[1:])
    MANAGER.start_at_load(earlier, torch=_has_torch())
    MANAGER.follow_modules(list(sys.modules))  # what those cells' packages imported lazily


def _has_torch() -> bool:
    """The notebook's Python has torch: the worker (the same Python) imports it at once."""
    return importlib.util.find_spec("torch") is not None


def stop(shell: Any) -> None:
    """``%unload_ext``: imports are no longer followed."""
    for event, hook in (("pre_run_cell", _cell_starts), ("post_run_cell", _cell_ends)):
        with contextlib.suppress(ValueError):
            shell.events.unregister(event, hook)


def _cell_starts(info: Any) -> None:
    """A cell starts: what it imports, imported by the live workers meanwhile (one that fails
    there is the cell's to report when a profiled cell needs it). Never raises (IPython would
    print its traceback above the user's cell)."""
    with contextlib.suppress(Exception):
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            MANAGER.follow_imports(shell.transform_cell(info.raw_cell or ""))


# the notebook's modules when last looked at (``_cell_ends``)
_seen: set[str] = set()


def _cell_ends(result: Any) -> None:
    """A cell ended: the modules it imported (in the order it did), for the live workers to
    follow. Never raises."""
    with contextlib.suppress(Exception):
        new = [name for name in list(sys.modules) if name not in _seen]
        _seen.update(new)
        if new:
            MANAGER.follow_modules(new)
