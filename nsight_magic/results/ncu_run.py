"""``NcuRun``: an Nsight Compute run (its report, run folder and metadata), the frames the ncu
view shows, HFU/MFU, and its display."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import mfu as utilisation
from ..analysis import phases, range_mfu, range_spec, top_kernels
from ..analysis import roofline_bounds as bounds
from ..analysis.torch_ops import parse_op_range
from ..views.ncu_view import ncu_static_html, ncu_widget
from ..views.roofline_chart import roofline_chart
from ..vocabulary.arguments import flops_arg
from .base import _Run
from .drill_protocols import ParentRun
from .ncu_frames import NcuFrames


class NcuRun(_Run):
    """An Nsight Compute run: ``report`` is an ``NcuReport``; frame methods are forwarded."""

    kind = "ncu"

    def __init__(
        self,
        report: Any,
        run_dir: str | Path | None = None,
        meta: dict[str, Any] | None = None,
        parent: ParentRun | None = None,
    ) -> None:
        super().__init__(report, run_dir, meta)
        # The nsys run this kernel was picked from: its real-clock times feed MFU.
        self.parent = parent

    def kernels(self) -> pd.DataFrame:
        """One row per profiled launch: ``launch`` (0-based, report order), ``name``
        (function name), ``demangled, mangled, duration_ns`` (ns, at ncu's locked clock),
        ``grid, block`` ("(x, y, z)"), ``registers_per_thread, shared_mem_bytes, sm_clock_hz``
        (Hz), ``device_id, stream_id, nvtx`` (the launching thread's range path, or ""),
        ``phase`` (``DOMAIN:RANGE`` of the user's innermost range open in the process at the
        launch, any thread; "" none or unknown), ``process_id``."""
        return self.report.kernels()

    def launch_phases(self) -> list[str]:
        """The phase each profiled launch (``launch`` order) was launched in, from the parent
        nsys run (``analysis.phases.drill_phases``): a picker drill-down of one kernel's
        instances, autograd's backward kernels included (ncu's own ``nvtx`` is per thread);
        "" where unknown (no parent, or not a drill-down of one kernel)."""
        n = len(self.report.kernels())
        name, instance = self.meta.get("kernel"), self.meta.get("instance")
        get = getattr(self.parent, "kernel_phases", None)
        if self.parent is None or get is None or not name or instance is None:
            return [""] * n
        return phases.drill_phases(self.parent.kernels(), get(), str(name), int(instance), n)

    def metrics(self) -> pd.DataFrame:
        """Every numeric metric, long: ``launch, name, metric, value, unit`` (ncu's unit)."""
        return self.report.metrics()

    def sol(self) -> pd.DataFrame:
        """Speed of light per launch: ``launch, name, duration_ns`` (ns), ``compute_sol_pct,
        memory_sol_pct, achieved_occupancy_pct, theoretical_occupancy_pct`` (percents; NaN
        when the report lacks the metric)."""
        return self.report.sol()

    def sections(self, launch: int) -> dict[str, pd.DataFrame]:
        """Section name -> ``metric, value, unit`` of launch ``launch`` (for details views)."""
        return self.report.sections(launch)

    def roofline(self) -> pd.DataFrame:
        """Roofline numbers per launch, at the clock it ran at: ``launch, name, duration_ns``
        (ns), ``fp64_flops_per_s, fp32_flops_per_s, fp16_flops_per_s, tensor_flops_per_s``
        (achieved FLOP/s), ``dram_bytes_per_s, arithmetic_intensity`` (FLOP/byte), the
        ceilings ``peak_fp64_flops_per_s, peak_fp32_flops_per_s, peak_fp16_flops_per_s,
        peak_tensor_flops_per_s, peak_dram_bytes_per_s``, ``sm_clock_hz`` (Hz),
        ``tensor_op_path``, the counts ``flop_count_fp64, flop_count_fp32, flop_count_fp16,
        flop_count_tensor, flop_count_total`` (FLOPs) and ``dram_bytes``."""
        return self.report.roofline()

    def nvtx_ranges(self) -> pd.DataFrame:
        """The NVTX ranges around each launch: ``launch, domain, range, style, level``."""
        return self.report.nvtx_ranges()

    def device(self) -> dict[str, Any]:
        """The GPU: ``name``, ``compute_capability``, SM count and max clock."""
        return self.report.device()

    def roofline_bounds(self) -> pd.DataFrame:
        """Which roof binds each launch (``analysis.roofline_bounds.roofline_bounds``):
        ``launch, name, short_name, duration_ns`` (ns), ``arithmetic_intensity`` (FLOP/byte),
        ``flops_per_s`` (all precisions), ``precision, ceiling_flops_per_s``, ``ceiling_pct``
        (percent of that roof), ``bound`` ("memory"/"compute"), ``bound_pct`` (percent of the
        binding peak), ``verdict``, ``plottable``."""
        return bounds.roofline_bounds(self.roofline())

    def roofline_ceilings(self) -> pd.DataFrame:
        """The roofs to draw (``analysis.roofline_bounds.roofline_ceilings``): ``ceiling,
        label, kind`` ("compute"/"memory"), ``peak`` (FLOP/s, or bytes/s for DRAM), ``unit``,
        ``ridge_ai`` (FLOP/byte where the roof turns flat)."""
        return bounds.roofline_ceilings(self.roofline())

    def _parent_frames(self) -> dict[str, Any]:
        """The parent nsys run's kernels, projection and phases (real-clock times for HFU/MFU)
        and how many kernels it saw in each NVTX range of this run (``launches_total`` per
        range)."""
        if self.parent is None:
            return {
                "nsys_kernels": None,
                "projection": None,
                "phases": None,
                "range_launches": None,
            }
        phases = getattr(self.parent, "nvtx_phases", None)  # a parent that predates phases
        return {
            "nsys_kernels": self.parent.kernels(),
            "projection": self.parent.nvtx_gpu_projection(),
            "phases": phases() if phases is not None else None,
            "range_launches": self._range_launches(),
        }

    def _range_launches(self) -> dict[tuple[str, str], int]:
        """(domain, range) -> kernels the parent nsys run saw launched in that range, for each
        NVTX range around this run's launches; of this run's rank when the parent has several
        (a range the parent cannot attribute is left out: its total shows as unknown)."""
        counts: dict[tuple[str, str], int] = {}
        find = getattr(self.parent, "kernels_in_range", None)
        if find is None:
            return counts
        rank = self.meta.get("rank")
        ranges = self.nvtx_ranges()[["domain", "range"]].drop_duplicates()
        for domain, name in ranges.itertuples(index=False, name=None):
            if parse_op_range(str(name)) is not None:
                continue
            try:
                inside = find(str(domain), str(name))
            except Exception:  # a range the parent did not record: its total stays unknown
                continue
            if rank is not None and "rank" in inside:
                inside = inside[inside["rank"] == rank]
            counts[(str(domain), str(name))] = len(inside)
        return counts

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
        or the PyTorch op ranges around the launches, times from the parent nsys run if any.
        Columns: ``launch, name, short_name, dtype, hw_flops, model_flops`` (FLOPs),
        ``model_flops_source, time_ns`` (ns), ``time_source, hw_flops_per_s,
        model_flops_per_s`` (FLOP/s), ``peak_flops_per_s, peak_source``, ``hfu_frac,
        mfu_frac`` (fractions of the peak; ``mfu_frac`` NaN where model FLOPs are unknown and
        ``model_flops_source`` says why), ``reason`` (why a fraction above 100% is blank)."""
        flops = flops_arg(flops, "flops", "NcuRun.mfu()")  # the user's names in the message
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
        """:meth:`mfu` without user model FLOPs (the same columns: ``launch, name,
        short_name, dtype, hw_flops, model_flops, model_flops_source, time_ns, time_source,
        hw_flops_per_s, model_flops_per_s, peak_flops_per_s, peak_source, hfu_frac,
        mfu_frac, reason``): the ``hfu_frac`` column is the point."""
        return self.mfu(dtype=dtype, peak_flops=peak_flops)

    def range_mfu(
        self,
        flops: Mapping[Any, float] | None = None,
        *,
        time_ns: Mapping[Any, float] | None = None,
        dtype: str | None = None,
        peak_flops: float | None = None,
    ) -> pd.DataFrame:
        """HFU and MFU per NVTX range (``analysis.range_mfu.range_utilisation``): over the
        profiled launches only, with ``launches_profiled`` of ``launches_total`` (the parent
        nsys run's count); ``flops`` / ``time_ns`` keyed by range name, ``(domain, range)`` or
        ``"domain:range"`` are the whole range's. Columns: ``domain, range, label``,
        ``launches_profiled, launches_total, coverage`` ("k/n launches profiled"), ``dtype``,
        ``hw_flops, model_flops`` (FLOPs), ``model_flops_source``, ``time_ns`` (ns of the
        profiled launches), ``time_source``, ``range_time_ns`` (ns of the whole range),
        ``range_time_source`` (the parent's phase time when known: work launched by any
        thread while the range was open), ``peak_flops_per_s`` (FLOP/s), ``peak_source``,
        ``hfu_frac, mfu_frac`` (fractions of the peak; blank above 1), ``reason`` (why
        blank)."""
        flops = flops_arg(flops, "flops", "NcuRun.range_mfu()")
        time_ns = flops_arg(time_ns, "time_ns", "NcuRun.range_mfu()", unit="nanoseconds")
        points = self.roofline()
        device = self.device()
        utilisation.require_flop_counts(points, device["compute_capability"])
        return range_mfu.range_utilisation(
            points,
            self.nvtx_ranges(),
            kernels=self.kernels(),
            **self._parent_frames(),
            time_ns=time_ns,
            flops=flops,
            gpu_name=device["name"],
            dtype=dtype,
            peak_flops=peak_flops,
        )

    def mfu_frames(self) -> dict[str, pd.DataFrame]:
        """``{"kernels": ..., "ranges": ...}`` for the ncu view (``analysis.range_mfu
        .mfu_frames``); FLOP counts NaN rather than an error when the report lacks them.
        ``kernels`` has :meth:`mfu`'s columns: ``launch, name, short_name, dtype, hw_flops,
        model_flops, model_flops_source, time_ns, time_source, hw_flops_per_s,
        model_flops_per_s, peak_flops_per_s, peak_source, hfu_frac, mfu_frac, reason``;
        ``ranges`` :meth:`range_mfu`'s: ``domain, range, label, launches_profiled, launches_total,
        coverage, dtype, hw_flops, model_flops, model_flops_source, time_ns, time_source,
        range_time_ns, range_time_source, peak_flops_per_s, peak_source, hfu_frac, mfu_frac,
        reason`` (units there)."""
        return range_mfu.mfu_frames(
            self.roofline(),
            self.kernels(),
            nvtx=self.nvtx_ranges(),
            gpu_name=self.device()["name"],
            **self._parent_frames(),
        )

    def top_kernels(self) -> pd.DataFrame:
        """Each profiled launch's kernel: its share of the parent nsys run's kernel time beside
        its HFU (``analysis.top_kernels.kernel_shares``; what ``NsysRun.profile_top`` is read
        by). Columns: ``launch, name, short_name, nsys_rank`` (1 = the most nsys time),
        ``nsys_instances, nsys_total_ns`` (ns), ``nsys_time_pct`` (percent of all nsys kernel
        time), ``hfu_frac`` (fraction of the peak; NaN without FLOP counts, ``reason`` says
        why when blank), ``hw_flops_per_s, peak_flops_per_s`` (FLOP/s), ``time_ns`` (ns),
        ``time_source, reason``. The nsys columns are NA without a parent nsys run. A kernel
        the top-N run asked for (``meta["top_kernels"]``) that ncu profiled no launch of is a
        row too, its ``launch`` NA and its ``reason`` saying so."""
        summary = self.parent.kernel_summary() if self.parent is not None else None
        try:
            hfu = self.hfu()
        except Exception:  # no FLOP counts in this report (a --metrics run): HFU stays NaN
            hfu = None
        asked = [str(name) for name in self.meta.get("top_kernels") or ()]
        return top_kernels.kernel_shares(self.kernels(), hfu, summary, asked)

    def advice(self) -> pd.DataFrame:
        """ncu's rule results (``NcuReport.advice``): ``launch, name, rule, section, title,
        message, speedup_pct, speedup_type, severity, section_name, focus_metrics``, largest
        estimated speedup first; empty when ncu ran no rules (:meth:`advice_note` says why)."""
        return self.report.advice()

    def advice_note(self) -> str:
        """Why :meth:`advice` is empty ("" when it is not)."""
        return self.report.advice_note()

    @property
    def warnings(self) -> list[str]:
        """What was wrong with the file and what was left out, and what to know about how the
        launches were chosen (``--nvtx`` naming several ranges); empty when all is plain."""
        target = (self.meta.get("cell_status") or {}).get("target")
        return list(self.report.warnings) + range_spec.target_notes(target)

    @functools.cached_property
    def frames(self) -> NcuFrames:
        """What the view shows, computed (``results.ncu_frames``)."""
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
            n: int | str = len(self.kernels())
        except Exception:
            n = "?"
        where = f", run_dir={str(self.run_dir)!r}" if self.run_dir else ""
        return f"<NcuRun {self.name!r}: {n} profiled launches{where}>"
