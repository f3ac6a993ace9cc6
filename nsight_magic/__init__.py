"""nsight_magic: profile notebook cells with Nsight Systems / Nsight Compute.

``%load_ext nsight_magic`` registers ``%%nsys``, ``%%ncu`` and ``%%nsight_setup``.
Everything the magics do is callable from Python: :func:`open_report`, :func:`load_run`,
:func:`compare`. Imports stay light: IPython and ipywidgets load only when needed.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "__version__", "compare", "examples", "load_ipython_extension", "load_run", "open_report",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    # ``nsight_magic.examples.llm()`` in one line, without importing pandas at package import.
    if name == "examples":
        import importlib

        return importlib.import_module(".examples", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext nsight_magic``."""
    from .magics import register
    from .views.static import enable_static_charts

    register(ipython)
    enable_static_charts()  # charts keep a PNG, so saved notebooks show them anywhere


def open_report(path: Any) -> Any:
    """Open an nsys export (.sqlite, parquet dir, or .nsys-rep when nsys is installed) or a
    ``.ncu-rep``; returns an ``NsysReport`` or ``NcuReport``. Raises ``ReportError`` subclasses."""
    from .reports import open_report as _open

    return _open(path)


def load_run(path: Any) -> Any:
    """Rebuild a saved run (``NsysRun``/``NcuRun``) from its run directory, offline."""
    from .runs import load_run as _load

    return _load(path)


def compare(run_a: Any, run_b: Any, **kwargs: Any) -> Any:
    """Kernel and NVTX deltas between two runs or reports (``nsight_magic.results.comparison``)."""
    from .results.comparison import compare as _compare

    return _compare(run_a, run_b, **kwargs)
