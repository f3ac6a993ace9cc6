"""Result objects the magics return: ``NsysRun`` here and ``NcuRun`` (``ncu_run``) hold the
report, the run directory and its metadata, forward the report's frame methods, and display
themselves as an ipywidgets view plus a static ``text/html`` form (``base``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import mfu as utilisation
from ..analysis import processes, range_spec, statements, torch_ops
from ..errors import NsightMagicError
from ..views.nsys_view import nsys_static_html, nsys_widget
from .base import WIDGET_MIME, _Run, in_kernel
from .frames import NsysFrames
from .ncu_run import NcuRun
from .protocols import KernelProfiler

__all__ = ["WIDGET_MIME", "NcuRun", "NsysRun", "in_kernel"]


class NsysRun(_Run):
    """An Nsight Systems run: ``report`` is an ``NsysReport``, or a ``RankedReport`` of a
    multi-rank job (``nsight_magic.load_runs``: its frames carry ``report`` and ``rank``
    columns); frame methods are forwarded. A run with two or more ranks shows a Ranks tab."""

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
        # load_run(..., trust=True): a re-profile may use the folder's interpreter and env
        self.trust_folder = False

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

    def graph_launches(self) -> pd.DataFrame:
        """Whole CUDA graph launches (nsys ``--cuda-graph-trace=graph``: their kernels have no
        kernel rows); empty otherwise."""
        return self.report.graph_launches()

    def processes(self) -> pd.DataFrame:
        return self.report.processes()

    def process_summary(self) -> pd.DataFrame:
        """GPU work per process, most first (``analysis.processes.process_summary``)."""
        return processes.process_summary(
            self.kernels(), self.memcpy(), self.processes(), self.memset(), self.graph_launches()
        )

    def gpu_work(self) -> Any:
        """Counts of kernels, graph launches, copies and sets (``GpuWork``), nothing loaded."""
        return self.report.gpu_work()

    @property
    def warnings(self) -> list[str]:
        """What to know before trusting the frames (e.g. graphs traced as whole graphs)."""
        return list(self.report.warnings)

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
        ``analysis.attribution.kernels_in_range``, per report)."""
        return self.report.kernels_in_range(domain, range)

    def kernel_ops(self) -> pd.DataFrame:
        """The PyTorch op that launched each kernel (``analysis.torch_ops.kernel_ops``)."""
        return self.report.kernel_ops()

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
            n: int | str = len(self.kernels())
            busy = f", GPU busy {self.gpu_busy_pct():.1f}%"
        except Exception:
            n, busy = "?", ""
        where = f", run_dir={str(self.run_dir)!r}" if self.run_dir else ""
        return f"<NsysRun {self.name!r}: {n} kernels{busy}{where}>"
