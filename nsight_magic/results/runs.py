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

from ..analysis.mfu import model_mfu
from ..errors import NsightMagicError
from ..views.ncu_view import ncu_static_html, ncu_widget
from ..views.nsys_view import nsys_static_html, nsys_widget
from ..views.roofline_chart import roofline_chart
from . import contracts
from .frames import NcuFrames, NsysFrames

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
        self, report: Any, run_dir: str | Path | None = None, meta: dict[str, Any] | None = None
    ) -> None:
        super().__init__(report, run_dir, meta)
        self.children: list[NcuRun] = []
        # What re-profiles this run's cell (ncu on a kernel or an NVTX range); handed in by the
        # session that profiled it, None for a run opened from a report file.
        self.profiler: Any = None

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

    def mfu(
        self,
        flops: Mapping[Any, float],
        *,
        dtype: str = "bf16",
        peak_flops: float | None = None,
    ) -> pd.DataFrame:
        """MFU per NVTX range from model FLOPs (e.g. ``analysis.mfu.transformer_flops``) over the
        range's GPU-projected time in this run, against the dense datasheet peak of this run's
        GPU for ``dtype`` (or ``peak_flops``). See ``analysis.mfu.model_mfu``."""
        return model_mfu(
            self.nvtx_gpu_projection(),
            flops,
            gpu_name=self.gpu_info().get("name"),
            dtype=dtype,
            peak_flops=peak_flops,
        )

    def profile_kernel(self, name: str, **kwargs: Any) -> NcuRun:
        """Run ncu on kernel ``name`` of this run's script (what the picker's button calls);
        the child run is kept in ``children``."""
        from ..session.pipeline import profile_kernel

        child = profile_kernel(self, name, **kwargs)
        if getattr(child, "parent", True) is None:
            child.parent = self  # MFU of the child uses this run's real-clock kernel times
        self.children.append(child)
        return child

    def profile_range(
        self, domain: str, range_: str, style: str = "PushPop", **ncu_options: Any
    ) -> NcuRun:
        """Run ncu on every kernel launched inside NVTX range ``domain:range_`` of this run's
        cell (what "Profile this range" calls); the child run is kept in ``children``."""
        profiler = getattr(self.profiler, "profile_range", None)
        if profiler is None:
            raise NsightMagicError(
                "This run was opened from a report file, not profiled here, so there is no "
                "saved cell to re-run under ncu; profile the cell with %%nsys first, or use "
                f"%%ncu --nvtx '{domain}@{range_}'."
                if self.run_dir is None
                else "This run has no kernel profiler handed in, so its NVTX ranges cannot be "
                "re-profiled from here; use %%ncu --nvtx on the cell."
            )
        child = profiler(self, domain, range_, style, **ncu_options)
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
