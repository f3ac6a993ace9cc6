"""Several nsys reports of one multi-process job as one run, with a rank for every process.

``load_runs(sources)`` takes one report per rank, one per node, or one report holding every rank
(``nsys profile ... torchrun ...``) and returns a :class:`RankedReport`: ``NsysReport``'s frame
methods over all of them, each frame with two more columns, ``report`` (position of the source
in ``sources``; ``(report, pid)`` names a process, since pids repeat across nodes) and ``rank``
(``analysis.ranks``'s rule; nullable), plus per-rank summaries, NCCL collectives and rank skew.

Clocks: a report's times count from its own session start, whose wall-clock time is in
TARGET_INFO_SESSION_START_TIME; each report is shifted by (its start - the earliest start), so
merged times count from the earliest session start. On one host this put matched all-reduce
kernels of two per-rank reports within 2.3 us of each other (tests/data/nsys_2rank_r*); across
hosts the hosts' clock sync bounds it: ``rank_skew()["end_spread_ns"]`` shows the error.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
from collections.abc import Callable, Iterable, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from ...analysis import collectives as _coll
from ...analysis import gaps as _gaps
from ...analysis import ranks as _ranks
from ...analysis.kernels import kernel_summary
from ...analysis.nvtx_projection import nvtx_gpu_projection
from ...analysis.phases import phase_summary
from ...errors import BadArgumentError, ReportNotFoundError
from . import process_info
from .cupti import load_launches
from .report import CopySummaries, GpuWork, NsysReport

__all__ = ["RankedReport", "load_runs"]

T = TypeVar("T")
Source = str | PathLike[str] | NsysReport
_TIME_COLUMNS = (
    "start_ns",
    "end_ns",
    "proj_start_ns",
    "proj_end_ns",
    "phase_start_ns",
    "phase_end_ns",
)


def _natural_key(path: str) -> list[Any]:
    """ "rank10" after "rank9": digits compare as numbers."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


def _expand(sources: Source | Iterable[Source]) -> list[Source]:
    if isinstance(sources, (str, PathLike, NsysReport)) or getattr(sources, "report", None):
        sources = [sources]  # type: ignore[list-item]
    if not isinstance(sources, Iterable) or isinstance(sources, (bytes, dict)):
        raise BadArgumentError(
            f"load_runs takes report paths, a glob, NsysReports or runs, not "
            f"{type(sources).__name__}."
        )
    out: list[Source] = []
    for s in sources:
        if not isinstance(s, (str, PathLike, NsysReport)) and not hasattr(s, "report"):
            raise BadArgumentError(
                f"load_runs takes report paths, NsysReports or runs, not {type(s).__name__} "
                f"({s!r:.60})."
            )
        text = os.fspath(s) if isinstance(s, (str, PathLike)) else ""
        if isinstance(text, str) and "\x00" in text:
            raise BadArgumentError(f"load_runs: {text!r} holds a NUL byte; pass a report path.")
        if text and any(c in text for c in "*?[") and not Path(text).exists():
            hits = sorted(glob.glob(text), key=_natural_key)
            if not hits:
                raise ReportNotFoundError(
                    f"no report matches {text!r}; check the pattern (a glob such as "
                    "'run/rank*.sqlite') and the folder."
                )
            out.extend(hits)
        else:
            out.append(s)
    _refuse_twice(out)
    return out


def _refuse_twice(sources: list[Source]) -> None:
    """The same report given twice would be two "ranks" of one process."""
    seen: dict[Any, int] = {}
    for i, s in enumerate(sources):
        report = getattr(s, "report", s)
        key: Any = id(report)
        if isinstance(report, (str, PathLike)):
            with contextlib.suppress(OSError, ValueError):
                key = os.path.realpath(report)
        elif isinstance(report, NsysReport):
            key = os.path.realpath(report.path)
        if key in seen:
            raise BadArgumentError(
                f"load_runs: report {i} ({report}) is report {seen[key]} again; pass each "
                "rank's report once."
            )
        seen[key] = i


