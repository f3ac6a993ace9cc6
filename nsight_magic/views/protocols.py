"""What the views need from a run, as Protocols: results implement them (``results.frames``,
``results.rank_frames``, ``results.ncu_frames``) and hand them in, so views import nothing from
analysis, reports, results or session. Column names are those of ARCHITECTURE.md's frame
contracts. Any method may raise: the view shows the error as one line where that table or chart
would be."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import pandas as pd


class ProfileFn(Protocol):
    """The picker's Profile button (``NsysRun.profile_kernel``): ncu on launches ``instance``..
    ``instance + count - 1`` of kernel ``name`` with ncu's section set ``set``, reporting to
    ``progress``, stopped by ``cancel``; returns an NcuRun-like object whose ``widget()`` is its
    view. Declared here, keyword by keyword, so a picker option that the session does not take
    fails the type check instead of reaching it as ``**kwargs``."""

    def __call__(
        self,
        name: str,
        *,
        instance: int = ...,
        count: int = ...,
        set: str | None = ...,
        progress: Callable[..., Any] | None = ...,
        cancel: threading.Event | None = ...,
    ) -> Any: ...


class ProfileTopFn(Protocol):
    """The picker's "Profile top N" button (``NsysRun.profile_top``): ONE ncu re-run of the
    cell that profiles the first launch of each of the ``n`` kernels with the most total time,
    as :class:`ProfileFn`."""

    def __call__(
        self,
        n: int = ...,
        *,
        set: str | None = ...,
        progress: Callable[..., Any] | None = ...,
        cancel: threading.Event | None = ...,
    ) -> Any: ...


class ProfileRangeFn(Protocol):
    """ "Profile this range" (``NsysRun.profile_range``): ncu on every kernel inside the NVTX
    range ``domain:name`` (``style``: "PushPop" or "StartEnd"), as :class:`ProfileFn`."""

    def __call__(
        self,
        domain: str,
        name: str,
        style: str = ...,
        *,
        set: str | None = ...,
        progress: Callable[..., Any] | None = ...,
        cancel: threading.Event | None = ...,
    ) -> Any: ...


class TimelineSource(Protocol):
    def origin_ns(self) -> int: ...

    def timeline(
        self, window: tuple[int, int] | None = None, rows: int | None = None
    ) -> pd.DataFrame:
        """``lane, kind, start_ns, end_ns, name, short_name, count``, binned to at most ``rows``
        (the source's own budget when None)."""
        ...


class RankSource(TimelineSource, Protocol):
    """A multi-rank run (two or more ranks); its timeline has ``rank r / ...`` lanes."""

    def count(self) -> int:
        """How many processes have a rank."""
        ...

    def summary(self) -> dict[str, Any]:
        """``ranks, nccl_time_ns, max_skew_ns, straggler_rank`` (+ more; None where unknown)."""
        ...

    def kernels(self) -> pd.DataFrame:
        """``rank`` + ``kernel_summary`` columns (with ``short_name``), one block per rank."""
        ...

    def collectives(self) -> pd.DataFrame:
        """``rank, kind, instances, total_ns, avg_ns, max_ns, bytes, wait_ns, times_last``."""
        ...

    def collective_kernels(self) -> pd.DataFrame:
        """One row per NCCL kernel: ``rank, kind, instance, duration_ns, bytes, dtype,
        algorithm, protocol, stream_id``."""
        ...

    def skew(self) -> pd.DataFrame:
        """Per collective instance: ``kind, instance, ranks, bytes, first_rank, last_rank,
        skew_ns, end_spread_ns``."""
        ...

    def busy(self) -> pd.DataFrame:
        """``pid, rank, busy_pct``."""
        ...


class IdleSource(Protocol):
    """Why the GPU idled (``results.idle_frames.IdleFrames``; numbers from ``analysis.idle``)."""

    def summary(self) -> dict[str, Any]:
        """``idle_ns, gaps, host_capture`` (bool: OS runtime calls or Python samples present),
        ``collective_wait_ns``."""
        ...

    def causes(self, top: int = 5) -> pd.DataFrame:
        """``category, call, frame, statement, idle_ns, pct, sentence``, largest first."""
        ...

    def breakdown(self) -> pd.DataFrame:
        """``scope, rank, statement, category, call, frame, idle_ns, pct, gaps``."""
        ...

    def gap_causes(self) -> pd.DataFrame:
        """One row per idle gap: ``start_ns, end_ns, duration_ns, next_op, cause, call,
        statement, cuda_sync_ns, cuda_api_ns, os_wait_ns, host_ns`` (+ ``device_id, rank``),
        longest first."""
        ...

    def launch_bound(self, min_kernels: int = 8) -> pd.DataFrame:
        """``device_id, pid, start_ns, end_ns, kernels, gpu_busy_ns, busy_pct,
        median_kernel_ns, median_launch_interval_ns, cpu_launches_per_ms,
        gpu_kernels_per_ms``, longest first."""
        ...


class NsysSource(TimelineSource, Protocol):
    name: str

    def header(self) -> dict[str, Any]:
        """``gpu, captured_ns, busy_pct, kernels, graph_launches`` (whole-graph launches of a
        graph-level trace), ``processes`` (list of "name (pid)" when more than one process ran
        GPU work), ``ranks, run_dir``, ``memory_peak_bytes, memory_peak_at`` (``--memory``: the
        largest process peak and the statement open then) (None where unknown)."""
        ...

    def warnings(self) -> list[str]:
        """One line each: what to know before trusting the report."""
        ...

    def kernel_table(self) -> pd.DataFrame:
        """``kernel_summary()`` columns + ``short_name`` (+ ``grid, block, registers``,
        ``graph_node_instances``)."""
        ...

    def graph_table(self) -> pd.DataFrame:
        """Whole CUDA graph launches per graph: ``graph_id, name, launches, total_ns, avg_ns,
        ..., time_pct`` (empty unless graphs were traced as graphs)."""
        ...

    def nvtx_table(self) -> pd.DataFrame:
        """NVTX GPU projection in display order + ``phase_total_ns, phase_gpu_ops`` (work
        launched by any thread while the range was open) + ``label`` ("domain:range")."""
        ...

    def phases_differ(self) -> bool:
        """Whether some range's phase time differs from its own thread's GPU time."""
        ...

    def copies(self) -> pd.DataFrame:
        """``kind, count, bytes, total_ns, bandwidth_gb_per_s``."""
        ...

    def gaps(self, min_gap_ns: int) -> pd.DataFrame: ...

    def nvtx_ranges(self) -> pd.DataFrame:
        """Distinct ``domain, range, style, label``."""
        ...

    def ranked_kernels(self, nvtx_range: tuple[str, str] | None = None) -> pd.DataFrame:
        """``name, short_name, instances, total_ns`` (+ ``op``, ``phase``), by total GPU
        time."""
        ...

    def instances(self, kernel: str) -> int: ...

    def process_table(self) -> pd.DataFrame:
        """GPU work per process: ``pid, name, kernels, kernel_time_ns, graph_launches,
        memcpy_count, memcpy_bytes, gpu_time_ns, gpu_time_pct, devices`` (+ ``rank``)."""
        ...

    def has_op_ranges(self) -> bool:
        """Whether the run has PyTorch op ranges (without them ``op_table`` is empty)."""
        ...

    def several_processes(self) -> bool:
        """Whether more than one process ran GPU work (the Processes tab is shown then)."""
        ...

    def op_table(self) -> pd.DataFrame:
        """PyTorch ops by GPU time: ``op, shapes, calls, kernels, kernel_time_ns, gpu_time_ns,
        model_flops, mfu_frac, peak_flops_per_s, peak_source`` (empty without op ranges)."""
        ...

    def ranks(self) -> RankSource | None:
        """The per-rank frames, None for a run with fewer than two ranks."""
        ...

    def idle(self) -> IdleSource:
        """Why the GPU idled: the Idle tab's frames."""
        ...


class NcuSource(Protocol):
    name: str

    def header(self) -> dict[str, Any]:
        """``launches, kernels, sm_clock_hz, run_dir``."""
        ...

    def warnings(self) -> list[str]:
        """One line each: what was wrong with the file and what was left out."""
        ...

    def launches(self) -> pd.DataFrame:
        """``NcuReport.kernels()`` + SOL columns + ``short_name`` + ``occupancy_pct,
        occupancy_source`` (achieved, else theoretical, and which)."""
        ...

    def sol(self) -> pd.DataFrame: ...

    def sections(self, launch: int) -> dict[str, pd.DataFrame]: ...

    def advice(self) -> pd.DataFrame:
        """``launch, name, rule, section, title, message, speedup_pct, speedup_type,
        severity``, largest estimated speedup first."""
        ...

    def advice_note(self) -> str:
        """Why ``advice()`` is empty ("" when it is not)."""
        ...

    def roofline(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(points, ceilings): see ``views.roofline_chart``."""
        ...

    def mfu(self) -> dict[str, pd.DataFrame]:
        """``{"kernels": ..., "ranges": ...}``: ``hfu_frac`` (hardware FLOPs) and ``mfu_frac``
        (model FLOPs, NaN when unknown) with ``peak_flops_per_s, peak_source, time_source,
        model_flops_source``."""
        ...


class ComparisonSource(Protocol):
    label_a: str
    label_b: str
    kernels: pd.DataFrame  # name, (short_name,) instances_a/b, total_ns_a/b, delta_ns, ratio
    nvtx: pd.DataFrame  # same keyed by label ("domain:range")
    memory: pd.DataFrame  # device_id, a_peak_bytes, b_peak_bytes, peak_change_bytes, ratio, ...

    def summary(self) -> str:
        """The comparison in one line (``analysis.verdict.Verdict.line``): shown first."""
        ...


class SweepSource(Protocol):
    """A sweep (``results.sweep_frames.SweepFrames``): one row per configuration and the
    kernel x configuration matrix; the swept variables' columns are named by the user."""

    def header(self) -> dict[str, Any]:
        """``name, folder, variables, configs, ok, failed, cancelled``."""
        ...

    def variables(self) -> list[str]: ...

    def table(self) -> pd.DataFrame:
        """``config``, the swept variables, ``status, error, cell_wall_ns, run_wall_ns,
        gpu_time_ns, gpu_busy_pct, top_kernel, top_kernel_short, top_kernel_pct,
        peak_memory_bytes``."""
        ...

    def kernels(self) -> pd.DataFrame:
        """``name, short_name``, one column per configuration (ns), ``total_ns``; the
        configuration columns in ``attrs["named_by_user"]``."""
        ...

    def axis_scale(self, variable: str) -> str:
        """How ``variable``'s axis reads: "log2", "linear" or "ordinal"."""
        ...

    def top_kernels(self, top: int = 5) -> pd.DataFrame:
        """Each configuration's ``top`` kernels: ``config, name, short_name, instances,
        total_ns, time_pct`` (its share of that configuration's kernel time)."""
        ...
