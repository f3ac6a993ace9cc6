"""What the nsys view shows, computed: one object per run that answers the view's questions with
frames (``views.protocols.NsysSource`` names them), each from analysis functions or report
methods. The view lays these frames out and computes nothing; any method may raise on a damaged
report, and the view then shows that one line in place of the table or chart.

Frames are cached per object: a run's report does not change, and the widget and the static HTML
ask for the same ones."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import graphs, phases, processes, statements, torch_ops
from ..analysis import mfu as utilisation
from ..analysis.kernels import kernel_summary
from ..analysis.memory import copies_by_kind
from ..analysis.names import short_names
from ..analysis.text import join_text
from .base import gui_fields
from .rank_frames import RankFrames

# Bars in the first timeline view: more than a 640 px chart tells apart, few enough that the
# chart data saved inline keeps a notebook small (P2). A zoomed window gets up to ZOOM_ROWS.
TIMELINE_ROWS = 1000
ZOOM_ROWS = 2000
# Op MFU needs a data type the op ranges do not record: the one LLM work runs in.
OP_DTYPE = "bf16"


def nvtx_label(frame: pd.DataFrame) -> pd.Series:
    """``domain:range`` as nsys stats writes it (":range" for the default domain)."""
    return join_text(frame["domain"], ":", frame["range"])


def _dims(frame: pd.DataFrame, prefix: str) -> pd.Series:
    cols = [f"{prefix}_{axis}" for axis in "xyz"]
    if not all(c in frame.columns for c in cols):
        return pd.Series("", index=frame.index)
    return join_text("(", frame[cols[0]], ", ", frame[cols[1]], ", ", frame[cols[2]], ")")


def _without_op_ranges(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (with a ``range`` column) less the PyTorch op ranges (``torch_ops.op_ranges``)."""
    return frame.drop(index=torch_ops.op_ranges(frame).index)


def _or_none(read: Any) -> Any:
    try:
        return read()
    except Exception:
        return None


