"""Every column name a public frame may carry, declared once: its dtype, unit, the title a table
shows over it and the formatter (by name) the views print it with. Column names are API
(ARCHITECTURE.md, "Frame contracts"): tests run every public frame method on the real fixtures
and check each column against this registry, and views take titles and formats from it, so a
renamed column fails a test instead of vanishing from a table.

Most entries are derived from the name's suffix, and a new column takes the suffix of its unit:

- ``_ns`` integer nanoseconds (floats where listed in ``_FLOAT_NS``);
- ``_pct`` a percent (0-100) and ``_frac`` a fraction (0-1: ``mfu_frac`` 0.42 shows as 42.0%):
  a share is never unmarked, so nobody multiplies a percent by 100 again;
- ``_bytes`` a byte count;
- rates end in ``_per_s``: ``_bytes_per_s``, ``_gb_per_s`` (10^9 bytes per second, GB/s, not
  gigabits), ``_flops_per_s`` (a ``_flops`` name without it is a count of FLOPs);
- ``_hz`` a clock, ``_id`` an identifier, ``_count`` a count.

A sweep's frames (``analysis/sweep.py``) also carry columns named by the user: one per swept
variable (``bs``), and in the kernel matrix one per configuration ("bs=8 seq=2048"); each such
frame lists them in ``frame.attrs["named_by_user"]``, and they are the only unregistered
columns a public frame may have.

The rest are declared explicitly. A leaf module: standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# "int" accepts numpy and nullable integer dtypes, "str" object/string dtypes, "object" anything
# (tuples, lists).
Dtype = Literal["int", "float", "str", "bool", "object"]
# The names of the formatters in views/html.py (``html.FORMATTERS``); "text" is a string shown
# shortened with the full text on hover.
Format = Literal[
    "text", "num", "id", "ns", "signed_ns", "pct", "fraction", "bytes", "bytes_per_s",
    "flops_per_s", "hz", "gb_per_s", "times",
]  # fmt: skip


@dataclass(frozen=True)
class Column:
    """One column: ``unit`` in words ("ns", "%", "fraction", "B", "B/s", "FLOP/s", "Hz", "GB/s",
    "FLOP", "x" or "" for none), ``title`` the default table header."""

    name: str
    dtype: Dtype
    unit: str
    title: str
    format: Format


class UnknownColumnError(KeyError):
    """A column name that is not in the registry (a typo, or a rename that missed a reader)."""


# suffix -> (dtype, unit, format); the longest matching suffix wins.
_SUFFIXES: dict[str, tuple[Dtype, str, Format]] = {
    "_ns": ("int", "ns", "ns"),
    "_pct": ("float", "%", "pct"),
    "_frac": ("float", "fraction", "fraction"),
    "_bytes": ("int", "B", "bytes"),
    "_bytes_per_s": ("float", "B/s", "bytes_per_s"),
    "_gb_per_s": ("float", "GB/s", "gb_per_s"),
    "_flops_per_s": ("float", "FLOP/s", "flops_per_s"),
    "_per_s": ("float", "1/s", "num"),
    "_hz": ("float", "Hz", "hz"),
    "_id": ("int", "", "id"),
    "_count": ("int", "", "num"),
}


def derived(name: str, title: str | None = None, dtype: Dtype | None = None) -> Column:
    """The column its suffix describes (``dtype`` overrides: ``avg_ns`` is a float)."""
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            kind, unit, fmt = _SUFFIXES[suffix]
            default_title = name[: -len(suffix)].replace("_", " ")  # "gpu_time_ns" -> "gpu time"
            return Column(name, dtype or kind, unit, title or default_title, fmt)
    raise ValueError(f"{name!r} has no unit suffix ({', '.join(_SUFFIXES)}): declare it")


def text(name: str, title: str | None = None) -> Column:
    return Column(name, "str", "", title or name.replace("_", " "), "text")


def count(name: str, title: str | None = None) -> Column:
    return Column(name, "int", "", title or name.replace("_", " "), "num")


def ident(name: str, title: str | None = None) -> Column:
    return Column(name, "int", "", title or name.replace("_", " "), "id")


def number(name: str, title: str | None = None, unit: str = "") -> Column:
    return Column(name, "float", unit, title or name.replace("_", " "), "num")


# averages, medians, deviations and MFU times are floats
_FLOAT_NS = ("avg_ns", "med_ns", "std_ns", "time_ns", "avg_gpu_time_ns", "proj_avg_ns",
             "proj_med_ns", "proj_std_ns", "range_time_ns", "median_kernel_ns",
             "median_launch_interval_ns", "idle_ns",
             # %%nsys --repeat: a total's statistics over the repeats (analysis/repeats.py)
             "repeat_mean_ns", "repeat_med_ns", "repeat_std_ns", "repeat_ci95_lo_ns",
             "repeat_ci95_hi_ns", "wall_ns")  # fmt: skip

# of a %%nsys --repeat run's statistics (analysis/repeats.py), those a table shows beside its
# own: the views' kernel and NVTX tables and nsight-magic summary
REPEAT_SHOWN = ("repeat_mean_ns", "repeat_ci95_lo_ns", "repeat_ci95_hi_ns", "repeat_rsd_pct")

_DERIVED = [
    # times (integer ns on the report's clock unless listed in _FLOAT_NS)
    "start_ns", "end_ns", "duration_ns", "total_ns", "min_ns", "max_ns", "proj_total_ns",
    "proj_min_ns", "proj_max_ns",
    "proj_start_ns", "proj_end_ns", "proj_duration_ns", "range_total_ns", "gpu_time_ns",
    # a range's phase: work launched by any thread while it was open (analysis/phases.py)
    "phase_total_ns", "phase_start_ns", "phase_end_ns", "phase_duration_ns",
    "kernel_time_ns", "cpu_time_ns", "graph_time_ns", "memcpy_time_ns", "memset_time_ns",
    "wait_ns", "skew_ns", "span_ns", "gpu_busy_ns", "cuda_api_ns", "cuda_sync_ns", "host_ns",
    "os_wait_ns", "end_spread_ns", "first_start_ns", "last_start_ns", "last_end_ns",
    *_FLOAT_NS,
    # percents
    "time_pct", "busy_pct", "gpu_time_pct", "compute_sol_pct", "memory_sol_pct",
    "achieved_occupancy_pct", "theoretical_occupancy_pct", "occupancy_pct", "speedup_pct",
    "bound_pct", "ceiling_pct", "hfu_frac", "mfu_frac", "repeat_rsd_pct",
    "mfu_ci95_lo_frac", "mfu_ci95_hi_frac",
    # bytes and rates
    "total_bytes", "min_bytes", "max_bytes", "memcpy_bytes", "static_smem_bytes",
    "dynamic_smem_bytes", "shared_mem_bytes", "dram_bytes_per_s", "peak_dram_bytes_per_s",
    "start_bytes", "peak_bytes", "end_bytes", "delta_bytes", "allocated_bytes", "freed_bytes",
    "before_capture_bytes", "reserved_bytes", "largest_bytes", "requested_bytes", "used_bytes",
    "mapped_bytes",
    # a sweep's configuration (analysis/sweep.py) and profile_top's kernels (top_kernels.py)
    "cell_wall_ns", "run_wall_ns", "gpu_busy_pct", "top_kernel_pct", "peak_memory_bytes",
    "nsys_total_ns", "nsys_time_pct",
    "peak_time_ns", "peak_change_bytes", "a_peak_bytes", "b_peak_bytes",
    "bandwidth_gb_per_s", "ceiling_flops_per_s", "hw_flops_per_s", "model_flops_per_s",
    "peak_flops_per_s",
    "sm_clock_hz",
    # identifiers
    "device_id", "context_id", "stream_id", "correlation_id", "graph_id", "graph_exec_id",
    "graph_node_id", "process_id", "op_id",
    # counts
    "memcpy_count", "memset_count",
]  # fmt: skip
_TITLES = {
    "repeat_mean_ns": "per repeat", "repeat_med_ns": "median/repeat",
    "repeat_std_ns": "std/repeat", "repeat_ci95_lo_ns": "95% low/repeat",
    "repeat_ci95_hi_ns": "95% high/repeat", "repeat_rsd_pct": "RSD %", "wall_ns": "wall",
    "mfu_ci95_lo_frac": "MFU 95% low", "mfu_ci95_hi_frac": "MFU 95% high",
    "avg_ns": "avg", "med_ns": "median", "std_ns": "std dev", "min_ns": "min", "max_ns": "max",
    "total_ns": "total", "duration_ns": "duration", "time_pct": "time %",
    "stream_id": "stream", "device_id": "device", "sm_clock_hz": "SM clock",
    "proj_total_ns": "GPU time", "range_total_ns": "CPU range time",
    "phase_total_ns": "phase time (any thread)", "busy_pct": "GPU busy",
    "gpu_time_ns": "GPU time", "gpu_time_pct": "GPU time %", "kernel_time_ns": "own kernel time",
    "wait_ns": "waiting for others", "skew_ns": "skew", "end_spread_ns": "end spread",
    "compute_sol_pct": "compute SOL", "memory_sol_pct": "memory SOL",
    "achieved_occupancy_pct": "occupancy", "memcpy_bytes": "copied", "memcpy_count": "copies",
    "time_ns": "time", "ceiling_pct": "% of its ceiling", "hfu_frac": "HFU (hardware FLOPs)",
    "mfu_frac": "MFU (model FLOPs)", "bandwidth_gb_per_s": "GB/s", "peak_flops_per_s": "peak",
    "hw_flops_per_s": "hardware FLOP/s", "model_flops_per_s": "model FLOP/s",
    "start_bytes": "at start", "peak_bytes": "peak", "end_bytes": "at end",
    "delta_bytes": "change", "before_capture_bytes": "freed, made before the capture",
    "peak_time_ns": "peak at", "largest_bytes": "largest", "peak_change_bytes": "change",
    "mapped_bytes": "the notebook's, mapped",
    "cell_wall_ns": "cell wall time", "run_wall_ns": "whole run", "gpu_busy_pct": "GPU busy",
    "top_kernel_pct": "top kernel %", "peak_memory_bytes": "peak memory",
    "nsys_total_ns": "nsys total", "nsys_time_pct": "share of nsys kernel time",
}  # fmt: skip

_EXPLICIT = [
    # names and labels
    text("name"), text("short_name", "kernel"), text("mangled_name"), text("demangled"),
    text("mangled"), text("domain"), text("range"), text("style"), text("label", "range"),
    text("kind"), text("lane"), text("op"), text("shapes"), text("operation"), text("payload"),
    text("scope"), text("nvtx", "NVTX"), text("grid"), text("block"), text("devices", "GPUs"),
    text("host"), text("source"), text("communicator"), text("algorithm"), text("protocol"),
    text("dtype"), text("precision"), text("tensor_op_path"), text("bound"),
    text("verdict", "bound"),
    text("ceiling"), text("time_source", "time from"), text("peak_source", "peak source"),
    text("model_flops_source", "model FLOPs from"), text("metric"), text("unit"),
    text("rule"), text("section"), text("section_name"), text("title"), text("message"),
    text("severity"), text("speedup_type"),
    # the GPU op (kernel, copy, set, graph launch) on either side of an idle gap, full and short:
    # prev_op ended at the gap's start, next_op starts at its end
    text("prev_op", "previous GPU op"), text("next_op", "next GPU op"),
    text("prev_op_short", "previous GPU op"), text("next_op_short", "next GPU op"),
    # counts
    count("instances"), count("instances_a"), count("instances_b"), count("instance", "#"),
    count("calls"), count("top_level_calls"), count("kernels"), count("launches"),
    count("graph_launches"), count("graph_node_instances", "as CUDA graph node"),
    count("gpu_ops", "GPU ops"), count("phase_gpu_ops", "phase GPU ops"), count("count"),
    count("children"), count("ranks"),
    count("times_last"), count("level"), count("line"), count("registers_per_thread", "regs"),
    count("registers"), count("block_x"), count("block_y"), count("block_z"), count("grid_x"),
    count("grid_y"), count("grid_z"), count("return_value"), count("op_nvtx_row"),
    count("parent"),
    # byte counts with no _bytes suffix
    Column("bytes", "int", "B", "bytes", "bytes"),
    Column("dram_bytes", "float", "B", "DRAM bytes", "bytes"),
    Column("avg_bytes", "float", "B", "avg", "bytes"),
    Column("med_bytes", "float", "B", "median", "bytes"),
    Column("std_bytes", "float", "B", "std dev", "bytes"),
    # identifiers
    Column("delta_ns", "int", "ns", "delta", "signed_ns"),
    Column("total_ns_a", "int", "ns", "total (a)", "ns"),
    Column("total_ns_b", "int", "ns", "total (b)", "ns"),
    ident("pid"), ident("tid"), ident("end_tid"), ident("rank"), ident("report"),
    ident("launch"), ident("first_rank", "first in"), ident("last_rank", "last in"),
    # plain numbers
    number("avg_level"), number("avg_children"), number("avg_gpu_ops"),
    number("arithmetic_intensity", "FLOP/byte", "FLOP/B"), number("ridge_ai", unit="FLOP/B"),
    number("value"), number("peak"),  # a ceiling's peak: FLOP/s or B/s, ``kind`` says which
    # FLOP counts and FLOP rates without the _flops_per_s suffix
    number("model_flops", "model FLOPs", "FLOP"), number("hw_flops", "hardware FLOPs", "FLOP"),
    number("flop_count_fp64", unit="FLOP"), number("flop_count_fp32", unit="FLOP"),
    number("flop_count_fp16", unit="FLOP"), number("flop_count_tensor", unit="FLOP"),
    number("flop_count_total", unit="FLOP"),
    Column("flops_per_s", "float", "FLOP/s", "achieved", "flops_per_s"),
    Column("fp64_flops_per_s", "float", "FLOP/s", "FP64", "flops_per_s"),
    Column("fp32_flops_per_s", "float", "FLOP/s", "FP32", "flops_per_s"),
    Column("fp16_flops_per_s", "float", "FLOP/s", "FP16", "flops_per_s"),
    Column("tensor_flops_per_s", "float", "FLOP/s", "tensor", "flops_per_s"),
    Column("peak_fp64_flops_per_s", "float", "FLOP/s", "FP64 peak", "flops_per_s"),
    Column("peak_fp32_flops_per_s", "float", "FLOP/s", "FP32 peak", "flops_per_s"),
    Column("peak_fp16_flops_per_s", "float", "FLOP/s", "FP16 peak", "flops_per_s"),
    Column("peak_tensor_flops_per_s", "float", "FLOP/s", "tensor peak", "flops_per_s"),
    Column("ratio", "float", "x", "b / a", "times"),
    # compare(): the change's 95% interval and its word (analysis/verdict.py); a statement's
    # line in each run (matched by its text: analysis/compare.py)
    Column("ratio_lo", "float", "x", "b / a low (95%)", "times"),
    Column("ratio_hi", "float", "x", "b / a high (95%)", "times"),
    text("interval_from", "interval from"), text("change"),
    count("line_a", "line (a)"), count("line_b", "line (b)"),
    Column("moved", "bool", "", "moved", "text"),
    Column("plottable", "bool", "", "plottable", "text"),
    # HFU over what ncu profiled of a range (analysis/range_mfu.py)
    text("coverage", "launches profiled"), count("launches_profiled"), count("launches_total"),
    text("range_time_source", "range time from"), text("forward_op", "forward op"),
    text("phase"),
    text("forward_shapes", "forward shapes"), count("forward_nvtx_row"),
    number("forward_flops", "forward FLOPs", "FLOP"),
    number("backward_flops", "backward FLOPs", "FLOP"),
    # why an HFU/MFU is blank (analysis/plausible.py)
    text("reason", "why blank"), text("occupancy_source", "occupancy is"),
    # why the GPU idled (analysis/idle.py, idle_summary.py, launch_bound.py; reports/nsys/host.py)
    text("category"), text("call"), text("cause"), text("statement"), text("sentence", "cause"),
    text("frame"), text("backtrace"), count("gap"), count("gaps"),
    Column("pct", "float", "%", "%", "pct"), count("callchain_id"), count("nesting_level"),
    number("cpu_launches_per_ms", "CPU launches/ms", "1/ms"),
    Column("start_ms", "float", "ms", "at", "num"),  # the Idle tab's offset into the capture
    number("gpu_kernels_per_ms", "GPU kernels/ms", "1/ms"),
    Column("focus_metrics", "object", "", "focus metrics", "text"),
    # where the GPU memory went (analysis/gpu_memory.py, analysis/torch_memory.py)
    Column("bytes_in_use", "int", "B", "in use", "bytes"), ident("address"),
    text("memory_kind", "memory kind"), count("allocations"), count("frees"),
    text("nvtx_range", "NVTX range"), text("moment"), text("action"),
    Column("before_cell", "bool", "", "made before the cell", "text"), count("seq"),
    text("process"), text("role"), text("at"), text("cell_line", "cell line"),
    text("statement_a", "statement at peak (a)"), text("statement_b", "statement at peak (b)"),
    # a sweep (analysis/sweep.py): one row per configuration; its swept variables' columns and
    # the kernel matrix's configuration columns are named by the user (frame.attrs
    # ["named_by_user"] lists them), so no registry can hold them
    text("config", "configuration"), text("status"), text("error"),
    text("top_kernel", "top kernel"), text("top_kernel_short", "top kernel"),
    # profile_top (analysis/top_kernels.py): each profiled kernel's place in the nsys run
    count("nsys_instances", "nsys launches"), count("nsys_rank", "nsys rank"),
    # %%nsys --repeat (analysis/repeats.py): a repeat's number (1-based), repeats of a run
    count("repeat"), count("repeats"),
]  # fmt: skip


def _build() -> dict[str, Column]:
    registry: dict[str, Column] = {}
    for column in [derived(n, _TITLES.get(n), "float" if n in _FLOAT_NS else None)
                   for n in _DERIVED] + _EXPLICIT:  # fmt: skip
        if column.name in registry:
            raise ValueError(f"column {column.name!r} is declared twice")
        registry[column.name] = column
    return registry


COLUMNS: dict[str, Column] = _build()


def column(name: str) -> Column:
    """The registered column ``name``; ``UnknownColumnError`` for a name nobody declared."""
    try:
        return COLUMNS[name]
    except KeyError:
        raise UnknownColumnError(
            f"column {name!r} is not in nsight_magic/vocabulary/columns.py: declare it there"
        ) from None
