"""Why the GPU idles, computed for one run: the inputs ``analysis.idle`` needs, gathered from the
report (single process, several processes or ranks), and its results cached per run. The
numbers are the analysis modules'; this only wires report frames to them."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ..analysis import data_loader, idle, idle_summary
from ..analysis import launch_bound as launches
from ..analysis.gaps import gpu_ops
from ..vocabulary.magic_names import cell_magic
from .memory_frames import with_reason

# what each host-side frame holds, and the nsys option that records it (``%%nsys --host``
# turns both on: profilers/nsys.py HOST_TRACE, HOST_LAUNCH)
_HOST_RECORDS = {
    "osrt": ("OS runtime calls", "--trace=osrt"),
    "python": ("Python samples", "--python-sampling=true"),
}


def with_host_reason(frame: pd.DataFrame, meta: Mapping[str, Any], kind: str) -> pd.DataFrame:
    """A host-side frame (``kind``: "osrt" or "python") with why it is empty in
    ``attrs["reason"]``, as the memory frames say theirs (``memory_frames.with_reason``): the
    run was captured without ``--host``, or with it and nsys recorded none, or the report
    was opened without its run folder (no record of how it was captured)."""
    if not frame.empty:
        return frame
    what, option = _HOST_RECORDS[kind]
    flag = f"{cell_magic('nsys')} --host"
    options = meta.get("options")
    if isinstance(options, dict) and options.get("host") is True:
        why = (
            f"This run was captured with --host, yet nsys recorded no {what} in the capture "
            "(its profiler.log in the run folder may say why)."
        )
    elif isinstance(options, dict):
        why = (
            f"This run was captured without --host, so nsys recorded no {what} ({option}). "
            f"Profile the cell with {flag} to see them (the host side slows the cell)."
        )
    else:
        why = f"This report holds no {what}: nsys records them with {option} ({flag})."
    return with_reason(frame.copy(), why)


class IdleFrames:
    """Idle-time frames of a report (``NsysReport`` or ``RankedReport``)."""

    def __init__(self, report: Any, min_gap_ns: int = 0) -> None:
        self.report = report
        self.min_gap_ns = min_gap_ns

    @functools.cached_property
    def _ops(self) -> pd.DataFrame:
        r = self.report
        kernels = r.kernels()
        keys = [k for k in ("report", "rank") if k in kernels] + ["pid", "correlation_id"]
        memcpy, memset = r.memcpy(), r.memset()
        if "rank" in keys:  # copies of merged reports carry the rank column too
            keys = [k for k in keys if k in memcpy and (memset.empty or k in memset)]
        graphs = r.graph_launches()  # whole graph launches (graph-level trace) are GPU work
        graphs = graphs if all(k in graphs for k in keys) else None
        ops = gpu_ops(kernels, memcpy, memset, graphs, keys=keys)
        return ops.assign(tid=idle.launch_threads(ops, r.cuda_api()))

    @functools.cached_property
    def gaps(self) -> pd.DataFrame:
        """``idle.gpu_idle_gaps`` of the run's kernels, copies and sets: ``gap, device_id,
        start_ns, end_ns, duration_ns`` (ns), ``next_op`` (the op after the gap), ``pid, tid``
        (the thread that launched it) (+ ``report, rank``)."""
        return idle.gpu_idle_gaps(self._ops, self.min_gap_ns)

    @functools.cached_property
    def _samples(self) -> pd.DataFrame:
        return self.report.python_samples()

    @functools.cached_property
    def _statements(self) -> pd.DataFrame:
        """The cell's statement ranges (``idle.statement_ranges``): the pieces and the
        collective waits are each placed in one."""
        return idle.statement_ranges(self.report.nvtx())

    @functools.cached_property
    def _launch_times(self) -> pd.DataFrame:
        """The kernels with the API call that launched each (``launch_bound.launch_times``),
        for the collective waits and the launch-bound stretches alike."""
        return launches.launch_times(self.report.kernels(), self.report.cuda_api())

    @functools.cached_property
    def _pieces(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        r = self.report
        samples = self._samples
        cuda_frames = samples[(samples["kind"] == "cuda").to_numpy()] if len(samples) else None
        periodic = samples[(samples["kind"] == "periodic").to_numpy()] if len(samples) else None
        if periodic is not None:  # a sample in the DataLoader reads as what it waited for
            periodic = periodic.assign(frame=data_loader.loader_frames(periodic))
        calls = idle.host_calls(r.cuda_api(), r.osrt(), cuda_frames, periodic)
        return idle.idle_pieces(self.gaps, calls, self._statements, periodic)

    @functools.cached_property
    def _waits(self) -> pd.DataFrame | None:
        r = self.report
        if not hasattr(r, "collectives"):
            return None
        waits = idle_summary.collective_waits(r.collectives(), r.rank_skew())
        # the statement that launched the collective (its kernel may start long after)
        kernels = self._launch_times
        keys = [k for k in ("report", "pid", "start_ns") if k in waits and k in kernels]
        launched = waits.merge(kernels[[*keys, "launch_start_ns"]].drop_duplicates(keys),
                               on=keys, how="left")  # fmt: skip
        at = launched["launch_start_ns"].fillna(launched["start_ns"]).astype("int64")
        statement = idle.statements_of(
            launched.assign(at_ns=at.to_numpy()), self._statements, at="at_ns"
        )
        return waits.assign(statement=statement)

    def pieces(self) -> pd.DataFrame:
        """Each gap cut by the launching thread's calls (``analysis.idle.idle_pieces``): ``gap,
        device_id, pid, tid, start_ns, end_ns, duration_ns`` (ns), ``category, call, frame,
        statement``."""
        return self._pieces[0]

    @functools.cached_property
    def _breakdown(self) -> pd.DataFrame:
        pieces, samples = self._pieces
        return idle_summary.idle_breakdown(pieces, samples, self._waits)

    def breakdown(self) -> pd.DataFrame:
        """Idle time by cause (``analysis.idle_summary.idle_breakdown``): ``scope, rank,
        statement, category, call, frame, idle_ns`` (ns), ``pct`` (percent of the scope's idle
        time), ``gaps``."""
        return self._breakdown

    def causes(self, top: int = 5) -> pd.DataFrame:
        """The ``top`` causes (``analysis.idle_summary.idle_causes`` of :meth:`breakdown`):
        ``category, call, frame, statement, idle_ns`` (ns), ``pct`` (percent of all idle
        time), ``sentence``."""
        return idle_summary.idle_causes(self._breakdown, top=top)

    @functools.cached_property
    def _gap_causes(self) -> pd.DataFrame:
        # the static Idle section, the live tab's table and its gap picker each read it
        return idle_summary.gap_causes(self.gaps, self._pieces[0])

    def gap_causes(self) -> pd.DataFrame:
        """:attr:`gaps` + ``cuda_sync_ns, cuda_api_ns, os_wait_ns, host_ns`` (ns of each cause),
        ``cause, call, statement`` (``analysis.idle_summary.gap_causes``), longest first."""
        return self._gap_causes

    def launch_bound(self, min_kernels: int = 8) -> pd.DataFrame:
        """Launch-bound stretches (``analysis.launch_bound.launch_bound``): ``device_id, pid,
        start_ns, end_ns, kernels, gpu_busy_ns, busy_pct, median_kernel_ns,
        median_launch_interval_ns, cpu_launches_per_ms, gpu_kernels_per_ms``."""
        return launches.launch_bound(self._launch_times, min_kernels)

    def summary(self) -> dict[str, Any]:
        """``idle_ns, gaps, host_capture, collective_wait_ns`` (None when not multi-rank)."""
        waits = self._waits
        return {
            "idle_ns": int(self.gaps["duration_ns"].sum()),
            "gaps": len(self.gaps),
            "host_capture": self.has_host_capture(),
            "collective_wait_ns": int(waits["wait_ns"].sum()) if waits is not None else None,
        }

    def has_host_capture(self) -> bool:
        """Whether the run has OS runtime calls or Python samples (``%%nsys --host``)."""
        return bool(len(self.report.osrt()) or len(self._samples))