def load_runs(sources: Source | Iterable[Source], align: bool = True) -> RankedReport:
    """One run from the reports of a multi-process job: paths (a ``.sqlite`` export, a parquet
    dir or a ``.nsys-rep``; a glob such as ``"run/rank*.sqlite"`` expands in natural order),
    ``NsysReport`` objects, or runs (objects with a ``.report``). ``align=False`` keeps each
    report's own clock. Raises ``BadArgumentError`` (a ``ValueError``) when two processes claim
    the same rank or a report is given twice, ``ReportNotFoundError`` when a glob matches
    nothing."""
    reports = []
    for s in _expand(sources):
        report = getattr(s, "report", s)
        reports.append(report if isinstance(report, NsysReport) else NsysReport.open(Path(report)))
    if not reports:
        raise BadArgumentError(
            "load_runs needs at least one report: pass the ranks' report paths or a glob."
        )
    run = RankedReport(reports, align=align)
    run.ranks()  # check the rank assignment now, not at the first frame a view asks for
    return run


class RankedReport(CopySummaries):
    """NsysReport's frames over one or more reports, with ``report`` and ``rank`` columns
    (contracts in the module docstring and ARCHITECTURE.md). Frames are cached; copy before
    mutating."""

    def __init__(self, reports: Sequence[NsysReport], align: bool = True) -> None:
        self.reports = list(reports)
        self.hosts = [process_info.load_hostname(r.source) for r in self.reports]
        starts = [process_info.load_session_start_utc_ns(r.source) for r in self.reports]
        self.session_starts_utc_ns = starts
        self.aligned = align and all(s is not None for s in starts)
        if self.aligned:
            first = min(s for s in starts if s is not None)
            self.offsets_ns = [int(s - first) for s in starts if s is not None]
        else:
            self.offsets_ns = [0] * len(self.reports)
        self._cache: dict[str, Any] = {}

    def __repr__(self) -> str:
        names = ", ".join(str(r.rep_path or r.path) for r in self.reports)
        return f"RankedReport([{names}])"

    def _cached(self, key: str, load: Callable[[], T]) -> T:
        if key not in self._cache:
            self._cache[key] = load()
        return self._cache[key]

    def _shifted(self, i: int, frame: pd.DataFrame) -> pd.DataFrame:
        """A copy of report ``i``'s frame on the merged clock, with its ``report`` column."""
        out = frame.reset_index(drop=True)
        shift = {c: out[c] + self.offsets_ns[i] for c in _TIME_COLUMNS if c in out}
        return out.assign(**shift, report=np.int64(i))

    def _merged(self, key: str, get: Callable[[NsysReport], pd.DataFrame]) -> pd.DataFrame:
        def load() -> pd.DataFrame:
            parts = [self._shifted(i, get(r)) for i, r in enumerate(self.reports)]
            return _ranks.add_rank(pd.concat(parts, ignore_index=True), self.ranks())

        return self._cached(key, load)

    # --- which process is which rank ----------------------------------------------------------
    def ranks(self) -> pd.DataFrame:
        """``report, host, pid, rank, device_id, source``: one row per process with GPU work or
        a rank marker. Per report, ``analysis.ranks.rank_map``; with several reports and no
        marker or thread name anywhere, ranks follow the reports' order (``source`` "order":
        earlier reports' processes first, device order inside a report)."""
        return self._cached("ranks", self._rank_table)

    def _rank_table(self) -> pd.DataFrame:
        parts = []
        for i, r in enumerate(self.reports):
            names = process_info.load_thread_names(r.source)
            m = _ranks.rank_map(r.kernels(), r.nvtx(), names)
            m.insert(0, "host", self.hosts[i])
            m.insert(0, "report", np.int64(i))
            parts.append(m)
        table = pd.concat(parts, ignore_index=True)
        explicit = table["source"].isin(["nvtx", "thread"]).to_numpy()
        if len(self.reports) > 1:
            if explicit.any():  # positions mean nothing next to named ranks: keep names only
                table.loc[~explicit, "rank"] = pd.NA
                table.loc[~explicit, "source"] = "none"
            else:
                table = self._ranks_by_order(table)
        named = table["rank"].dropna()
        dup = named[named.duplicated()].unique().tolist()
        if dup:
            who = table[table["rank"].isin(dup)]
            listed = "; ".join(
                f"rank {r.rank}: report {r.report} pid {r.pid}" for r in who.itertuples()
            )
            raise BadArgumentError(
                f"two processes claim the same rank ({listed}); pass each rank's report once."
            )
        return table

    @staticmethod
    def _ranks_by_order(table: pd.DataFrame) -> pd.DataFrame:
        """Ranks from positions: the GPU processes of earlier reports first; inside a report,
        device order (``rank_map``'s "device" rule), or 0 for its only GPU process."""
        out = table.copy()
        gpu = out["device_id"].notna()
        per_report = gpu.groupby(out["report"])
        local = out["rank"].astype("Int64").mask(gpu & (per_report.transform("sum") == 1), 0)
        offset = out["report"].map(per_report.sum().cumsum().shift(fill_value=0))
        rank = (local + offset.to_numpy()).where(gpu.to_numpy())
        out["rank"] = rank.astype("Int64")
        out["source"] = pd.array(np.where(rank.notna(), "order", "none"), dtype="str")
        return out

    # --- frames -------------------------------------------------------------------------------
    def kernels(self) -> pd.DataFrame:
        """``NsysReport.kernels()`` of every report on one clock, + ``report, rank``."""
        return self._merged("kernels", lambda r: r.kernels())

    def nvtx(self) -> pd.DataFrame:
        """``nvtx()`` of every report + ``payload`` (the range's NVTX payload as JSON, "" if
        none; needs an ``--include-json=true`` export), ``report``, ``rank``."""
        return self._merged("nvtx", _with_payload)

    def memcpy(self) -> pd.DataFrame:
        """``NsysReport.memcpy()`` of every report on one clock, + ``report, rank``."""
        return self._merged("memcpy", lambda r: r.memcpy())

    def memset(self) -> pd.DataFrame:
        """``NsysReport.memset()`` of every report on one clock, + ``report, rank``."""
        return self._merged("memset", lambda r: r.memset())

    def graph_launches(self) -> pd.DataFrame:
        """``NsysReport.graph_launches()`` of every report on one clock, + ``report, rank``."""
        return self._merged("graph_launches", lambda r: r.graph_launches())

    def processes(self) -> pd.DataFrame:
        """``pid, name`` of every report's processes, with ``report`` and ``rank``."""
        return self._merged("processes", lambda r: r.processes())

    def gpu_work(self) -> GpuWork:
        """The reports' ``gpu_work()`` counts added up."""
        works = [r.gpu_work() for r in self.reports]
        return GpuWork(
            kernels=sum(w.kernels for w in works),
            graph_launches=sum(w.graph_launches for w in works),
            memcpy=sum(w.memcpy for w in works),
            memset=sum(w.memset for w in works),
        )

    @property
    def warnings(self) -> list[str]:
        """Every report's ``warnings``, each prefixed with its report when there are several."""
        if len(self.reports) == 1:
            return self.reports[0].warnings
        return [f"report {i}: {w}" for i, r in enumerate(self.reports) for w in r.warnings]

    @property
    def path(self) -> Path:
        """The first report's export (what a run of these reports is named after)."""
        return Path(self.reports[0].path)

    def kernels_in_range(self, domain: str, range: str) -> pd.DataFrame:
        """Rows of :meth:`kernels` launched inside NVTX range ``domain``/``range``, by each
        report's own ``kernels_in_range`` (correlation ids and pids are per report)."""
        return self._per_report_rows(self.kernels(), lambda r: r.kernels_in_range(domain, range))

    def kernels_in_phase(self, domain: str, range: str) -> pd.DataFrame:
        """Rows of :meth:`kernels` in the phase of NVTX range ``domain``/``range``, by each
        report's own ``kernels_in_phase`` (a rank's range holds only its own work)."""
        return self._per_report_rows(self.kernels(), lambda r: r.kernels_in_phase(domain, range))

    def kernel_phases(self) -> pd.Series:
        """Each report's ``kernel_phases()``, with the index of :meth:`kernels`."""
        out = pd.concat([r.kernel_phases() for r in self.reports], ignore_index=True)
        out.index = self.kernels().index
        return out

    def kernel_ops(self) -> pd.DataFrame:
        """Each report's ``kernel_ops()``, with the index of :meth:`kernels`."""
        ops = [r.kernel_ops() for r in self.reports]
        out = pd.concat(ops, ignore_index=True)
        out.index = self.kernels().index
        return out

    def _per_report_rows(
        self, merged: pd.DataFrame, pick: Callable[[NsysReport], pd.DataFrame]
    ) -> pd.DataFrame:
        """The rows of ``merged`` (a frame of :meth:`_merged`, built from each report's frame
        in report order) that ``pick`` selects from each report's own frame."""
        rows, offset = [], 0
        for i, r in enumerate(self.reports):
            own = len(merged[(merged["report"] == i).to_numpy()])
            chosen = pick(r)
            # each report's frame has a fresh 0..n-1 index: positions in the merged frame
            rows.append(offset + chosen.index.to_numpy(np.int64))
            offset += own
        return merged.iloc[np.sort(np.concatenate(rows))] if rows else merged.iloc[:0]

    def cuda_api(self) -> pd.DataFrame:
        """``NsysReport.cuda_api()`` of every report on one clock, + ``report, rank``."""
        return self._merged("cuda_api", lambda r: r.cuda_api())

    def osrt(self) -> pd.DataFrame:
        """``NsysReport.osrt()`` of every report on one clock, + ``report, rank``."""
        return self._merged("osrt", lambda r: r.osrt())

    def python_samples(self) -> pd.DataFrame:
        """``NsysReport.python_samples()`` of every report on one clock, + ``report, rank``."""
        return self._merged("python_samples", lambda r: r.python_samples())

    def gpus(self) -> list[dict[str, object]]:
        """Every report's GPUs, each dict with ``report`` and ``host`` added."""
        return [
            {**g, "report": i, "host": self.hosts[i]}
            for i, r in enumerate(self.reports)
            for g in r.gpus()
        ]

    def gpu_info(self) -> dict[str, object]:
        """The busiest GPU of the first report (ranks of one job use one GPU model)."""
        return self.reports[0].gpu_info()

    def gpu_ops(self) -> pd.DataFrame:
        """Kernels, copies, sets and whole CUDA graph launches (``analysis.gaps.gpu_ops``):
        ``device_id, stream_id, start_ns, end_ns, report, pid, rank, name``, sorted by start."""
        return self._cached(
            "gpu_ops",
            lambda: _gaps.gpu_ops(
                self.kernels(),
                self.memcpy(),
                self.memset(),
                self.graph_launches(),
                keys=["report", "pid", "rank"],
            ),
        )

    # --- summaries ----------------------------------------------------------------------------
    def kernel_summary(self) -> pd.DataFrame:
        """All ranks together (``cuda_gpu_kern_sum`` of one report holding every rank)."""
        return self._cached("kernel_summary", lambda: kernel_summary(self.kernels()))

    def rank_kernel_summary(self) -> pd.DataFrame:
        """``rank`` + ``kernel_summary`` columns: each rank's own ``cuda_gpu_kern_sum``."""
        return self._cached(
            "rank_kernel_summary", lambda: _ranks.rank_kernel_summary(self.kernels())
        )

    def nvtx_gpu_trace(self) -> pd.DataFrame:
        """Each report's ``nvtx_gpu_trace()`` (projected per report: correlation ids are per
        report) on the merged clock, with ``report`` and ``rank``."""
        return self._merged("nvtx_gpu_trace", lambda r: r.nvtx_gpu_trace())

    def nvtx_gpu_projection(self) -> pd.DataFrame:
        """All ranks' ranges together (``nvtx_gpu_proj_sum`` of one report holding every rank)."""
        return self._cached(
            "nvtx_gpu_projection", lambda: nvtx_gpu_projection(self.nvtx_gpu_trace())
        )

    def nvtx_phase_trace(self) -> pd.DataFrame:
        """Each report's ``nvtx_phase_trace()`` (phased per report and process: a range of
        one rank counts only that rank's work) on the merged clock, with ``report`` and
        ``rank``."""
        return self._merged("nvtx_phase_trace", lambda r: r.nvtx_phase_trace())

    def nvtx_phases(self) -> pd.DataFrame:
        """All ranks' phases together (``analysis.phases.phase_summary``)."""
        return self._cached("nvtx_phases", lambda: phase_summary(self.nvtx_phase_trace()))

    def rank_nvtx_phases(self) -> pd.DataFrame:
        """``rank`` + ``nvtx_phases`` columns: each rank's own phases."""
        return self._cached(
            "rank_nvtx_phases",
            lambda: phase_summary(self.nvtx_phase_trace().dropna(subset=["rank"]), by=["rank"]),
        )

    def rank_nvtx_gpu_projection(self) -> pd.DataFrame:
        """``rank`` + ``nvtx_gpu_projection`` columns: each rank's own ``nvtx_gpu_proj_sum``."""
        return self._cached(
            "rank_nvtx_gpu_projection",
            lambda: _ranks.rank_nvtx_projection(self.nvtx_gpu_trace()),
        )

    def collectives(self) -> pd.DataFrame:
        """One row per NCCL kernel (``analysis.collectives.collectives``), with ``report``."""
        return self._cached("collectives", self._collectives)

    def _collectives(self) -> pd.DataFrame:
        kernels = self.kernels()
        nccl = kernels[_coll.is_nccl_kernel(kernels["name"])]
        launches = []
        for i, r in enumerate(self.reports):
            corr = nccl.loc[nccl["report"] == i, "correlation_id"].to_numpy()
            launches.append(self._shifted(i, load_launches(r.source, corr)))
        nvtx = self.nvtx()
        ranges = nvtx[(nvtx["domain"] == _coll.NCCL_DOMAIN).to_numpy()]
        return _coll.collectives(kernels, pd.concat(launches, ignore_index=True), ranges)

    def collective_summary(self) -> pd.DataFrame:
        """Per (rank, kind): time, bytes, time waiting for stragglers, times last."""
        return _coll.collective_summary(self.collectives(), self.rank_skew())

    def rank_skew(self) -> pd.DataFrame:
        """Per collective instance: spread of the ranks' kernel starts and the straggler."""
        return self._cached("rank_skew", lambda: _coll.rank_skew(self.collectives()))

    def timeline(self, max_rows: int = 5000, window: tuple[int, int] | None = None) -> pd.DataFrame:
        """Timeline rows with lanes ``rank r / GPU d / stream s`` and ``rank r / NVTX <domain>``
        (``analysis.ranks.rank_timeline``) of the events overlapping ``window`` (all when
        None), on the merged clock; graph launches included."""
        return _ranks.rank_timeline(
            self.kernels(),
            self.memcpy(),
            self.nvtx(),
            max_rows,
            window,
            memset=self.memset(),
            graph_launches=self.graph_launches(),
        )

    def capture_window(self) -> tuple[int, int]:
        """(start_ns, end_ns) over every report, on the merged clock."""
        spans = [
            (lo + off, hi + off)
            for r, off in zip(self.reports, self.offsets_ns, strict=True)
            for lo, hi in [r.capture_window()]
            if hi > lo
        ]
        if not spans:
            return (0, 0)
        return (min(s for s, _ in spans), max(e for _, e in spans))

    def gpu_busy_pct(self, window: tuple[int, int] | None = None) -> float:
        """Percent of the window (default: the merged capture window) in which any rank's GPU
        ran an op; :meth:`rank_busy_pct` gives it per process."""
        return _gaps.busy_pct(self.gpu_ops(), window or self.capture_window())

    def rank_busy_pct(self) -> pd.DataFrame:
        """``report, pid, rank, busy_pct``: percent of the merged capture window in which each
        process had a GPU op running."""
        ops = self.gpu_ops()
        window = self.capture_window()
        rows = [
            (rep, pid, rank, _gaps.busy_pct(g, window))
            for (rep, pid), g in ops.groupby(["report", "pid"], sort=True)
            for rank in [g["rank"].iloc[0]]
        ]
        out = pd.DataFrame(rows, columns=["report", "pid", "rank", "busy_pct"])
        out["rank"] = pd.array(out["rank"], dtype="Int64")
        return out

    def gaps(self, min_gap_ns: int = 0, per_stream: bool = True) -> pd.DataFrame:
        """Each report's ``gaps()`` on the merged clock, with ``report`` and the ``rank`` of the
        process on that device (NA when several share it)."""

        def per_report(i: int, r: NsysReport) -> pd.DataFrame:
            g = self._shifted(i, r.gaps(min_gap_ns, per_stream))
            ranks = self.ranks()
            mine = ranks[(ranks["report"] == i).to_numpy() & ranks["device_id"].notna()]
            solo = mine.drop_duplicates("device_id", keep=False)
            rank_of = dict(zip(solo["device_id"].astype(np.int64), solo["rank"], strict=True))
            values = [rank_of.get(int(d), pd.NA) for d in g["device_id"]]
            return g.assign(rank=pd.array(values, dtype="Int64"))

        parts = [per_report(i, r) for i, r in enumerate(self.reports)]
        out = pd.concat(parts, ignore_index=True)
        return out.sort_values("duration_ns", ascending=False, kind="stable").reset_index(drop=True)

    def summary(self) -> dict[str, object]:
        """Headline numbers of a multi-rank run: window, kernels and their time, copies, GPU busy,
        NVTX ranges over all ranks; reports, hosts, ranks, NCCL time, the worst skew and the
        rank most often last into a collective."""
        lo, hi = self.capture_window()
        k = self.kernels()
        coll = self.collectives()
        skew = self.rank_skew()
        straggler = skew["last_rank"].mode() if len(skew) else pd.Series([], dtype=np.int64)
        return {
            "gpu": self.gpu_info().get("name", ""),
            "reports": len(self.reports),
            "hosts": sorted(set(self.hosts)),
            "ranks": int(self.ranks()["rank"].notna().sum()),
            "window_ns": hi - lo,
            "kernels": len(k),
            "kernel_time_ns": int(k["duration_ns"].sum()) if len(k) else 0,
            "memcpy_bytes": int(np.asarray(self.memcpy()["bytes"]).sum()),
            "gpu_busy_pct": self.gpu_busy_pct(),
            "nvtx_ranges": len(self.nvtx()),
            "nccl_time_ns": int(coll["duration_ns"].sum()) if len(coll) else 0,
            "max_skew_ns": int(skew["skew_ns"].max()) if len(skew) else 0,
            "straggler_rank": int(straggler.iloc[0]) if len(straggler) else None,
        }


def _with_payload(report: NsysReport) -> pd.DataFrame:
    """``report.nvtx()`` + ``payload``, joined on (pid, tid, start_ns)."""
    nvtx = report.nvtx()
    payloads = process_info.load_nvtx_payloads(report.source)
    text = np.full(len(nvtx), "", dtype=object)
    if len(payloads) and len(nvtx):
        keys = ["pid", "tid", "start_ns"]
        found = pd.MultiIndex.from_frame(payloads[keys]).get_indexer(
            pd.MultiIndex.from_frame(nvtx[keys])
        )
        hit = found >= 0
        text[hit] = payloads["payload"].to_numpy(dtype=object)[found[hit]]
    return nvtx.assign(payload=pd.array(text, dtype="str"))
