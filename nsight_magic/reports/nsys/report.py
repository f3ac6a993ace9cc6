"""``NsysReport``: the frames of one Nsight Systems export, loaded once, plus its summaries."""

from __future__ import annotations

import abc
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa

from ...analysis import gaps as _gaps
from ...analysis import torch_ops
from ...analysis.attribution import kernels_in_phase, kernels_in_range
from ...analysis.kernels import kernel_summary
from ...analysis.memory import copies_by_kind, memory_size_summary, memory_time_summary
from ...analysis.nvtx_projection import nvtx_gpu_projection, project_nvtx_to_gpu
from ...analysis.phases import kernel_phases, phase_summary, project_phases
from ...analysis.timeline import timeline_frame
from ...errors import (
    CorruptReportError,
    ReportError,
    ReportNotFoundError,
    StaleExportError,
    ToolNotFoundError,
)
from ..paths import require_regular_file
from . import cupti, damage, host, memory_usage, nvtx_events, strings, target
from .columns import Spec
from .durations import duration_warnings
from .export import export_origin, export_report, find_nsys, sibling_export
from .source import ExportSource, export_meta, open_export

__all__ = ["GpuWork", "NsysReport"]

T = TypeVar("T")
NSYS_REP_SUFFIXES = (".nsys-rep", ".qdrep")


@dataclass(frozen=True)
class GpuWork:
    """How much GPU work a report holds, counted without loading the frames: kernel rows,
    whole-graph launches (graph-level tracing gives those instead of kernel rows), memory
    copies and sets."""

    kernels: int
    graph_launches: int
    memcpy: int
    memset: int

    @property
    def has_gpu_work(self) -> bool:
        return any((self.kernels, self.graph_launches, self.memcpy, self.memset))


class CopySummaries(abc.ABC):
    """The copy and memset summaries, the same for one report (``NsysReport``) and for the
    ranks of several (``merge.RankedReport``): both give ``memcpy()`` and ``memset()``."""

    @abc.abstractmethod
    def memcpy(self) -> pd.DataFrame: ...

    @abc.abstractmethod
    def memset(self) -> pd.DataFrame: ...

    def memory_time_summary(self) -> pd.DataFrame:
        """= ``cuda_gpu_mem_time_sum``: ``operation, instances, total_ns, avg_ns, med_ns,
        min_ns, max_ns, std_ns`` (ns), ``time_pct`` (percent of all copy and set time)."""
        return memory_time_summary(self.memcpy(), self.memset())

    def memory_size_summary(self) -> pd.DataFrame:
        """= ``cuda_gpu_mem_size_sum`` in bytes, not MB: ``operation, instances, total_bytes,
        avg_bytes, med_bytes, min_bytes, max_bytes, std_bytes``."""
        return memory_size_summary(self.memcpy(), self.memset())

    def copies_by_kind(self) -> pd.DataFrame:
        """Per copy kind: ``kind, count, bytes, total_ns, bandwidth_gb_per_s`` (GB/s)."""
        return copies_by_kind(self.memcpy())