class NsysFrames:
    """Frames of one nsys run for its view (``views.protocols.NsysSource``). ``run`` is an
    ``NsysRun`` over an ``NsysReport`` or a multi-rank ``RankedReport``."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.report = run.report
        self.name: str = run.name
        self.run_dir: Path | None = run.run_dir

    @functools.cache  # noqa: B019 - the view's header, warnings and notes each ask (issue 22)
    def header(self) -> dict[str, Any]:
        """Raw header numbers; a missing one is None (the view leaves it out)."""
        report = self.report
        work = _or_none(report.gpu_work)
        window = _or_none(report.capture_window)
        ranks = self.ranks()
        out: dict[str, Any] = {
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "gpu": _or_none(lambda: report.gpu_info().get("name")),
            "captured_ns": window[1] - window[0] if window else None,
            "busy_pct": _or_none(report.gpu_busy_pct),
            "kernels": work.kernels if work else None,
            # whole-graph launches (graph-level trace): their kernels are in no kernel row
            "graph_launches": work.graph_launches if work else None,
            "processes": _or_none(self._process_names) or [],
            "ranks": _or_none(ranks.count) if ranks is not None else None,
            **gui_fields("nsys", self.run_dir, report),
        }
        peak = _or_none(self._memory_peak)  # %%nsys --memory: the largest process peak
        out["memory_peak_bytes"], out["memory_peak_at"] = peak if peak else (None, None)
        stats = _or_none(lambda: self.run.repeat_stats)  # %%nsys --repeat N: its one line
        out["repeats"] = stats.line() if stats is not None else None
        return out

    def _memory_peak(self) -> tuple[int, str] | None:
        summary = self.run.memory.summary()
        if summary.empty:
            return None
        top = summary.iloc[0]  # largest peak first
        return int(top["peak_bytes"]), str(top["statement"] or top["nvtx_range"])

    def _process_names(self) -> list[str]:
        """``name (pid)`` of each process that ran GPU work, when more than one did."""
        if not self.several_processes():
            return []
        table = self.process_table()
        names = table["name"].where(table["name"] != "", "pid")
        return [f"{n} ({p})" for n, p in zip(names, table["pid"], strict=True)]

    def warnings(self) -> list[str]:
        """What to know before trusting the report (``NsysRun.warnings``: the report's own,
        and a cold run's first-call costs with the fix)."""
        return list(self.run.warnings)

    @functools.cache  # noqa: B019 - one object per run, kept as long as its run
    def kernel_table(self) -> pd.DataFrame:
        """``kernel_summary()`` (with ``short_name``; a ``--repeat`` run's per-repeat columns)
        + the launch config of each name's first instance (``grid, block, registers``) for
        tooltips + ``graph_node_instances`` (how many instances ran as a CUDA graph node)."""
        summary = self.run.kernel_summary()
        kernels = self.report.kernels()
        first = kernels.drop_duplicates("name").assign(
            grid=lambda k: _dims(k, "grid"), block=lambda k: _dims(k, "block")
        )
        first = first.rename(columns={"registers_per_thread": "registers"})
        config = [c for c in ("grid", "block", "registers") if c in first.columns]
        first = first[["name", *config]].assign(name=lambda k: k["name"].astype(str))
        out = summary.merge(first, on="name", how="left")
        return out.merge(graphs.graph_nodes(kernels), on="name", how="left")

    @functools.cache  # noqa: B019
    def graph_table(self) -> pd.DataFrame:
        """Whole CUDA graph launches per graph (``analysis.graphs.graph_launch_summary``);
        empty unless nsys traced graphs as graphs."""
        return graphs.graph_launch_summary(self.report.graph_launches())

    @functools.cache  # noqa: B019
    def nvtx_table(self) -> pd.DataFrame:
        """NVTX GPU projection + each range's phase time (``phase_total_ns, phase_gpu_ops``:
        work launched by any thread while it was open, ``analysis.phases``), the cell's
        statements first in line order, + ``label``; without the PyTorch op ranges (one per op
        call, thousands: the Ops tab shows them); a ``--repeat`` run's per-repeat columns."""
        projection = self.run.nvtx_gpu_projection()
        projection = _without_op_ranges(phases.with_phases(projection, self.report.nvtx_phases()))
        ordered = statements.ordered_projection(projection)
        return ordered.assign(label=nvtx_label(ordered))

    def phases_differ(self) -> bool:
        """Whether some range's phase differs from its per-thread projection (work
        launched from another thread while it was open): the NVTX tab then shows both."""
        table = self.nvtx_table()
        differ = (table["phase_total_ns"] != table["proj_total_ns"]) | (
            table["phase_gpu_ops"] != table["gpu_ops"]
        )
        return bool(len(table) and differ.any())

    def memory(self) -> Any:
        """The Memory tab's frames (``results.memory_frames.MemoryFrames``)."""
        return self.run.memory

    @functools.cache  # noqa: B019
    def copies(self) -> pd.DataFrame:
        return copies_by_kind(self.report.memcpy())

    @functools.cache  # noqa: B019
    def gaps(self, min_gap_ns: int) -> pd.DataFrame:
        """Idle stretches + ``prev_op_short, next_op_short`` (the neighbours' short names)."""
        gaps = self.report.gaps(min_gap_ns)
        return gaps.assign(
            prev_op_short=short_names(gaps["prev_op"].astype(str)),
            next_op_short=short_names(gaps["next_op"].astype(str)),
        )

    def origin_ns(self) -> int:
        return int(self.report.capture_window()[0])

    @functools.cache  # noqa: B019 - the static chart and the live one show the same rows
    def timeline(
        self, window: tuple[int, int] | None = None, rows: int | None = None
    ) -> pd.DataFrame:
        """Timeline rows (``report.timeline``: kernels, copies, sets, graph launches, NVTX;
        lanes per rank in a multi-rank report), binned to at most ``rows`` (default
        TIMELINE_ROWS, ZOOM_ROWS within a window)."""
        if rows is None:
            rows = TIMELINE_ROWS if window is None else ZOOM_ROWS
        return self.report.timeline(max_rows=rows, window=window)

    @functools.cache  # noqa: B019
    def nvtx_ranges(self) -> pd.DataFrame:
        """Distinct ``domain, range, style, label`` (statement order), for the range filter
        and "profile this range"; PyTorch op ranges left out (each is one op call)."""
        nvtx = self.report.nvtx()
        distinct = nvtx[["domain", "range", "style"]].drop_duplicates(["domain", "range"])
        distinct = _without_op_ranges(distinct)
        distinct = distinct.assign(proj_total_ns=0.0).reset_index(drop=True)
        ordered = statements.ordered_projection(distinct)
        return ordered.assign(label=nvtx_label(ordered))[["domain", "range", "style", "label"]]

    @functools.cache  # noqa: B019
    def _kernel_op_names(self) -> pd.DataFrame:
        """``name, op, ops`` (``analysis.torch_ops.ops_by_kernel_name``); empty without
        PyTorch op ranges."""
        return torch_ops.ops_by_kernel_name(self.report.kernels(), self.report.kernel_ops())

    @functools.cache  # noqa: B019
    def _kernel_phase_names(self) -> pd.DataFrame:
        """``name, phase`` (``analysis.phases.phases_by_kernel_name``); empty without user
        NVTX ranges."""
        kernels = self.report.kernels()
        return phases.phases_by_kernel_name(kernels, self.report.kernel_phases())

    def ranked_kernels(self, nvtx_range: tuple[str, str] | None = None) -> pd.DataFrame:
        """``name, short_name, instances, total_ns`` by total GPU time (+ ``op``: the PyTorch
        op that launched it, "" if none; + ``phase``: the user's NVTX range it was launched
        in, any thread, when the run has such ranges), optionally only the kernels of NVTX
        range ``(domain, range)``'s phase: launched by any thread of its process while it was
        open."""
        if nvtx_range is None:  # the whole capture: the report's own summary, computed once
            summary = self.report.kernel_summary()
        else:
            # its phase: a backward range lists autograd's kernels too (analysis.phases)
            summary = kernel_summary(self.report.kernels_in_phase(*nvtx_range))
        ranked = summary[["name", "short_name", "instances", "total_ns"]]
        ops = _or_none(self._kernel_op_names)
        if ops is not None and not ops.empty:
            op = ranked.merge(ops[["name", "op"]], on="name", how="left")["op"]
            ranked = ranked.assign(op=op.fillna("").astype(str).to_numpy())
        named = _or_none(self._kernel_phase_names)
        if named is not None and not named.empty:
            phase = ranked.merge(named, on="name", how="left")["phase"]
            ranked = ranked.assign(phase=phase.fillna("").astype(str).to_numpy())
        return ranked

    def instances(self, kernel: str) -> int:
        """How many times ``kernel`` ran in the whole capture (ncu counts over the run)."""
        return int((self.report.kernels()["name"] == kernel).sum())

    @functools.cache  # noqa: B019
    def process_table(self) -> pd.DataFrame:
        """GPU work per process (``analysis.processes.process_summary``)."""
        report = self.report
        return processes.process_summary(
            report.kernels(),
            report.memcpy(),
            report.processes(),
            report.memset(),
            report.graph_launches(),
        )

    @functools.cache  # noqa: B019
    def several_processes(self) -> bool:
        """Whether more than one process ran GPU work (``analysis.processes.process_count``,
        without the per-process table)."""
        report = self.report
        others = (report.memcpy(), report.memset(), report.graph_launches())
        return processes.process_count(report.kernels(), *others) > 1

    @functools.cache  # noqa: B019
    def has_op_ranges(self) -> bool:
        """Whether the run has PyTorch op ranges (``analysis.torch_ops.has_op_ranges``): without
        them ``op_table`` is empty."""
        return torch_ops.has_op_ranges(self.report.nvtx())

    @functools.cache  # noqa: B019
    def op_table(self) -> pd.DataFrame:
        """PyTorch ops by GPU time (``analysis.torch_ops.op_summary``) + ``mfu_frac,
        peak_flops_per_s, peak_source, dtype, reason`` (why an MFU is blank) of the GEMM ops
        (``analysis.mfu.op_mfu`` at OP_DTYPE's peak; NaN for ops without model FLOPs; when no op
        has MFU, every ``peak_source`` is "no MFU: <why>"). Empty without op ranges (a run without
        ``--pytorch=autograd-shapes-nvtx``)."""
        summary = self.run.op_summary()
        gpu = _or_none(lambda: self.report.gpu_info().get("name"))
        try:
            mfu = utilisation.op_mfu(summary, gpu_name=gpu, dtype=OP_DTYPE)
            why = "no GEMM op (aten::mm, addmm, bmm, ...) with recorded shapes in this run"
        except Exception as err:  # no known peak for this GPU: the view says so in one line
            mfu, why = None, f"{type(err).__name__}: {err}"
        if mfu is None or mfu.empty:
            # every MFU blank: peak_source carries the one reason (the view shows it)
            return summary.assign(
                mfu_frac=float("nan"),
                peak_flops_per_s=float("nan"),
                peak_source=f"no MFU: {why}",
                reason="",
            )
        cols = ["op", "shapes", "dtype", "mfu_frac", "peak_flops_per_s", "peak_source", "reason"]
        out = summary.merge(mfu[cols], on=["op", "shapes"], how="left")
        return out.assign(reason=out["reason"].fillna("").astype(str))

    @functools.cached_property
    def _ranks(self) -> RankFrames | None:
        return RankFrames.of(self.report)

    def ranks(self) -> RankFrames | None:
        """Per-rank frames (``views.protocols.RankSource``) when the run has two or more
        ranks, else None."""
        return self._ranks

    def idle(self) -> Any:
        """Why the GPU idled (``results.idle_frames.IdleFrames``, the run's own)."""
        return self.run.idle
