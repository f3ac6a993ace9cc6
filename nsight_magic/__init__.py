"""nsight_magic: profile notebook cells with Nsight Systems / Nsight Compute.

``%load_ext nsight_magic`` registers ``%%nsight_nsys``, ``%%nsight_ncu`` (and ``%%nsys``,
``%%ncu`` where no other extension holds them), ``%%nsight_setup`` and ``%nsight_session``.
Everything the magics do is callable from Python: :func:`open_report`, :func:`load_run`,
:func:`compare`, :func:`last_run`, and the MFU helpers (``nsight_magic.transformer_flops``,
``nsight_magic.training_step_flops`` ...). Imports stay light: pandas, IPython and ipywidgets
load only when a function needs them (the profiling worker imports this package too).
"""

from __future__ import annotations

import importlib
from typing import Any

from .package_info import __version__

# Public names served lazily: name -> (module, attribute).
_LAZY = {
    "transformer_flops": ("nsight_magic.analysis.mfu", "transformer_flops"),
    # a training step's FLOPs by phase (forward, backward = 2x forward), keyed for mfu()
    "training_step_flops": ("nsight_magic.analysis.model_flops", "training_step_flops"),
    "model_mfu": ("nsight_magic.analysis.mfu", "model_mfu"),
    "op_mfu": ("nsight_magic.analysis.mfu", "op_mfu"),
    "kernel_utilisation": ("nsight_magic.analysis.mfu", "kernel_utilisation"),
    "range_utilisation": ("nsight_magic.analysis.range_mfu", "range_utilisation"),
    "set_peak": ("nsight_magic.analysis.gpu_peaks", "set_peak"),
    "lookup_peak": ("nsight_magic.analysis.gpu_peaks", "lookup_peak"),
    "NsysRun": ("nsight_magic.results", "NsysRun"),
    "NcuRun": ("nsight_magic.results", "NcuRun"),
    # one displayable NsysRun over several per-rank reports (or one report of every rank)
    "load_runs": ("nsight_magic.results.loading", "load_runs"),
    # a copy of a run folder (or a sweep folder, with its one-page summary) with paths
    # relative and user/host names redacted
    "share": ("nsight_magic.results.sharing", "share"),
    # %%nsys --sweep from Python: one profiled run per configuration -> SweepRun
    "sweep": ("nsight_magic.magic.sweep_function", "sweep"),
    "SweepRun": ("nsight_magic.results.sweep_run", "SweepRun"),
    # the saved runs under a folder (default ./nsight-runs), newest first: a DataFrame
    "list_runs": ("nsight_magic.run_folders.runs", "list_runs"),
}

__all__ = [
    "__version__",
    "compare",
    "last_run",
    "load_ipython_extension",
    "examples",
    "load_run",
    "open_report",
    *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    # ``nsight_magic.examples.llm()`` in one line, without importing pandas at package import
    if name == "examples":
        return importlib.import_module(".examples", __name__)
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'nsight_magic' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext nsight_magic``."""
    from .magic import follow
    from .magic.magics import register
    from .results.base import in_kernel
    from .views import render_pool

    # Nothing global changes: the charts we return carry their own PNG (views.static.with_png);
    # the user's altair renderer and their own charts stay as they were.
    magics = register(ipython)
    if in_kernel():  # the static copies' chart renderers warm up now, not in the first result
        render_pool.start()
        if magics.prewarm:  # the nsys worker starts, and imports what the notebook imports
            follow.start(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext nsight_magic``: stop the profiling workers."""
    from .magic import follow
    from .session.manager import MANAGER
    from .views import render_pool

    follow.stop(ipython)
    MANAGER.stop()
    render_pool.stop()


def open_report(path: Any) -> Any:
    """Open an nsys export (.sqlite, parquet dir, or .nsys-rep when nsys is installed) or a
    ``.ncu-rep``; returns an ``NsysReport`` or ``NcuReport``. Raises ``ReportError`` subclasses."""
    from .reports import open_report as _open

    return _open(path)


def load_run(path: Any, *, trust: bool = False) -> Any:
    """Rebuild a saved run (``NsysRun``/``NcuRun``) from its run directory, offline; its kernel
    picker re-runs the saved cell (cold) when asked, under this session's interpreter and
    environment (``trust=True``: the folder's own, for a folder you trust)."""
    from .results import load_run as _load
    from .session.manager import MANAGER

    return _load(path, drill_runner=MANAGER.drills, trust=trust)


def last_run() -> Any:
    """The result of the last ``%%nsys``/``%%ncu`` cell, also when it failed with a partial
    report (None before the first)."""
    from .magic.magics import last_run as _last

    return _last()


def compare(run_a: Any, run_b: Any, **kwargs: Any) -> Any:
    """Kernel and NVTX deltas between two runs or reports (``nsight_magic.results.comparison``)."""
    from .results.comparison import compare as _compare

    return _compare(run_a, run_b, **kwargs)
