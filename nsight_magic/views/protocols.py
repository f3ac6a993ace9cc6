"""What the views need from a run, as Protocols: results implement them (``results.frames``)
and hand them in, so views import nothing from analysis, reports, results or session. Column
names are those of ARCHITECTURE.md's frame contracts. Any method may raise: the view shows the
error as one line where that table or chart would be."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pandas as pd

# profile_fn(kernel_name, *, progress, cancel, set, instance, count) -> an NcuRun-like object
# whose ``widget()`` is its view. profile_range_fn(domain, range, style, *, progress, cancel,
# set) -> the same.
ProfileFn = Callable[..., Any]
ProfileRangeFn = Callable[..., Any]


class NsysSource(Protocol):
    name: str

    def header(self) -> dict[str, Any]:
        """``gpu, captured_ns, busy_pct, kernels, run_dir`` (None where unknown)."""
        ...

    def kernel_table(self) -> pd.DataFrame:
        """``kernel_summary()`` columns + ``short_name`` (+ ``grid, block, registers``)."""
        ...

    def nvtx_table(self) -> pd.DataFrame:
        """NVTX GPU projection in display order + ``label`` ("domain:range")."""
        ...

    def copies(self) -> pd.DataFrame:
        """``kind, count, bytes, total_ns, bandwidth_gbps``."""
        ...

    def gaps(self, min_gap_ns: int) -> pd.DataFrame: ...

    def origin_ns(self) -> int: ...

    def timeline(
        self, window: tuple[int, int] | None = None, rows: int | None = None
    ) -> pd.DataFrame:
        """``lane, kind, start_ns, end_ns, name, short_name, count``, binned to at most ``rows``
        (the source's own budget when None)."""
        ...

    def nvtx_ranges(self) -> pd.DataFrame:
        """Distinct ``domain, range, style, label``."""
        ...

    def ranked_kernels(self, nvtx_range: tuple[str, str] | None = None) -> pd.DataFrame:
        """``name, short_name, instances, total_ns``, by total GPU time."""
        ...

    def instances(self, kernel: str) -> int: ...


class NcuSource(Protocol):
    name: str

    def header(self) -> dict[str, Any]:
        """``launches, kernels, sm_clock_hz, run_dir``."""
        ...

    def launches(self) -> pd.DataFrame:
        """``NcuReport.kernels()`` + SOL columns + ``short_name``."""
        ...

    def sol(self) -> pd.DataFrame: ...

    def sections(self, launch: int) -> dict[str, pd.DataFrame]: ...

    def advice(self) -> pd.DataFrame:
        """``launch, name, rule, section, title, message, speedup_pct, speedup_type``."""
        ...

    def roofline(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(points, ceilings): see ``views.roofline_chart``."""
        ...

    def mfu(self) -> dict[str, pd.DataFrame]:
        """``{"kernels": ..., "ranges": ...}`` MFU frames (``hfu, mfu, peak_flops,
        peak_source, time_source, flops_source``)."""
        ...


class ComparisonSource(Protocol):
    label_a: str
    label_b: str
    kernels: pd.DataFrame  # name, (short_name,) instances_a/b, total_ns_a/b, delta_ns, ratio
    nvtx: pd.DataFrame  # same keyed by label ("domain:range")
