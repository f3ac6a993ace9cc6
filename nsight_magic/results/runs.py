"""Result objects the magics return: ``NsysRun`` and ``NcuRun`` hold the report, the run
directory and its metadata, forward the report's frame methods, and display themselves as an
ipywidgets view plus a static ``text/html`` form (tables + PNG charts), so an executed notebook
still shows real findings on GitHub/nbviewer or in nbconvert HTML, where no kernel runs."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import attribution, range_spec, statements, torch_ops
from ..analysis import mfu as utilisation
from ..analysis import roofline_bounds as bounds
from ..errors import NsightMagicError
from ..views.ncu_view import ncu_static_html, ncu_widget
from ..views.nsys_view import nsys_static_html, nsys_widget
from ..views.roofline_chart import roofline_chart
from . import contracts
from .frames import NcuFrames, NsysFrames
from .protocols import KernelProfiler

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def in_kernel() -> bool:
    """True inside a Jupyter kernel, where a widget can be shown (not in plain IPython/python)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class _Run:
    kind = "run"

    def __init__(
        self, report: Any, run_dir: str | Path | None = None, meta: dict[str, Any] | None = None
    ) -> None:
        self.report = report
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.meta: dict[str, Any] = dict(meta or {})
        self._html: str | None = None

    @property
    def name(self) -> str:
        if self.meta.get("name"):
            return str(self.meta["name"])
        if self.run_dir is not None:
            return self.run_dir.name
        path = getattr(self.report, "path", None)
        return Path(path).name if path else self.kind

    # --- display ---------------------------------------------------------------------------
    def widget(self) -> Any:
        raise NotImplementedError

    def to_html(self) -> str:
        """The static form alone: header, top tables, charts as PNG data URIs. Cached: the
        report does not change, and PNG rendering costs about a second per chart."""
        if self._html is None:
            self._html = self._build_html()
        return self._html

    def _build_html(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        data: dict[str, Any] = {"text/plain": repr(self), "text/html": self.to_html()}
        if in_kernel():
            # The widget is the live view; text/html stays in the same output for readers
            # without a kernel (frontends pick the richest type they can render).
            with contextlib.suppress(Exception):  # a broken widget must not hide the findings
                data[WIDGET_MIME] = self.widget()._repr_mimebundle_()[WIDGET_MIME]
        if include:
            data = {k: v for k, v in data.items() if k in include}
        if exclude:
            data = {k: v for k, v in data.items() if k not in exclude}
        return data


class NsysRun(_Run):
    """An Nsight Systems run: ``report`` is an ``NsysReport``; frame methods are forwarded."""

    kind = "nsys"

    def __init__(
        self,
        report: Any,
        run_dir: str | Path | None = None,
        meta: dict[str, Any] | None = None,
        profiler: KernelProfiler | None = None,
    ) -> None:
        super().__init__(report, run_dir, meta)
        self.children: list[NcuRun] = []
        # what re-profiles this run's cell (ncu on a kernel or an NVTX range); handed in by
        # the session that profiled it, None for a run opened from a report file
        self.profiler = profiler

    @functools.cached_property
    def frames(self) -> NsysFrames:
        """What the view shows, computed (``results.frames``)."""
        return NsysFrames(self)

    def kernels(self) -> pd.DataFrame:
        return self.report.kernels()

    def nvtx(self) -> pd.DataFrame:
        return self.report.nvtx()

    def memcpy(self) -> pd.DataFrame:
        return self.report.memcpy()

    def memset(self) -> pd.DataFrame:
        return self.report.memset()

    def cuda_api(self) -> pd.DataFrame:
        return self.report.cuda_api()

    def kernel_summary(self) -> pd.DataFrame:
        return self.report.kernel_summary()

    def nvtx_gpu_projection(self) -> pd.DataFrame:
        return self.report.nvtx_gpu_projection()

    def gaps(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        return self.report.gaps(*args, **kwargs)

    def gpu_busy_pct(self) -> float:
        return self.report.gpu_busy_pct()

    def capture_window(self) -> tuple[int, int]:
        return self.report.capture_window()

    def gpu_info(self) -> dict[str, Any]:
        return self.report.gpu_info()

    def copies_by_kind(self) -> pd.DataFrame:
        return self.report.copies_by_kind()

    def timeline(self, window: tuple[int, int] | None = None, max_rows: int = 5000) -> pd.DataFrame:
        """Timeline rows of the events overlapping ``window`` (all when None), at most
        ``max_rows`` (``analysis.timeline.timeline_frame``)."""
        return self.report.timeline(max_rows=max_rows, window=window)

    def ordered_projection(self) -> pd.DataFrame:
        """The NVTX projection in reading order: cell, statements by line, then the user's
        ranges (``analysis.statements.ordered_projection``)."""
        return statements.ordered_projection(self.nvtx_gpu_projection())

    def resolve_nvtx_range(self, spec: str) -> range_spec.NvtxRange:
        """The range ``spec`` (``RANGE`` or ``DOMAIN:RANGE``) names in this run."""
        return range_spec.resolve_nvtx_range(self.nvtx(), spec)

    def kernels_in_range(self, domain: str, range: str) -> pd.DataFrame:
        """Kernels launched inside NVTX range ``domain``/``range`` (nsys's attribution rule,
        ``analysis.attribution.kernels_in_range``)."""
        return attribution.kernels_in_range(
            self.kernels(), self.cuda_api(), self.nvtx(), domain, range
        )

    def kernel_ops(self) -> pd.DataFrame:
        """The PyTorch op that launched each kernel (``analysis.torch_ops.kernel_ops``)."""
        return torch_ops.kernel_ops(self.kernels(), self.cuda_api(), self.nvtx())

    def op_summary(self) -> pd.DataFrame:
        """PyTorch ops by GPU time (``analysis.torch_ops.op_summary``); needs a run captured
        with ``--pytorch=autograd-shapes-nvtx`` (empty otherwise)."""
        kernels = self.kernels()
        return torch_ops.op_summary(self.report.nvtx_gpu_trace(), kernels, self.kernel_ops())

    def op_mfu(self, *, dtype: str = "bf16", peak_flops: float | None = None) -> pd.DataFrame:
        """MFU per PyTorch GEMM op from its shapes' 2*M*N*K over its projected GPU time
        (``analysis.mfu.op_mfu``); op ranges do not record the data type: ``dtype``."""
        return utilisation.op_mfu(
            self.op_summary(),
            gpu_name=self.gpu_info().get("name"),
            dtype=dtype,
            peak_flops=peak_flops,
        )

    def mfu(
        self,
        flops: Mapping[Any, float] | None = None,
        *,
        dtype: str = "bf16",
        peak_flops: float | None = None,
    ) -> pd.DataFrame:
        """MFU per NVTX range from model FLOPs (e.g. ``analysis.model_flops.transformer_flops``;
        without ``flops``, the 2*M*N*K of the PyTorch GEMM op ranges inside each range) over
        the range's GPU-projected time in this run, against the derived dense peak of this run's
        GPU for ``dtype`` (or ``peak_flops``). See ``analysis.mfu.model_mfu``."""
        return utilisation.model_mfu(
            self.nvtx_gpu_projection(),
            flops,
            nvtx=self.nvtx(),
            gpu_name=self.gpu_info().get("name"),
            dtype=dtype,
            peak_flops=peak_flops,
        )

    def profile_kernel(self, name: str, **kwargs: Any) -> NcuRun:
        """Run ncu on kernel ``name`` of this run's cell (what the picker's button calls):
        ``instance`` (0-based launch within the cell), ``count``, ``set``, ``sections``,
        ``metrics``, ``fresh``. The child run is kept in ``children``."""
        return self._adopt(self._profiler().profile_kernel(self, name, **kwargs))

    def profile_range(
        self, domain: str, name: str, style: str = "PushPop", **kwargs: Any
    ) -> NcuRun:
        """Run ncu on every kernel inside the NVTX range ``domain:name`` of this run's cell
        (the NVTX tab's "profile this range"); the child run is kept in ``children``."""
        return self._adopt(self._profiler().profile_range(self, domain, name, style, **kwargs))

    def _profiler(self) -> KernelProfiler:
        if self.run_dir is None:
            raise NsightMagicError(
                "This run was opened from a report file, not profiled here, so there is no "
                "saved cell to re-run under ncu; profile the cell with %%nsys first, or use %%ncu."
            )
        if self.profiler is None:
            raise NsightMagicError(
                "This run has no profiler to re-run its cell: open it with "
                "nsight_magic.load_run(...) or profile the cell with %%nsys."
            )
        return self.profiler

    def _adopt(self, child: NcuRun) -> NcuRun:
        if getattr(child, "parent", True) is None:
            child.parent = self  # MFU of the child uses this run's real-clock kernel times
        self.children.append(child)
        return child

    def widget(
        self,
        profile_fn: Callable[..., Any] | None = None,
        profile_range_fn: Callable[..., Any] | None = None,
    ) -> Any:
        """The live view; the picker calls ``profile_fn`` (default ``profile_kernel``) and
        "Profile this range" ``profile_range_fn`` (default ``profile_range``)."""
        return nsys_widget(
            self.frames, profile_fn or self.profile_kernel, profile_range_fn or self.profile_range
        )

    def _build_html(self) -> str:
        return nsys_static_html(self.frames)

    def __repr__(self) -> str:
        try:
            n = len(self.kernels())
            busy = f", GPU busy {self.gpu_busy_pct():.1f}%"
        except Exception:
            n, busy = "?", ""
        where = f", run_dir={str(self.run_dir)!r}" if self.run_dir else ""
        return f"<NsysRun {self.name!r}: {n} kernels{busy}{where}>"


class NcuRun(_Run):
    """An Nsight Compute run: ``report`` is an ``NcuReport``; frame methods are forwarded."""

    kind = "ncu"

    def __init__(
        self,
        report: Any,
        run_dir: str | Path | None = None,
        meta: dict[str, Any] | None = None,
        parent: NsysRun | None = None,
    ) -> None:
        super().__init__(report, run_dir, meta)
        # The nsys run this kernel was picked from: its real-clock times feed MFU.
        self.parent = parent

    def kernels(self) -> pd.DataFrame:
        return self.report.kernels()

    def metrics(self) -> pd.DataFrame:
        return self.report.metrics()

    def sol(self) -> pd.DataFrame:
        return self.report.sol()

    def sections(self, launch: int) -> dict[str, pd.DataFrame]:
        return self.report.sections(launch)

    def roofline(self) -> pd.DataFrame:
        return self.report.roofline()

    def nvtx_ranges(self) -> pd.DataFrame:
        return self.report.nvtx_ranges()

    def device(self) -> dict[str, Any]:
        return self.report.device()

    def roofline_bounds(self) -> pd.DataFrame:
        """Which roof binds each launch (``analysis.roofline_bounds.roofline_bounds``)."""
        return bounds.roofline_bounds(self.roofline())

    def roofline_ceilings(self) -> pd.DataFrame:
        """The roofs to draw (``analysis.roofline_bounds.roofline_ceilings``)."""
        return bounds.roofline_ceilings(self.roofline())

    def _parent_frames(self) -> dict[str, pd.DataFrame | None]:
        """The parent nsys run's kernels and projection: real-clock times for HFU/MFU."""
        if self.parent is None:
            return {"nsys_kernels": None, "projection": None}
        return {
            "nsys_kernels": self.parent.kernels(),
            "projection": self.parent.nvtx_gpu_projection(),
        }

    def mfu(
        self,
        flops: Mapping[int, float] | None = None,
        *,
        dtype: str | None = None,
        peak_flops: float | None = None,
    ) -> pd.DataFrame:
        """HFU and MFU per profiled launch (``analysis.mfu.kernel_utilisation``) against the
        derived peak of this report's GPU: hardware FLOPs from the report (MissingMetricsError
        with the fix when it lacks FLOP counts), model FLOPs from ``flops`` (launch -> FLOPs)
        or the PyTorch op ranges around the launches, times from the parent nsys run if any."""
        points = self.roofline()
        device = self.device()
        utilisation.require_flop_counts(points, device["compute_capability"])
        return utilisation.kernel_utilisation(
            points,
            kernels=self.kernels(),
            nvtx=self.nvtx_ranges(),
            nsys_kernels=self._parent_frames()["nsys_kernels"],
            model_flops=flops,
            gpu_name=device["name"],
            dtype=dtype,
            peak_flops=peak_flops,
        )

    def hfu(self, *, dtype: str | None = None, peak_flops: float | None = None) -> pd.DataFrame:
        """:meth:`mfu` without user model FLOPs: the ``hfu`` column is the point."""
        return self.mfu(dtype=dtype, peak_flops=peak_flops)

    def range_mfu(
        self,
        flops: Mapping[Any, float] | None = None,
        *,
        time_ns: Mapping[Any, float] | None = None,
        dtype: str | None = None,
        peak_flops: float | None = None,
    ) -> pd.DataFrame:
        """HFU and MFU per NVTX range (``analysis.mfu.range_utilisation``): ``flops`` / ``time_ns``
        keyed by range name, ``(domain, range)`` or ``"domain:range"``."""
        points = self.roofline()
        device = self.device()
        utilisation.require_flop_counts(points, device["compute_capability"])
        return utilisation.range_utilisation(
            points,
            self.nvtx_ranges(),
            projection=self._parent_frames()["projection"],
            time_ns=time_ns,
            flops=flops,
            gpu_name=device["name"],
            dtype=dtype,
            peak_flops=peak_flops,
        )

    def mfu_frames(self) -> dict[str, pd.DataFrame]:
        """``{"kernels": ..., "ranges": ...}`` for the ncu view (``analysis.mfu.mfu_frames``);
        FLOP counts NaN rather than an error when the report lacks them."""
        return utilisation.mfu_frames(
            self.roofline(),
            self.kernels(),
            nvtx=self.nvtx_ranges(),
            gpu_name=self.device()["name"],
            **self._parent_frames(),
        )

    def advice(self) -> pd.DataFrame:
        """ncu's rule results: ``launch, name, rule, section, title, message, speedup_pct,
        speedup_type``, largest estimated speedup first (empty when the report has none)."""
        return contracts.advice(self.report)

    @functools.cached_property
    def frames(self) -> NcuFrames:
        return NcuFrames(self)

    def roofline_chart(self) -> Any:
        """The roofline as an altair chart (ceilings, labelled points, verdicts on hover)."""
        return roofline_chart(*self.frames.roofline())

    def widget(self, on_pick: Callable[[str], Any] | None = None) -> Any:
        """The live view; a click on a roofline point calls ``on_pick(kernel name)``."""
        return ncu_widget(self.frames, on_pick=on_pick)

    def _build_html(self) -> str:
        return ncu_static_html(self.frames)

    def __repr__(self) -> str:
        try:
            n = len(self.kernels())
        except Exception:
            n = "?"
        where = f", run_dir={str(self.run_dir)!r}" if self.run_dir else ""
        return f"<NcuRun {self.name!r}: {n} profiled launches{where}>"
