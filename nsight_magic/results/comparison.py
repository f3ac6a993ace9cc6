"""``compare(a, b)``: what changed between two nsys runs — per kernel name (instances and total
GPU time, a vs b) and per NVTX range (GPU-projected time). Inputs are ``NsysRun``s,
``NsysReport``s, paths of nsys exports or of run folders; the result shows itself as a table +
chart."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import machine_state
from ..analysis.compare import kernel_deltas, memory_deltas, nvtx_deltas
from ..analysis.verdict import summary_line
from ..errors import BadArgumentError
from ..reports import open_report
from ..reports.paths import is_parquet_export
from ..run_folders.ownership import expand
from ..run_folders.run_dir import RunDir
from ..views import charts
from ..views.compare_view import compare_static_html, compare_widget
from ..vocabulary.nvtx_names import statement_texts
from .base import WIDGET_MIME, in_kernel
from .frames import nvtx_label
from .memory_frames import report_memory_summary
from .nsys_run import NsysRun
from .run_loading import load_one


def empty_summary() -> pd.DataFrame:
    """A kernel summary without kernels (a ``Comparison`` built from frames alone)."""
    return pd.DataFrame(columns=["name", "instances", "total_ns", "std_ns"])


def _as_run(obj: Any) -> Any:
    """A run folder's path as its run (``load_run`` reads it: its report, and its own frames:
    a ``--repeat`` run's statistics, its memory), as ``nsight-magic compare`` reads it; any
    other argument as it is (a report path, a parquet export folder: ``open_report``'s). A
    sweep folder holds several runs: ``BadArgumentError`` naming what to compare instead."""
    if not isinstance(obj, (str, os.PathLike)) or isinstance(os.fspath(obj), bytes):
        return obj
    path = expand(os.fspath(obj))
    if not path.is_dir() or is_parquet_export(path):
        return obj
    folder = RunDir(path)
    if folder.holds_sweep():
        raise BadArgumentError(
            f"compare(): {path} is a sweep folder (one run per configuration); compare two of "
            f"its configurations: nsight_magic.load_run({str(path)!r}).compare(a, b)."
        )
    if folder.meta.exists() or folder.holds_report():
        return load_one(path.absolute())
    return obj


def _as_report(obj: Any) -> Any:
    if isinstance(obj, NsysRun):
        return obj.report
    if isinstance(obj, (str, Path)):
        return open_report(obj)
    if hasattr(obj, "kernel_summary") and hasattr(obj, "nvtx_gpu_projection"):
        return obj
    if type(obj).__name__ == "NcuRun" or hasattr(obj, "roofline"):
        raise BadArgumentError(
            "compare() compares two nsys runs (kernel and NVTX times); an ncu run holds "
            "metrics of a few launches. Pass two NsysRuns, NsysReports or nsys report paths."
        )
    raise BadArgumentError(
        f"compare() takes NsysRun, NsysReport or a report path, not {type(obj).__name__}."
    )


def _label(obj: Any, default: str) -> str:
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name:
        return name
    if isinstance(obj, (str, Path)):
        return Path(obj).name
    path = getattr(obj, "path", None)
    return Path(path).name if path else default


class Comparison:
    """``kernels`` and ``nvtx`` delta frames; ``chart()``, ``to_html()``, and a rich display.

    ``kernels``: ``name, short_name, instances_a, instances_b, total_ns_a, total_ns_b,
    delta_ns`` (b - a, ns), ``ratio`` (b / a), ``ratio_lo, ratio_hi`` (its 95% interval),
    ``interval_from``, ``change`` (faster, slower, same, new, gone, unsure: within noise or not,
    ``analysis.verdict``); ``verdict`` / ``summary()`` the whole comparison in one line;
    ``nvtx``: ``domain, range`` and the same numbers of GPU-projected time, ``line_a, line_b,
    moved`` (the cell's statements are matched by their text: ``analysis.compare.nvtx_deltas``),
    + ``label`` (``L3->L4: ...`` for a statement that moved); largest absolute change first.
    ``memory``: peak device memory per GPU (runs captured with ``%%nsys --memory``; empty
    otherwise): ``device_id, a_peak_bytes, b_peak_bytes, peak_change_bytes`` (b - a), ``ratio,
    statement_a, statement_b`` (``analysis.compare.memory_deltas``).
    """

    def __init__(
        self,
        kernels: pd.DataFrame,
        nvtx: pd.DataFrame,
        label_a: str,
        label_b: str,
        memory: pd.DataFrame | None = None,
        summaries: tuple[pd.DataFrame, pd.DataFrame] | None = None,
        notes: Sequence[str] = (),
    ):
        # What the views show next to the numbers: "domain:range" labels (kernel_deltas gives
        # short kernel names already).
        self.kernels = kernels
        self.nvtx = nvtx.assign(label=_moved_labels(nvtx, nvtx_label(nvtx)))
        self.label_a = label_a
        self.label_b = label_b
        empty = pd.DataFrame(columns=["device_id"])
        self.memory = memory if memory is not None else memory_deltas(empty, empty)
        self._html: str | None = None
        self.verdict = summary_line(
            self.kernels, *(summaries or (empty_summary(), empty_summary()))
        )
        # the two runs' GPUs: another GPU, other clocks or power (analysis.machine_state)
        self.notes = list(notes)

    def summary(self) -> str:
        """The comparison in one line: ``b: GPU time 0.76x (0.74-0.78), 3 kernels slower beyond
        noise`` (``analysis.verdict``); then, when the runs' GPUs differed, how (``notes``)."""
        line = self.verdict.line(self.label_b)
        return "; ".join([line, *self.notes]) if self.notes else line

    def chart(self, n: int = 20) -> Any:
        """Bars of the ``n`` largest kernel time changes (b - a), an altair chart."""
        return charts.delta_chart(self.kernels, "name", n)

    def nvtx_chart(self, n: int = 20) -> Any:
        """Bars of the ``n`` largest NVTX range GPU-time changes (b - a), an altair chart."""
        return charts.delta_chart(self.nvtx, "label", n)

    def to_html(self) -> str:
        """The static HTML form (tables and chart images), built once."""
        if self._html is None:
            self._html = compare_static_html(self)
        return self._html

    def widget(self) -> Any:
        """The live view (ipywidgets)."""
        return compare_widget(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kw: Any) -> dict:
        data: dict[str, Any] = {"text/plain": repr(self), "text/html": self.to_html()}
        if in_kernel():
            with contextlib.suppress(Exception):  # a broken widget must not hide the findings
                data[WIDGET_MIME] = self.widget()._repr_mimebundle_()[WIDGET_MIME]
        return data

    def __repr__(self) -> str:
        total = int(self.kernels["delta_ns"].sum()) if len(self.kernels) else 0
        return (
            f"<Comparison {self.label_a!r} -> {self.label_b!r}: {len(self.kernels)} kernel names,"
            f" total GPU time delta {total:+,} ns; {self.summary()}>"
        )


def _moved_labels(nvtx: pd.DataFrame, labels: pd.Series) -> pd.Series:
    """``nsight_magic:L3->L4: x = f(x)`` for a statement that moved (a's line, then b's)."""
    if "moved" not in nvtx.columns or not nvtx["moved"].any():
        return labels
    moved = nvtx["moved"].to_numpy(bool)
    rows = nvtx[moved]
    text = statement_texts(rows["range"])
    new = rows["domain"] + ":L" + rows["line_a"].astype(str) + "->L" + rows["line_b"].astype(str)
    return labels.mask(moved, new + ": " + text)


def compare(run_a: Any, run_b: Any, label_a: str | None = None, label_b: str | None = None):
    """Kernel and NVTX deltas of ``run_b`` against ``run_a`` (delta = b - a). Each is an
    ``NsysRun``, an ``NsysReport``, a report's path or a run folder's (opened as ``load_run``
    opens it)."""
    run_a, run_b = _as_run(run_a), _as_run(run_b)
    report_a, report_b = _as_report(run_a), _as_report(run_b)
    # a run's own frames: a --repeat run's carry its per-repeat statistics (the report's not)
    source_a, source_b = (run if isinstance(run, NsysRun) else report
                          for run, report in ((run_a, report_a), (run_b, report_b)))  # fmt: skip
    summaries = (source_a.kernel_summary(), source_b.kernel_summary())
    label_a, label_b = label_a or _label(run_a, "a"), label_b or _label(run_b, "b")
    return Comparison(
        kernel_deltas(*summaries),
        nvtx_deltas(source_a.nvtx_gpu_projection(), source_b.nvtx_gpu_projection(), summaries),
        label_a,
        label_b,
        memory_deltas(_memory_summary(run_a, report_a), _memory_summary(run_b, report_b)),
        summaries,
        machine_state.run_differences(_gpu_state(run_a), _gpu_state(run_b), label_a, label_b),
    )


def _gpu_state(run: Any) -> Any:
    """A run's recorded GPU state (meta.json's ``gpu_state``); None for a report or a path (a
    report's ``meta`` is a method, not a run's record)."""
    meta = getattr(run, "meta", None)
    return meta.get("gpu_state") if isinstance(meta, dict) else None


def _memory_summary(run: Any, report: Any) -> Any:
    """A run's own memory summary (what it asked for, the notebook's mapped memory left
    out), else the report's."""
    frames = getattr(run, "memory", None)
    summary = getattr(frames, "summary", None)
    return summary() if callable(summary) else report_memory_summary(report)
