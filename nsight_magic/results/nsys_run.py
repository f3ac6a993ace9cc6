"""Result objects the magics return: ``NsysRun`` here and ``NcuRun`` (``ncu_run``) hold the
report, the run directory and its metadata, forward the report's frame methods, and display
themselves as an ipywidgets view plus a static ``text/html`` form (``base``)."""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import (
    api_summary,
    cold_run,
    machine_state,
    phases,
    processes,
    range_spec,
    repeats,
    statements,
    top_kernels,
    torch_ops,
)
from ..analysis import mfu as utilisation
from ..analysis.range_spec import NvtxRange
from ..errors import BadArgumentError, EmptyResultWarning, NsightMagicError
from ..profilers.drill_request import DrillRequest
from ..views.nsys_view import nsys_static_html, nsys_widget
from ..views.protocols import ProfileFn, ProfileRangeFn
from ..vocabulary.arguments import count_arg, flops_arg, range_args, text_arg
from ..vocabulary.magic_names import cell_magic
from .base import WIDGET_MIME, _Run, in_kernel
from .drill_protocols import DrillRunner
from .frames import NsysFrames
from .idle_frames import IdleFrames, with_host_reason
from .memory_frames import MemoryFrames
from .ncu_run import NcuRun
from .repeat_frames import RepeatFrames

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
        drill_runner: DrillRunner | None = None,
    ) -> None:
        super().__init__(report, run_dir, meta)
        self.children: list[NcuRun] = []
        # what re-runs this run's cell under ncu (on a kernel or an NVTX range); handed in by
        # the session that profiled it, None for a run opened from a report file
        self.drill_runner = drill_runner
        # load_run(..., trust=True): a re-profile may use the folder's interpreter and env
        self.trust_folder = False
        # a sweep's configuration run in this session: the values it bound before the cell,
        # which a drill-down into it binds again (session/runs/sweep.py, session/runs/drill.py)
        self.bound_values: dict[str, Any] | None = None
        self._repeats = RepeatFrames(self)  # a --repeat run's per-repeat frames

    @functools.cached_property
    def frames(self) -> NsysFrames:
        """What the view shows, computed (``results.frames``)."""
        return NsysFrames(self)

    def kernels(self) -> pd.DataFrame:
        """One row per kernel launch the capture holds: ``start_ns, end_ns, duration_ns``
        (int64 ns on the report's clock), ``name`` (demangled, as ``nsys stats`` shows it),
        ``short_name, mangled_name, device_id, context_id, stream_id, correlation_id, pid, tid``
        (of the launching API call), ``grid_x, grid_y, grid_z, block_x, block_y, block_z,
        registers_per_thread,
        static_smem_bytes, dynamic_smem_bytes`` (bytes), ``graph_node_id`` (-1: not a CUDA
        graph node)."""
        return self.report.kernels()

    def nvtx(self) -> pd.DataFrame:
        """NVTX ranges: ``domain`` ("" for the default), ``range`` (text), ``style``
        ("PushPop"/"StartEnd"), ``start_ns, end_ns, duration_ns`` (ns), ``pid, tid, end_tid``,
        ``level`` (nesting depth, 0 = outermost)."""
        return self.report.nvtx()

    def memcpy(self) -> pd.DataFrame:
        """Memory copies: ``start_ns, end_ns, duration_ns`` (ns), ``bytes``, ``kind`` ("HtoD",
        "DtoH", ... as nsys stats names them), ``label`` ("Host-to-Device"), ``device_id,
        stream_id, correlation_id, pid, bandwidth_gb_per_s`` (GB/s: 10^9 bytes per second)."""
        return self.report.memcpy()

    def memset(self) -> pd.DataFrame:
        """Memory sets: ``start_ns, end_ns, duration_ns`` (ns), ``bytes, device_id, stream_id,
        correlation_id, pid``."""
        return self.report.memset()

    def graph_launches(self) -> pd.DataFrame:
        """Whole CUDA graph launches (nsys ``--cuda-graph-trace=graph``: their kernels have no
        kernel rows); empty otherwise: ``start_ns, end_ns, duration_ns`` (ns), ``graph_id,
        graph_exec_id, device_id, stream_id, correlation_id, pid``."""
        return self.report.graph_launches()

    def processes(self) -> pd.DataFrame:
        """``pid, name``: one row per process with CUDA or NVTX events."""
        return self.report.processes()

    def process_summary(self) -> pd.DataFrame:
        """GPU work per process, most first (``analysis.processes.process_summary``): ``pid,
        name, kernels, kernel_time_ns, graph_launches, graph_time_ns, memcpy_count,
        memcpy_bytes, memcpy_time_ns, memset_count, memset_time_ns, gpu_time_ns`` (the op
        durations summed, ns), ``gpu_time_pct`` (percent of all processes'), ``devices``
        ("0,1"), ``first_start_ns, last_end_ns`` (+ ``rank`` of a multi-rank run)."""
        return processes.process_summary(
            self.kernels(), self.memcpy(), self.processes(), self.memset(), self.graph_launches()
        )

    def gpu_work(self) -> Any:
        """Counts of kernels, graph launches, copies and sets (``GpuWork``), nothing loaded."""
        return self.report.gpu_work()

    @property
    def warnings(self) -> list[str]:
        """What to know before trusting the frames: the report's own (e.g. graphs traced as
        whole graphs), a cold run (first-call costs in the capture, or the first run of
        the cell's code in its worker: ``analysis.cold_run``), GPU clocks that moved or a
        GPU that heated during the capture or between a ``--repeat`` run's repeats
        (``analysis.machine_state``), and repeats whose GPU time varies by more than 5%."""
        cold = cold_run.cold_run_warnings(
            self.first_call_effects,
            first_run=self.meta.get("first_run"),
            warmup=int(self.meta.get("warmup") or 0),
        )
        machine = machine_state.capture_notes(self.meta.get("gpu_state"))
        return list(self.report.warnings) + cold + machine + self._repeats.notes()

    @property
    def repeat_stats(self) -> repeats.RepeatStats | None:
        """The GPU time each repeat of a ``%%nsys --repeat N`` run launched, with its mean,
        95% interval and RSD (``.line()``); None for a run of one repeat."""
        return self._repeats.stats

    def repeats(self) -> pd.DataFrame:
        """One row per repeat of a ``%%nsys --repeat N`` run: ``repeat`` (1..N),
        ``kernel_time_ns`` (the kernel time it launched, ns) and ``wall_ns`` (its own time on
        the CPU, ns; NaN when the run did not record it); empty for a run of one repeat."""
        return self._repeats.table()

    @functools.cached_property
    def first_call_effects(self) -> cold_run.FirstCallEffects | None:
        """Module loads and slow first launches inside the capture (``analysis.cold_run``);
        None when the report has no CUDA API trace to read."""
        try:
            api = self.cuda_api()
        except Exception:  # e.g. a report traced without cuda: nothing to say
            return None
        if api.empty:
            return None
        return cold_run.first_call_effects(api, self.capture_window())

    def cuda_api(self) -> pd.DataFrame:
        """CUDA API calls, each once: ``name`` (without the ``_vNNNN`` suffix, as nsys stats
        prints it), ``start_ns, end_ns, duration_ns`` (ns), ``correlation_id, pid, tid,
        return_value`` (a NULL id reads as -1)."""
        return self.report.cuda_api()

    def kernel_summary(self) -> pd.DataFrame:
        """Per kernel name, = ``nsys stats --report cuda_gpu_kern_sum``: ``name, short_name,
        instances, total_ns, avg_ns, med_ns, min_ns, max_ns, std_ns`` (ns; averages, medians
        and deviations are floats), ``time_pct`` (percent of all kernel time), most
        ``total_ns`` first. CUDA graph launches traced whole are left out, as nsys stats
        does. A ``%%nsys --repeat N`` run adds each kernel's total per repeat (ns, floats):
        ``repeat_mean_ns, repeat_med_ns, repeat_std_ns, repeat_ci95_lo_ns, repeat_ci95_hi_ns``
        (the mean's 95% interval), ``repeat_rsd_pct``, ``attrs["repeats"]`` (docs/repeats.md)."""
        return repeats.summary_with_repeats(self.report.kernel_summary(), self._repeats.found)

    def nvtx_gpu_projection(self) -> pd.DataFrame:
        """Per NVTX range, the GPU time of the work it launched, = ``nsys stats --report
        nvtx_gpu_proj_sum``: ``domain, range, style, instances, proj_total_ns`` (GPU time
        projected onto the range, ns), ``range_total_ns`` (the range's own CPU time, ns),
        ``gpu_ops`` (count), ``proj_avg_ns, proj_med_ns, proj_min_ns, proj_max_ns,
        proj_std_ns, avg_gpu_ops, avg_level, avg_children``. A ``--repeat N`` run adds each
        range's GPU time per repeat: ``repeat_mean_ns, repeat_med_ns, repeat_std_ns,
        repeat_ci95_lo_ns, repeat_ci95_hi_ns, repeat_rsd_pct`` (as :meth:`kernel_summary`)."""
        return self._repeats.projection(self.report.nvtx_gpu_projection(), self.report)

    def nvtx_phases(self) -> pd.DataFrame:
        """Per NVTX range, its phase: the GPU work launched by ANY thread of its process while
        it was open (``analysis.phases``; a backward pass runs on autograd's own thread, which
        :meth:`nvtx_gpu_projection` leaves out as nsys does): ``domain, range, style,
        instances, range_total_ns, phase_total_ns`` (ns, projected as nsys projects: first
        op's start to last op's end), ``phase_gpu_ops`` (count). PyTorch op ranges left
        out. A ``--repeat N`` run adds each range's phase time per repeat: ``repeat_mean_ns,
        repeat_med_ns, repeat_std_ns, repeat_ci95_lo_ns, repeat_ci95_hi_ns, repeat_rsd_pct``."""
        return self._repeats.phases(self.report.nvtx_phases(), self.report)

    def gaps(self, min_gap_ns: int = 0, per_stream: bool = True) -> pd.DataFrame:
        """Idle stretches longer than ``min_gap_ns`` between consecutive GPU ops of each
        device and stream (``per_stream=False``: of each device, any stream busy counts as busy,
        ``stream_id`` -1): ``device_id, stream_id, start_ns, end_ns, duration_ns`` (ns),
        ``prev_op`` (the op that ended at ``start_ns``), ``next_op`` (the op that starts at
        ``end_ns``), longest first (``analysis.gaps.gaps``)."""
        return self.report.gaps(count_arg(min_gap_ns, "min_gap_ns", "gaps()"), per_stream)

    def gpu_busy_pct(self) -> float:
        """Percent (0-100) of the capture window during which some GPU op ran."""
        return self.report.gpu_busy_pct()

    def capture_window(self) -> tuple[int, int]:
        """``(start_ns, end_ns)`` of the capture on the report's clock."""
        return self.report.capture_window()

    # --- host side and idle time (issue #24; frames from ``results.idle_frames``) ------------
    @functools.cached_property
    def idle(self) -> IdleFrames:
        """Why the GPU idled (``analysis.idle``): pieces, breakdown, causes, launch-bound."""
        return IdleFrames(self.report)

    def osrt(self) -> pd.DataFrame:
        """OS runtime calls (``--trace=osrt``, on by ``%%nsys --host``): ``name, start_ns,
        end_ns, duration_ns`` (ns), ``pid, tid, return_value, nesting_level, callchain_id``;
        empty without that trace."""
        return self.report.osrt()

    def python_samples(self) -> pd.DataFrame:
        """Python backtraces (``%%nsys --host``): ``kind`` ("periodic" | "cuda"), ``pid, tid,
        start_ns, frame`` (innermost frame of the user's code), ``backtrace``; empty: why."""
        frame = with_host_reason(self.report.python_samples(), self.meta, "python")
        return _said(frame, "python_samples()")

    def cuda_api_summary(self) -> pd.DataFrame:
        """Per CUDA API function: ``name, calls, total_ns, avg_ns, med_ns, min_ns, max_ns,
        std_ns, time_pct`` = ``nsys stats --report cuda_api_sum`` (without the backtrace copies
        that ``--cudabacktrace`` adds, see ``reports.nsys.cupti.CUDA_BACKTRACE_CLASS``)."""
        return api_summary.api_summary(self.cuda_api())

    def osrt_summary(self) -> pd.DataFrame:
        """Per OS runtime function, = ``nsys stats --report osrt_sum``: ``name, calls,
        total_ns, avg_ns, med_ns, min_ns, max_ns, std_ns`` (ns), ``time_pct`` (percent of all
        OS runtime time); empty (without ``--host``) with why in ``attrs["reason"]``."""
        frame = with_host_reason(api_summary.api_summary(self.osrt()), self.meta, "osrt")
        return _said(frame, "osrt_summary()")

    def idle_breakdown(self) -> pd.DataFrame:
        """GPU idle time by cause (``analysis.idle_summary.idle_breakdown``): ``scope`` total /
        statement / rank, ``category`` (cuda_sync, cuda_api, os_wait, host, collective_wait),
        ``call, frame, idle_ns, pct, gaps``."""
        return self.idle.breakdown()

    def idle_causes(self, top: int = 5) -> pd.DataFrame:
        """The ``top`` causes of GPU idle time (``analysis.idle_summary.idle_causes``):
        ``category, call, frame, statement, idle_ns`` (ns), ``pct`` (percent of all idle
        time), ``sentence`` (e.g. "61% of idle time: cudaStreamSynchronize in L3 ...")."""
        return self.idle.causes(count_arg(top, "top", "idle_causes()", minimum=1))

    def idle_gaps(self) -> pd.DataFrame:
        """Each device-level idle gap with its time per cause
        (``analysis.idle_summary.gap_causes``): ``gap, device_id, start_ns, end_ns,
        duration_ns, next_op`` (the op after the gap), ``pid, tid`` (the thread that launched
        it), ``cuda_sync_ns, cuda_api_ns, os_wait_ns, host_ns`` (ns of each cause),
        ``cause`` (the largest), ``call`` (its longest call), ``statement``; longest first."""
        return self.idle.gap_causes()

    def launch_bound(self, min_kernels: int = 8) -> pd.DataFrame:
        """Stretches of at least ``min_kernels`` kernels where the CPU's launch rate set the
        pace (``analysis.launch_bound``): ``device_id, pid, start_ns, end_ns, kernels,
        gpu_busy_ns`` (ns), ``busy_pct`` (percent of the stretch), ``median_kernel_ns,
        median_launch_interval_ns`` (ns), ``cpu_launches_per_ms, gpu_kernels_per_ms``."""
        minimum = count_arg(min_kernels, "min_kernels", "launch_bound()", minimum=1)
        return self.idle.launch_bound(minimum)

    def gpu_info(self) -> dict[str, Any]:
        """The GPU the report names: ``name``, ``sm_count``, ``sm_clock_max_hz`` (Hz),
        ``memory_bytes``, ``memory_bandwidth_bytes_per_s`` (where the report has them)."""
        return self.report.gpu_info()

    # --- where the GPU memory went (issue #37; ``results.memory_frames``) -----------------------
    # an empty frame says why (``attrs["reason"]``: captured without --memory, ...) and warns it
    @functools.cached_property
    def memory(self) -> MemoryFrames:
        """Memory frames: nsys's allocation events, torch's counts and allocator snapshot."""
        return MemoryFrames(self)

    def gpu_memory(self) -> pd.DataFrame:
        """Device memory each process held over time, from nsys's allocation and free events
        (``%%nsys --memory``; empty without them): ``time_ns`` (ns on the report's clock),
        ``device_id, pid, bytes_in_use`` (after the event; what was in use when the capture
        started included, as far as known), ``delta_bytes`` (+ allocated, - freed),
        ``operation`` ("alloc" | "free"), ``address`` (``analysis.gpu_memory``). nsys sees
        cudaMalloc in the process that calls it: PyTorch's reserved segments, not its tensors,
        and not the notebook's tensors a warm worker maps (they are the notebook's memory)."""
        return _said(self.memory.timeline(), "gpu_memory()")

    def gpu_memory_summary(self) -> pd.DataFrame:
        """One row per device and process (``analysis.gpu_memory.memory_summary``):
        ``device_id, pid, start_bytes, peak_bytes, end_bytes, peak_time_ns`` (ns),
        ``allocated_bytes, freed_bytes, allocations, frees``, ``mapped_bytes`` (the notebook's
        memory a warm worker maps, left out of the others: they are the process's own; <NA>
        for a report opened without its run folder),
        ``statement`` (the cell's ``L<n>: ...`` open at the peak) and ``nvtx_range``
        (``domain:range`` of the innermost user range open then), largest peak first."""
        return _said(self.memory.summary(), "gpu_memory_summary()")

    def torch_memory(self) -> pd.DataFrame:
        """PyTorch's own counts around the captured cell, measured in the worker: ``moment``
        (start, peak, end), ``allocated_bytes`` (tensors), ``reserved_bytes`` (what its caching
        allocator holds from CUDA, which nsys sees); empty without CUDA torch."""
        return _said(self.memory.torch_counts(), "torch_memory()")

    def torch_allocations(self, at: str = "peak") -> pd.DataFrame:
        """The tensors alive at the cell's peak of torch's allocated memory (``at="oom"``: at
        its out-of-memory error), largest first, from the allocator snapshot ``%%nsys --memory``
        saves (empty without it): ``address, bytes, frame`` (the line that made it: ``cell
        L<n>``, ``setup 'name' L<n>``, else ``file:line function``; "" made before the cell;
        ``analysis.torch_memory.NO_PYTHON`` made with no Python on the stack: autograd's
        backward thread, C++),
        ``cell_line`` (the notebook line that led there), ``backtrace, before_cell``
        (``analysis.torch_memory.live_at``)."""
        text_arg(at, "at", "torch_allocations()", choices=("peak", "oom"))
        return _said(self.memory.live(at)[0], "torch_allocations()")

    def copies_by_kind(self) -> pd.DataFrame:
        """Per copy kind: ``kind, count, bytes, total_ns`` (ns), ``bandwidth_gb_per_s`` (total
        bytes over total time, GB/s) (``analysis.memory.copies_by_kind``)."""
        return self.report.copies_by_kind()

    def timeline(self, window: tuple[int, int] | None = None, max_rows: int = 5000) -> pd.DataFrame:
        """Timeline rows of the events overlapping ``window`` (all when None), at most
        ``max_rows`` (``analysis.timeline.timeline_frame``): ``lane, kind, start_ns, end_ns``
        (ns), ``name, count`` (events binned into the row), ``short_name, level``."""
        rows = count_arg(max_rows, "max_rows", "timeline()", minimum=1)
        if window is not None:
            ok = isinstance(window, (tuple, list)) and len(window) == 2
            start, end = (count_arg(w, "window", "timeline()") for w in window) if ok else (0, -1)
            if not ok or end < start:
                raise BadArgumentError(
                    f"timeline(): window is {window!r}; pass (start_ns, end_ns) with "
                    "start <= end, as capture_window() gives, or None."
                )
            window = (start, end)
        return self.report.timeline(max_rows=rows, window=window)

    def ordered_projection(self) -> pd.DataFrame:
        """The NVTX projection in reading order: cell, statements by line, then the user's
        ranges (``analysis.statements.ordered_projection``): :meth:`nvtx_gpu_projection`'s
        columns (``domain, range, style, instances, proj_total_ns, range_total_ns, gpu_ops,
        proj_avg_ns, proj_med_ns, proj_min_ns, proj_max_ns, proj_std_ns, avg_gpu_ops,
        avg_level, avg_children``; ns) + each range's phase (``phase_total_ns`` ns,
        ``phase_gpu_ops``: work launched by any thread while it was open, so the statement
        that ran ``loss.backward()`` holds the backward's kernels; :meth:`nvtx_phases`) +
        ``scope`` (cell, statement, warmup, user) and ``line`` (a statement's cell line); a
        ``--repeat`` run's ``repeat_mean_ns, repeat_med_ns, repeat_std_ns, repeat_ci95_lo_ns,
        repeat_ci95_hi_ns, repeat_rsd_pct`` (:meth:`nvtx_gpu_projection`)."""
        table = phases.with_phases(self.nvtx_gpu_projection(), self.nvtx_phases())
        return statements.ordered_projection(table)

    def resolve_nvtx_range(self, spec: str) -> range_spec.NvtxRange:
        """The range ``spec`` (``RANGE`` or ``DOMAIN:RANGE``) names in this run."""
        return range_spec.resolve_nvtx_range(self.nvtx(), spec)

    def kernels_in_range(self, domain: str, range: str) -> pd.DataFrame:
        """Kernels launched inside NVTX range ``domain``/``range`` (nsys's attribution rule,
        ``analysis.attribution.kernels_in_range``, per report)."""
        range_args(domain, range, "kernels_in_range()")
        return self.report.kernels_in_range(domain, range)

    def kernel_phases(self) -> pd.Series:
        """The phase each kernel of :meth:`kernels` was launched in: ``"domain:range"`` of the
        innermost user NVTX range open in its process on any thread ("" none;
        ``analysis.phases.kernel_phases``), on the index of :meth:`kernels`."""
        return self.report.kernel_phases()

    def kernel_ops(self) -> pd.DataFrame:
        """The PyTorch op that launched each kernel (``analysis.torch_ops.kernel_ops``), on the
        index of :meth:`kernels`: ``op, op_id, shapes, op_nvtx_row`` ("", <NA>, "", -1
        outside every op range)."""
        return self.report.kernel_ops()

    def op_summary(self) -> pd.DataFrame:
        """PyTorch ops by GPU time (``analysis.torch_ops.op_summary``), one row per (op,
        shapes): ``op, shapes, calls, top_level_calls, gpu_ops, gpu_time_ns, avg_gpu_time_ns,
        cpu_time_ns`` (ns), ``kernels, kernel_time_ns`` (kernels whose innermost op it is),
        ``model_flops`` (FLOPs of GEMM ops and of their backward nodes, NaN for others),
        ``forward_op`` (a backward node's forward op, joined by ``seq``); needs a run captured with
        ``--pytorch=autograd-shapes-nvtx`` (empty otherwise)."""
        kernels = self.kernels()
        return torch_ops.op_summary(
            self.report.nvtx_gpu_trace(), kernels, self.kernel_ops(), self.nvtx()
        )

    def op_mfu(self, *, dtype: str = "bf16", peak_flops: float | None = None) -> pd.DataFrame:
        """MFU per PyTorch GEMM op from its shapes' 2*M*N*K over its projected GPU time
        (``analysis.mfu.op_mfu``): ``op, shapes, calls, model_flops`` (FLOPs),
        ``gpu_time_ns, time_source, dtype, peak_flops_per_s, peak_source, model_flops_per_s``
        (FLOP/s), ``mfu_frac`` (fraction of the peak; blank above 1, ``reason`` says why),
        best first; op ranges do not record the
        data type: ``dtype``."""
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
        without ``flops``, the 2*M*N*K of the PyTorch GEMM op ranges inside each range, the
        backward's on autograd's thread included) over the range's phase time in this run
        (:meth:`nvtx_phases`: work launched by any thread while it was open), against the
        derived dense peak of this run's GPU for ``dtype`` (or ``peak_flops``, FLOP/s). See
        ``analysis.mfu.model_mfu``.
        Columns: ``domain, range, model_flops`` (FLOPs), ``model_flops_source``,
        ``backward_flops`` (FLOPs: the derived FLOPs done in autograd's backward), ``time_ns``
        (phase time, ns), ``time_source, dtype, peak_flops_per_s, peak_source,
        model_flops_per_s`` (FLOP/s: the same quantity as ``NcuRun.mfu()``'s), ``mfu_frac``
        (fraction of the peak; blank, with ``reason`` saying why, where the FLOPs cannot fit
        the time at the peak). Empty, with the reason in ``attrs["reason"]`` and an
        ``EmptyResultWarning``, for a run captured without ``--pytorch shapes`` when no
        ``flops`` are given. A ``--repeat N`` run adds the time per repeat (``repeat_*``, as
        :meth:`nvtx_phases`) and the MFU's 95% interval, ``mfu_ci95_lo_frac, _hi_frac``."""
        flops = flops_arg(flops, "flops", "NsysRun.mfu()")  # the user's names in the message
        # the report's own frames: the MFU reads their totals, and a --repeat run's
        # per-repeat columns are computed below on the MFU's keys (not twice)
        frame = utilisation.model_mfu(
            self.report.nvtx_gpu_projection(),
            flops,
            nvtx=self.nvtx(),
            phases=self.report.nvtx_phases(),
            gpu_name=self.gpu_info().get("name"),
            dtype=dtype,
            peak_flops=peak_flops,
        )
        return self._repeats.mfu(frame, self.report, utilisation.PHASE_TIME_SOURCE)

    def profile_kernel(
        self,
        name: str,
        *,
        instance: int = 0,
        count: int = 1,
        set: str | None = "roofline",
        sections: Sequence[str] = (),
        metrics: Sequence[str] = (),
        fresh: bool = False,
        timeout: float | None = None,
        rank: int = 0,
        progress: Callable[..., Any] | None = None,
        output: Callable[[str], Any] | None = None,
        cancel: threading.Event | None = None,
    ) -> NcuRun:
        """Run ncu on kernel ``name`` (its exact full name) of this run's cell; what the
        picker's Profile button calls. The child run is kept in ``children``.

        ``instance``: the 0-based launch of that kernel within the cell, ``count`` launches from
        it; ``set`` (an ncu section set, None for none), ``sections``, ``metrics``: what ncu
        collects (``NcuOptions``' drill-able fields); ``fresh``: a cold re-run of the saved
        script instead of the warm ncu worker; ``timeout``: seconds; ``rank``: the rank ncu
        profiles when the cell ran as several; ``progress``/``output``/``cancel``: the status
        line, the cell's output and a stop button. Text is read as ``%%ncu``'s flag reads it
        (``set="none"``, ``metrics="m1,m2"``). An unknown option is a TypeError."""
        if name is None:  # DrillRequest takes None for "the launches a range selects"
            raise BadArgumentError(
                "profile_kernel(): the kernel to profile is None; pass its full name as a "
                "string (the 'name' column of kernel_summary())."
            )
        request = DrillRequest.create(name, instance=instance, count=count, set=set,
                                      sections=sections, metrics=metrics, fresh=fresh,
                                      timeout=timeout, rank=rank)  # fmt: skip
        child = self._drill_runner().profile_kernel(self, request, progress=progress, output=output,
                                                cancel=cancel)  # fmt: skip
        return self._adopt(child)

    def profile_top(
        self,
        n: int = 10,
        *,
        set: str | None = "roofline",
        sections: Sequence[str] = (),
        metrics: Sequence[str] = (),
        fresh: bool = False,
        timeout: float | None = None,
        rank: int = 0,
        progress: Callable[..., Any] | None = None,
        output: Callable[[str], Any] | None = None,
        cancel: threading.Event | None = None,
    ) -> NcuRun:
        """ncu on the ``n`` kernels with the most total time in this run: ONE re-run of the
        cell that profiles the first launch of each (``session/runs/drill.py``'s ``profile_top``),
        not ``n`` drill-downs. One launch per name (ncu 2025.3.1 profiled a kernel launched with
        two grids once); the kernels that filter left out get one more re-run together (then
        one each for any still left out), merged into the same child (``meta["merged_runs"]``),
        and one no pass profiled is a row that says so (the child's ``meta["top_kernels"]``
        lists the ``n`` asked for, docs/sweeps.md). The
        child's :meth:`NcuRun.top_kernels` puts each kernel's share of this run's kernel time
        beside its HFU; its roofline holds all of them, its advice is per kernel. The other
        options are :meth:`profile_kernel`'s. The child run is kept in ``children``."""
        names = top_kernels.top_kernel_names(self.kernel_summary(), n)
        request = DrillRequest.create(set=set, sections=sections, metrics=metrics, fresh=fresh,
                                      timeout=timeout, rank=rank)  # fmt: skip
        child = self._drill_runner().profile_top(
            self, names, request, progress=progress, output=output, cancel=cancel
        )
        return self._adopt(child)

    def profile_range(
        self,
        domain: str,
        name: str,
        style: str = "PushPop",
        *,
        set: str | None = "roofline",
        sections: Sequence[str] = (),
        metrics: Sequence[str] = (),
        fresh: bool = False,
        timeout: float | None = None,
        rank: int = 0,
        progress: Callable[..., Any] | None = None,
        output: Callable[[str], Any] | None = None,
        cancel: threading.Event | None = None,
    ) -> NcuRun:
        """Run ncu on every kernel inside the NVTX range ``domain:name`` (``style``: "PushPop"
        or "StartEnd") of this run's cell (the NVTX tab's "profile this range"); the options
        are ``profile_kernel``'s. The child run is kept in ``children``."""
        range_args(domain, name, "profile_range()")
        text_arg(style, "style", "profile_range()", choices=("PushPop", "StartEnd"))
        request = DrillRequest.create(set=set, sections=sections, metrics=metrics, fresh=fresh,
                                      timeout=timeout, rank=rank)  # fmt: skip
        child = self._drill_runner().profile_range(
            self, NvtxRange(domain, name, style), request, progress=progress, output=output,
            cancel=cancel,
        )  # fmt: skip
        return self._adopt(child)

    def _drill_runner(self) -> DrillRunner:
        if self.run_dir is None:
            raise NsightMagicError(
                "This run was opened from a report file, not profiled here, so there is no "
                "saved cell to re-run under ncu; profile the cell with "
                f"{cell_magic('nsys')} first, or use {cell_magic('ncu')}."
            )
        if self.drill_runner is None:
            raise NsightMagicError(
                "This run has nothing to re-run its cell under ncu: open it with "
                f"nsight_magic.load_run(...) or profile the cell with {cell_magic('nsys')}."
            )
        return self.drill_runner

    def _adopt(self, child: NcuRun) -> NcuRun:
        if getattr(child, "parent", True) is None:
            child.parent = self  # MFU of the child uses this run's real-clock kernel times
        self.children.append(child)
        return child

    def widget(
        self,
        profile_fn: ProfileFn | None = None,
        profile_range_fn: ProfileRangeFn | None = None,
    ) -> Any:
        """The live view; the picker calls ``profile_fn`` (default ``profile_kernel``), its
        "Profile top N" ``profile_top`` and "Profile this range" ``profile_range_fn`` (default
        ``profile_range``)."""
        return nsys_widget(self.frames, profile_fn or self.profile_kernel,
                           profile_range_fn or self.profile_range, self.profile_top)  # fmt: skip

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


def _said(frame: pd.DataFrame, what: str) -> pd.DataFrame:
    """An empty memory or host frame warns its ``attrs["reason"]`` (``errors.EmptyResultWarning``):
    never a silent blank. The views read the reason without the warning."""
    reason = frame.attrs.get("reason", "") if frame.empty else ""
    if reason:
        warnings.warn(f"{what} is empty: {reason}", EmptyResultWarning, stacklevel=3)
    return frame