class NsysReport(CopySummaries):
    """Frames of an nsys export (column contracts in ARCHITECTURE.md).

    ``NsysReport.open(path)`` takes a ``.sqlite`` export, a parquet dir, or a ``.nsys-rep``
    (an export next to it is used; otherwise nsys exports one). Each frame is read on first
    use and cached; callers get the cached object, so copy before mutating."""

    def __init__(self, source: ExportSource, rep_path: Path | None = None) -> None:
        self.source = source
        self.path = source.path
        self.rep_path = rep_path
        self._cache: dict[str, Any] = {}

    # --- opening ------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> NsysReport:
        """The report of a ``.sqlite`` export, a parquet dir or a ``.nsys-rep`` (see the class)."""
        path = Path(path)
        if not path.exists():
            raise ReportNotFoundError(f"{path} does not exist; check the path or the run folder.")
        rep_path = None
        note = ""
        if not path.is_dir() and require_regular_file(path).suffix in NSYS_REP_SUFFIXES:
            rep_path = path
            path, note = cls._export_for(path)
        report = cls(open_export(path), rep_path)
        if note:
            report._cache["open_notes"] = [note]
        return report

    @staticmethod
    def _export_for(rep: Path) -> tuple[Path, str]:
        """The export to read for ``rep`` and a warning to show with it ("" when none): a
        sibling stamped as exported from this very file; else a new export from nsys; else,
        without nsys, an unstamped sibling (warned: nothing proves it is this report's); a
        sibling stamped from another file is refused (``StaleExportError``)."""
        candidate = sibling_export(rep)
        origin = export_origin(rep, candidate) if candidate is not None else "unknown"
        if candidate is not None and origin == "same":
            return candidate, ""
        # where we export when an unstamped file (maybe the user's own) holds the usual name
        own = rep.with_suffix(".nsm.sqlite")
        if own.exists() and export_origin(rep, own) == "same":
            return own, ""
        try:
            nsys = find_nsys()
        except ToolNotFoundError:
            if candidate is None:
                raise
            if origin == "other":
                raise StaleExportError(
                    f"{candidate} beside {rep} was exported from another report (or an older "
                    f"version of it); install nsys to export {rep.name} again, or open the "
                    "export itself with open_report if that is the report you mean."
                ) from None
            age = "older than" if candidate.stat().st_mtime + 1 < rep.stat().st_mtime else "beside"
            return candidate, (
                f"{candidate.name} ({age} {rep.name}) was read in its place without proof that it "
                "was exported from it (nsys is not here to export it again); if the numbers look "
                "unrelated, export the .nsys-rep again."
            )
        # never overwrite an export that is not provably ours: it may be someone's data
        out = own if candidate is not None and origin == "unknown" else None
        return export_report(rep, out=out, nsys=nsys), ""

    def __repr__(self) -> str:
        return f"NsysReport({str(self.rep_path or self.path)!r})"

    def _cached(self, key: str, load: Callable[[], T]) -> T:
        if key not in self._cache:
            try:
                self._cache[key] = load()
            except ReportError:
                raise
            except (
                sqlite3.Error,
                pa.ArrowException,
                ValueError,
                KeyError,
                IndexError,
                OverflowError,
                TypeError,
            ) as exc:  # damaged content in a readable file
                raise CorruptReportError(
                    f"{self.path} has a damaged {key} table ({type(exc).__name__}: {exc}); "
                    "export the .nsys-rep again."
                ) from exc
        return self._cache[key]

    # --- event tables -------------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        """META_DATA_EXPORT (schema and nsys versions, export parameters)."""
        return self._cached("meta", lambda: export_meta(self.source))

    def _strings(self) -> strings.StringTable:
        return self._cached("strings", lambda: strings.load_string_table(self.source))

    def cuda_api(self) -> pd.DataFrame:
        """CUDA API calls (``cupti.load_cuda_api``): ``name, start_ns, end_ns, duration_ns``
        (ns), ``correlation_id, pid, tid, return_value``."""
        return self._cached("cuda_api", lambda: cupti.load_cuda_api(self.source, self._strings()))

    def osrt(self) -> pd.DataFrame:
        """OS runtime calls (``host.load_osrt``; empty without ``--trace=osrt``)."""
        return self._cached("osrt", lambda: host.load_osrt(self.source, self._strings()))

    def python_samples(self) -> pd.DataFrame:
        """Python backtraces of ``--python-sampling`` / ``--python-backtrace=cuda``
        (``host.load_python_samples``; empty without them or without the JSON payloads)."""
        return self._cached(
            "python_samples", lambda: host.load_python_samples(self.source, self._strings())
        )

    def kernels(self) -> pd.DataFrame:
        """One row per kernel (``cupti.load_kernels``): ``start_ns, end_ns, duration_ns`` (ns),
        ``name, short_name, mangled_name, device_id, context_id, stream_id, correlation_id, pid,
        tid, grid_x, grid_y, grid_z, block_x, block_y, block_z, registers_per_thread,
        static_smem_bytes, dynamic_smem_bytes, graph_node_id`` (-1: not a CUDA graph node)."""
        return self._cached(
            "kernels",
            lambda: cupti.load_kernels(self.source, self._strings(), self._launches()),
        )

    def _kernel_core(self) -> pd.DataFrame:
        """Kernels as the summaries need them (name as a Categorical; no per-row strings)."""
        return self._cached(
            "kernel_core", lambda: cupti.load_kernel_core(self.source, self._strings())
        )

    def _launches(self) -> pd.DataFrame:
        """The runtime calls that launched a kernel, copy or memset (all ``cuda_api()`` rows
        the joins use), without reading the whole API table's names."""
        if "cuda_api" in self._cache:
            return self.cuda_api()

        def load() -> pd.DataFrame:
            ops = (self._kernel_core(), self.memcpy(), self.memset())
            corr = np.concatenate([f["correlation_id"].to_numpy() for f in ops])
            return cupti.load_launches(self.source, corr)

        return self._cached("launches", load)

    def nvtx(self) -> pd.DataFrame:
        """NVTX ranges (``nvtx_events.load_nvtx``): ``domain, range, style, start_ns, end_ns,
        duration_ns`` (ns), ``pid, tid, end_tid, level``."""
        return self._cached("nvtx", lambda: nvtx_events.load_nvtx(self.source, self._strings()))

    def memcpy(self) -> pd.DataFrame:
        """Copies (``cupti.load_memcpy``): ``start_ns, end_ns, duration_ns`` (ns), ``bytes,
        kind, label, device_id, stream_id, correlation_id, pid, bandwidth_gb_per_s`` (GB/s)."""
        return self._cached("memcpy", lambda: cupti.load_memcpy(self.source))

    def memset(self) -> pd.DataFrame:
        """Sets (``cupti.load_memset``): ``start_ns, end_ns, duration_ns`` (ns), ``bytes,
        device_id, stream_id, correlation_id, pid``."""
        return self._cached("memset", lambda: cupti.load_memset(self.source))

    def memory_events(self) -> pd.DataFrame:
        """Device-memory allocations and frees (``memory_usage.load_memory_events``; empty
        without ``--cuda-memory-usage=true``): ``time_ns, device_id, pid, operation, bytes,
        address, memory_kind, correlation_id``."""
        return self._cached("memory_events", lambda: memory_usage.load_memory_events(self.source))

    def graph_launches(self) -> pd.DataFrame:
        """Whole CUDA graph launches (``cupti.load_graph_launches``): ``start_ns, end_ns,
        duration_ns, graph_id, graph_exec_id, device_id, stream_id, correlation_id, pid``.
        Empty unless nsys traced graphs as graphs (its default, ``--cuda-graph-trace=graph``)."""
        return self._cached("graph_launches", lambda: cupti.load_graph_launches(self.source))

    def processes(self) -> pd.DataFrame:
        """``pid, name`` of each process with CUDA or NVTX events (``target.load_processes``)."""
        return self._cached("processes", lambda: target.load_processes(self.source))

    def gpu_work(self) -> GpuWork:
        """Counts of kernels, graph launches, copies and sets, read from the tables' row counts
        (no frame is loaded): what "was anything captured?" asks."""

        def count() -> GpuWork:
            rows = self.source.num_rows
            return GpuWork(
                kernels=rows(cupti.KERNEL),
                graph_launches=rows(cupti.GRAPH_TRACE),
                memcpy=rows(cupti.MEMCPY),
                memset=rows(cupti.MEMSET),
            )

        return self._cached("gpu_work", count)

    @property
    def warnings(self) -> list[str]:
        """What the user should know before trusting the frames (empty when nothing): e.g. that
        graph launches were traced as whole graphs, so their kernels are in no kernel row."""
        return list(self._cached("warnings", self._find_warnings))

    def _find_warnings(self) -> list[str]:
        found = list(self._cache.get("open_notes", ()))
        core, memcpy, memset = self._kernel_core(), self.memcpy(), self.memset()
        found += duration_warnings(core, memcpy, memset)
        found += self._duplicate_warnings()
        found += damage.byte_warnings(memcpy, memset)
        api = self._cached("api_times", self._api_times)
        ops = (core, memcpy, memset)
        gpu_starts = np.concatenate([f["start_ns"].to_numpy(np.int64) for f in ops])
        window, notes = damage.recorded_window(self.source)
        found += notes
        far = window is None  # without a recorded window: judged against the GPU work
        found += damage.time_warnings(api[0], api[1], self.nvtx(), gpu_starts, far=far)
        if window is not None:
            found += damage.window_warnings(self.source, window)
        found += damage.nvtx_type_warnings(self.source)
        found += damage.view_warnings(self.source)
        graphs = self.gpu_work().graph_launches
        if graphs:
            found.append(
                f"{graphs:,} CUDA graph launches were traced as whole graphs (nsys "
                "--cuda-graph-trace=graph, its default): the kernels they ran have no kernel "
                "rows, so the kernel summary and the NVTX projection leave them out, as nsys "
                "stats does; see graph_launches(), or profile with --cuda-graph-trace=node."
            )
        return found

    def _duplicate_warnings(self) -> list[str]:
        """Rows repeated exactly in any activity table a number is built on."""
        on_gpu = ["start_ns", "end_ns", "device_id", "stream_id", "correlation_id", "pid"]
        found = damage.duplicate_warnings(self._kernel_core())
        found += damage.duplicate_rows(
            "memcpy", cupti.MEMCPY, self.memcpy(), [*on_gpu, "bytes", "kind"]
        )
        found += damage.duplicate_rows("memset", cupti.MEMSET, self.memset(), [*on_gpu, "bytes"])
        found += damage.duplicate_rows(
            "CUDA graph launch",
            cupti.GRAPH_TRACE,
            self.graph_launches(),
            [*on_gpu, "graph_exec_id"],
        )
        spec: Spec = {"start": "i", "end": "i", "globalTid": "i", "correlationId": "i",
                      "nameId": "i", "eventClass": "i"}  # fmt: skip
        api = self.source.read(cupti.RUNTIME, spec).rename(columns={"start": "start_ns"})
        found += damage.duplicate_rows("CUDA API", cupti.RUNTIME, api, list(api.columns))
        nvtx_keys = ["domain", "range", "style", "start_ns", "end_ns", "pid", "tid", "end_tid"]
        found += damage.duplicate_rows("NVTX range", "NVTX_EVENTS", self.nvtx(), nvtx_keys)
        return found

    def gpus(self) -> list[dict[str, object]]:
        """One dict per GPU in TARGET_INFO_GPU (see ``target.load_gpu_info``)."""
        return self._cached("gpus", lambda: target.load_gpu_info(self.source))

    def gpu_info(self) -> dict[str, object]:
        """The GPU that ran the most kernels (or the first GPU): ``name, sm_count,
        sm_clock_max_hz, memory_bytes, memory_bandwidth_bytes_per_s, ...``; {} if none."""
        gpus = self.gpus()
        if not gpus:
            return {}
        k = self._kernel_core()
        if len(k):
            busiest = int(k["device_id"].value_counts().idxmax())
            for g in gpus:
                if g["device_id"] == busiest:
                    return dict(g)
        return dict(gpus[0])

    # --- summaries ----------------------------------------------------------------------------
    def kernel_summary(self) -> pd.DataFrame:
        """= ``nsys stats --report cuda_gpu_kern_sum``: ``name, short_name, instances,
        total_ns, avg_ns, med_ns, min_ns, max_ns, std_ns`` (ns), ``time_pct``."""
        kernels = self._cache.get("kernels")
        return self._cached(
            "kernel_summary",
            lambda: kernel_summary(self._kernel_core() if kernels is None else kernels),
        )

    def nvtx_gpu_trace(self) -> pd.DataFrame:
        """= ``nvtx_gpu_proj_trace``: per range, its projection onto the GPU."""
        return self._cached(
            "nvtx_gpu_trace",
            lambda: project_nvtx_to_gpu(
                self.nvtx(), self._launches(), self._kernel_core(), self.memcpy(), self.memset()
            ),
        )

    def nvtx_gpu_projection(self) -> pd.DataFrame:
        """= ``nsys stats --report nvtx_gpu_proj_sum``: ``domain, range, style, instances,
        proj_total_ns, range_total_ns, gpu_ops, proj_avg_ns, proj_med_ns, proj_min_ns,
        proj_max_ns, proj_std_ns`` (ns), ``avg_gpu_ops, avg_level, avg_children``."""
        return self._cached(
            "nvtx_gpu_projection", lambda: nvtx_gpu_projection(self.nvtx_gpu_trace())
        )

    def nvtx_phase_trace(self) -> pd.DataFrame:
        """Per range, its phase: the GPU work launched by any thread of its process while it
        was open (``analysis.phases.project_phases``; PyTorch op ranges left out)."""
        return self._cached(
            "nvtx_phase_trace",
            lambda: project_phases(
                self.nvtx(), self._launches(), self._kernel_core(), self.memcpy(), self.memset()
            ),
        )

    def nvtx_phases(self) -> pd.DataFrame:
        """Per (domain, range, style): ``instances, range_total_ns, phase_total_ns,
        phase_gpu_ops``
        (``analysis.phases.phase_summary``); beside ``nvtx_gpu_projection()``, which counts
        only the range's own thread as nsys does."""
        return self._cached("nvtx_phases", lambda: phase_summary(self.nvtx_phase_trace()))

    def gpu_ops(self) -> pd.DataFrame:
        """Kernels, copies, sets and whole CUDA graph launches in one frame (``device_id,
        stream_id, start_ns, end_ns, name``; ``analysis.gaps.gpu_ops``): what busy % and idle
        gaps count."""
        return self._cached(
            "gpu_ops",
            lambda: _gaps.gpu_ops(
                self.kernels(), self.memcpy(), self.memset(), self.graph_launches()
            ),
        )

    def capture_window(self) -> tuple[int, int]:
        """(start_ns, end_ns) spanned by everything recorded: API calls, NVTX ranges, GPU ops.
        With the cudaProfilerApi gate that is the profiled cell."""
        starts, ends = [], []
        spans = [self._api_span(), *(self._span(f) for f in (self.nvtx(), self._kernel_core()))]
        spans += [self._span(f) for f in (self.memcpy(), self.memset(), self.graph_launches())]
        for span in spans:
            if span is not None:
                starts.append(span[0])
                ends.append(span[1])
        if not starts:
            return (0, 0)
        return (min(starts), max(ends))

    @staticmethod
    def _span(frame: pd.DataFrame) -> tuple[int, int] | None:
        if not len(frame):
            return None
        return int(frame["start_ns"].min()), int(frame["end_ns"].max())

    def _api_times(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) of every CUDA API call, two int columns only."""
        if "cuda_api" in self._cache:
            api = self.cuda_api()
            return api["start_ns"].to_numpy(np.int64), api["end_ns"].to_numpy(np.int64)
        spec: Spec = {"start": "i", "end": "i"}
        ints = self.source.read_columns(cupti.RUNTIME, spec).ints
        return ints["start"], ints["end"]

    def _api_span(self) -> tuple[int, int] | None:
        """(first start, last end) of the API calls, from two columns only."""
        if "cuda_api" in self._cache:
            return self._span(self.cuda_api())

        def load() -> tuple[int, int] | None:
            spec: Spec = {"start": "i", "end": "i"}
            ints = self.source.read_columns(cupti.RUNTIME, spec).ints
            if not len(ints["start"]):
                return None
            return int(ints["start"].min()), int(ints["end"].max())

        return self._cached("api_span", load)

    def gpu_busy_pct(self, window: tuple[int, int] | None = None) -> float:
        """Percent of the capture window (or ``window``) with any GPU op running."""
        return _gaps.busy_pct(self.gpu_ops(), window or self.capture_window())

    def gaps(self, min_gap_ns: int = 0, per_stream: bool = True) -> pd.DataFrame:
        """Idle gaps per device/stream (``analysis.gaps.gaps``), longest first: ``device_id,
        stream_id, start_ns, end_ns, duration_ns`` (ns), ``prev_op`` (ended at ``start_ns``),
        ``next_op`` (starts at ``end_ns``)."""
        return _gaps.gaps(self.gpu_ops(), min_gap_ns, per_stream)

    def timeline(self, max_rows: int = 5000, window: tuple[int, int] | None = None) -> pd.DataFrame:
        """Rows for a timeline chart, of the events overlapping ``window`` (start_ns, end_ns)
        when given (``analysis.timeline.timeline_frame``; graph launches included)."""
        return timeline_frame(
            self.kernels(),
            self.memcpy(),
            self.nvtx(),
            window,
            max_rows,
            self.memset(),
            self.graph_launches(),
        )

    def kernels_in_range(self, domain: str, range: str) -> pd.DataFrame:
        """Rows of :meth:`kernels` launched inside NVTX range ``domain``/``range`` (nsys's
        attribution rule, ``analysis.attribution.kernels_in_range``)."""
        return kernels_in_range(self.kernels(), self.cuda_api(), self.nvtx(), domain, range)

    def kernels_in_phase(self, domain: str, range: str) -> pd.DataFrame:
        """Rows of :meth:`kernels` launched by any thread of the range's process while NVTX
        range ``domain``/``range`` was open (``analysis.attribution.kernels_in_phase``)."""
        return kernels_in_phase(self.kernels(), self.cuda_api(), self.nvtx(), domain, range)

    def kernel_phases(self) -> pd.Series:
        """The phase each kernel was launched in (``analysis.phases.kernel_phases``: the
        innermost user NVTX range open in its process, any thread), index of :meth:`kernels`."""
        return self._cached(
            "kernel_phases", lambda: kernel_phases(self.kernels(), self.cuda_api(), self.nvtx())
        )

    def kernel_ops(self) -> pd.DataFrame:
        """The PyTorch op that launched each kernel (``analysis.torch_ops.kernel_ops``), with
        the index of :meth:`kernels`."""
        return self._cached(
            "kernel_ops", lambda: torch_ops.kernel_ops(self.kernels(), self.cuda_api(), self.nvtx())
        )
