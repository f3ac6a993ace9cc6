"""``NcuReport``: a ``.ncu-rep`` read through NVIDIA's ``ncu_report`` module (no GPU needed).

One row per profiled launch, numbered 0.. in report order (ranges, then actions). Frames follow
the contracts in ARCHITECTURE.md. Everything read is cached: the report is immutable.

Isolation: ``ncu_report`` is never imported in this process. It aborts the whole process (a C++
``abort()``) on some damaged files, which in a notebook would kill the user's kernel. ``open``
runs ``python -m nsight_magic.reports.ncu.extract`` in a child (``child.py``) that loads the
report and saves plain data (see ``extract.py``); a crash, timeout or failure of the child becomes
a ``CorruptReportError``. Every frame is then built from that in-memory data (no cache on disk).

Checks: ``ncu_report`` opens a cut file without complaint (a launch whose record was cut comes
back with no name and no metrics, or not at all). ``open`` walks the file's block layout first
(``container.py``), keeps only the launches that came back whole, and says in ``warnings`` what
was lost; a file with no whole launch is a ``CorruptReportError``.

Speed (measured on tests/data, 2-core machine): the child takes ~0.25-0.4 s per fixture (startup
+ ``load_report`` + reading every metric; ``IMetric.unit()`` ~50 us a call is read once per metric
name); ``metrics()`` of ``--set full`` (2243 metrics x 3 launches) then takes a few ms.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...analysis import ncu_metrics as M
from ...analysis.roofline import roofline_points
from ...errors import CorruptReportError, EmptyReportError, LaunchNotFoundError
from ...vocabulary.arguments import count_arg
from ...vocabulary.magic_names import cell_magic
from ...vocabulary.nvtx_names import PHASE_DOMAIN
from ..paths import require_regular_file
from . import container
from .advice import advice_frame, advice_note
from .child import extract_in_child, timeout_for

__all__ = ["NcuReport"]

_MAGIC = container.MAGIC  # first bytes of every .ncu-rep ncu 2023-2025 writes


class NcuReport:
    """A loaded Nsight Compute report. Use :meth:`open`."""

    def __init__(self, path: Path, data: dict[str, Any], warnings: Iterable[str] = ()) -> None:
        self.path = path
        self._launches: list[dict[str, Any]] = data["launches"]
        self._units: dict[str, str] = data["units"]
        self._rules_supported: bool = data.get("rules_supported", False)
        self._cache: dict[str, Any] = {}
        self.warnings: list[str] = list(warnings)
        """What was wrong with the file and what was left out because of it; empty when the
        file is whole. Views show these next to the frames."""

    # --- loading ----------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, *, timeout: float | None = None) -> NcuReport:
        """Load ``path`` (read by ``ncu_report`` in a child process, see the module docstring).
        Raises ReportNotFoundError, UnsupportedReportError (a folder, a named pipe, ...),
        EmptyReportError (0 bytes) or CorruptReportError (not a .ncu-rep, damaged enough to
        crash ncu_report, or no whole profiled launch in it); ToolNotFoundError when
        ``ncu_report`` is not installed. A truncated or damaged file whose first launches are
        whole loads those, with ``warnings`` saying what was lost. ``timeout`` (s) bounds the
        child; default 120 s + 1 s per 50 MB."""
        path = Path(path)
        size = require_regular_file(path).stat().st_size
        if size == 0:
            raise EmptyReportError(
                f"{path} is empty (0 bytes): ncu stopped before writing it; "
                f"re-run {cell_magic('ncu')}."
            )
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(_MAGIC))
            layout = container.scan(path)
        except OSError as exc:
            raise CorruptReportError(f"{path} cannot be read ({exc}).") from exc
        if head != _MAGIC:
            raise CorruptReportError(f"{path} is not an Nsight Compute report (.ncu-rep).")
        data = extract_in_child(
            path, timeout_for(size) if timeout is None else timeout, layout.problem
        )
        whole, warnings = _whole_launches(data["launches"], layout)
        if not whole:
            # ncu_report "loads" garbage and truncated files as a report with 0 ranges.
            why = layout.problem or "the file is truncated or damaged"
            raise CorruptReportError(
                f"{path} holds no complete profiled kernel ({why}); re-run {cell_magic('ncu')}."
            )
        return cls(path, {**data, "launches": whole}, warnings)

    @classmethod
    def merged(cls, reports: Sequence[NcuReport]) -> NcuReport:
        """One report of the launches of ``reports``, in order (``launch`` numbered again from
        0), at the first one's path: a top-N run whose kernels ncu profiled in several passes
        (``session/runs/drill.py``). Its rules count as run only where every report ran them."""
        if not reports:
            raise ValueError("merged() needs at least one report")
        units: dict[str, str] = {}
        for report in reports:
            units.update(report._units)
        data = {
            "launches": [launch for report in reports for launch in report._launches],
            "units": units,
            "rules_supported": all(report._rules_supported for report in reports),
        }
        warnings = [w for report in reports for w in report.warnings]
        return cls(reports[0].path, data, warnings)

    def __len__(self) -> int:
        return len(self._launches)

    def __repr__(self) -> str:
        return f"NcuReport({str(self.path)!r}, launches={len(self)})"

    # --- low-level access -------------------------------------------------------------------
    def _value(self, launch: int, name: str) -> Any:
        """A metric's value (float, or str for string metrics), or None when absent."""
        return self._launches[launch]["metrics"].get(name)

    def _number(self, launch: int, name: str) -> float:
        value = self._value(launch, name)
        return float(value) if isinstance(value, float) else math.nan

    def _metric_rows(self, launch: int, names: Iterable[str]) -> list[tuple[str, float, str]]:
        metrics = self._launches[launch]["metrics"]
        rows = []
        for name in names:
            value = metrics.get(name)
            # Instanced metrics (PM sampling, per-SM) keep their aggregate value; the
            # per-instance series is left out of the long frame.
            if isinstance(value, float):
                rows.append((name, value, self._units.get(name, "")))
        return rows

    # --- frames -----------------------------------------------------------------------------
    def kernels(self) -> pd.DataFrame:
        """One row per launch: ``launch, name, demangled, mangled, duration_ns, grid, block,
        registers_per_thread, shared_mem_bytes, sm_clock_hz, device_id, stream_id, nvtx,
        phase, process_id``. ``shared_mem_bytes`` = static + dynamic shared memory per block;
        ``nvtx`` = the push/pop ranges around the launch, ``domain@outer/inner`` (no ``domain@``
        for the default domain; domains joined by ``; ``): the launching thread's only, as ncu
        records them; ``phase`` = ``DOMAIN:RANGE`` of the user's innermost range open in the
        process when the kernel was launched, whatever thread launched it (the cell script's
        mirror in ``nvtx_names.PHASE_DOMAIN``; "" when none, or in a report made without it);
        ``process_id`` is <NA> because ncu_report does not expose it."""
        if "kernels" in self._cache:
            return self._cache["kernels"].copy()
        rows = []
        for launch, data in enumerate(self._launches):
            num = functools.partial(self._number, launch)

            def dims(prefix: str, num: Callable[[str], float] = num) -> str:
                xyz = [num(f"{prefix}_{axis}") for axis in "xyz"]
                return "(" + ", ".join(str(int(v)) if v == v else "?" for v in xyz) + ")"

            rows.append(
                {
                    "launch": launch,
                    "name": data["function"],
                    "demangled": data["demangled"],
                    "mangled": data["mangled"],
                    "duration_ns": num(M.DURATION),
                    "grid": dims("launch__grid_dim"),
                    "block": dims("launch__block_dim"),
                    "registers_per_thread": num("launch__registers_per_thread"),
                    "shared_mem_bytes": num("launch__shared_mem_per_block_static")
                    + num("launch__shared_mem_per_block_dynamic"),
                    "sm_clock_hz": num(M.SM_CLOCK),
                    "device_id": num("launch__device_id"),
                    "stream_id": num("launch__stream_id"),
                    "nvtx": _nvtx_path(data["nvtx"]),
                    "phase": _phase(data["nvtx"]),
                    "process_id": pd.NA,
                }
            )
        frame = pd.DataFrame(rows)
        for col in ["duration_ns", "registers_per_thread", "shared_mem_bytes"]:
            frame[col] = _integers(frame[col])
        for col in ["device_id", "stream_id"]:
            frame[col] = _integers(frame[col])
        frame["process_id"] = frame["process_id"].astype("Int64")
        self._cache["kernels"] = frame
        return frame.copy()

    def metrics(self, select: Callable[[str], bool] | None = None) -> pd.DataFrame:
        """Long frame ``launch, name, metric, value, unit`` of every numeric metric (string
        metrics such as ``launch__func_cache_config`` are left out); ``select(name)`` keeps
        only the metrics it accepts (and reads only those)."""
        if select is not None and "metrics" not in self._cache:
            return self._read_metrics(select)
        frame = self._cache.get("metrics")
        if frame is None:
            frame = self._cache["metrics"] = self._read_metrics(None)
        if select is not None:
            frame = frame[frame["metric"].map(select).astype(bool)].reset_index(drop=True)
        return frame.copy()

    def _read_metrics(self, select: Callable[[str], bool] | None) -> pd.DataFrame:
        names = self.kernels()["name"]
        launches, metric_names, values, units = [], [], [], []
        for launch, data in enumerate(self._launches):
            wanted: Iterable[str] = data["metrics"]
            if select is not None:
                wanted = [name for name in wanted if select(name)]
            for name, value, unit in self._metric_rows(launch, wanted):
                launches.append(launch)
                metric_names.append(name)
                values.append(value)
                units.append(unit)
        frame = pd.DataFrame(
            {
                "launch": np.asarray(launches, dtype=np.int64),
                "metric": metric_names,
                "value": np.asarray(values, dtype=np.float64),
                "unit": units,
            }
        )
        frame.insert(1, "name", names.to_numpy()[frame["launch"].to_numpy()])
        return frame

    def sol(self) -> pd.DataFrame:
        """``launch, name, duration_ns, compute_sol_pct, memory_sol_pct, achieved_occupancy_pct,
        theoretical_occupancy_pct``: the Speed Of Light and Occupancy headline numbers."""
        kernels = self.kernels()
        sources = {
            "compute_sol_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            "memory_sol_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
            "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
            "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
        }
        frame = kernels[["launch", "name", "duration_ns"]].copy()
        for column, metric in sources.items():
            frame[column] = [self._number(launch, metric) for launch in frame["launch"]]
        return frame

    def sections(self, launch: int) -> dict[str, pd.DataFrame]:
        """Section display name -> ``metric, value, unit`` of that section's header and body
        metrics for one launch; a body's ``breakdown:``/``group:`` entries (ncu's lists of
        metric names) are expanded into the metrics they list."""
        launch = count_arg(launch, "launch", "sections()")
        if not 0 <= launch < len(self._launches):
            raise LaunchNotFoundError(
                f"launch {launch} is not in this report (0..{len(self._launches) - 1}); pass "
                "one of the 'launch' column of kernels()."
            )
        columns = ["metric", "value", "unit"]
        return {
            name: pd.DataFrame(self._metric_rows(launch, names), columns=columns)
            for name, names in self._launches[launch]["sections"]
        }

    def nvtx_ranges(self) -> pd.DataFrame:
        """Long frame ``launch, domain, range, style, level``: every NVTX range open around
        each launch (``domain`` "" for the default domain; level 0 = outermost push/pop). The
        script's phase mirror is not listed: ``kernels()`` carries it as ``phase``."""
        rows = []
        for launch, data in enumerate(self._launches):
            for domain, style, level, name in data["nvtx"]:
                if domain != PHASE_DOMAIN:
                    rows.append((launch, domain, name, style, level))
        return pd.DataFrame(rows, columns=["launch", "domain", "range", "style", "level"]).astype(
            {"launch": np.int64, "level": np.int64}
        )

    def device(self) -> dict[str, Any]:
        """``name`` (e.g. "NVIDIA H200"), ``compute_capability`` ("9.0"), ``sm_count``,
        ``sm_clock_max_hz`` of the GPU of the first launch."""
        num = functools.partial(self._number, 0)
        major = num("device__attribute_compute_capability_major")
        minor = num("device__attribute_compute_capability_minor")
        sm_count = num("device__attribute_multiprocessor_count")
        return {
            "name": self._value(0, "device__attribute_display_name") or "",
            "compute_capability": "" if math.isnan(major) else f"{int(major)}.{int(minor)}",
            "sm_count": None if math.isnan(sm_count) else int(sm_count),
            "sm_clock_max_hz": num("device__attribute_clock_rate") * 1e3,  # attribute is kHz
        }

    def advice(self) -> pd.DataFrame:
        """ncu's rule results, one row per rule per launch (:func:`.advice.advice_frame`):
        ``launch, name, rule, section, title, message, speedup_pct, speedup_type, severity,
        section_name, focus_metrics``, largest estimated speedup first. Empty (same columns)
        when ncu ran no rules; :meth:`advice_note` says why."""
        if "advice" not in self._cache:
            names = [launch["function"] for launch in self._launches]
            rules = [launch["rules"] for launch in self._launches]
            self._cache["advice"] = advice_frame(names, rules)
        return self._cache["advice"].copy()

    def advice_note(self) -> str:
        """Why :meth:`advice` is empty ("" when it is not): a --metrics-only report (ncu runs
        rules with sections only), or an ncu_report module that cannot read rules."""
        sections = [[name for name, _ in launch["sections"]] for launch in self._launches]
        return advice_note(self.advice(), self._rules_supported, sections)

    def roofline(self) -> pd.DataFrame:
        """Per-launch roofline points (:func:`..analysis.roofline.roofline_points`): ``launch,
        name, duration_ns``, ``<p>_flops_per_s`` and ceilings ``peak_<p>_flops_per_s`` (FLOP/s;
        p = fp64, fp32, fp16, tensor), ``dram_bytes_per_s, peak_dram_bytes_per_s,
        arithmetic_intensity, sm_clock_hz, tensor_op_path``, counts ``flop_count_<p>,
        flop_count_total, dram_bytes``."""
        if "roofline" not in self._cache:
            # read only the counters the roofline uses: a full-set launch has ~7000 metrics
            self._cache["roofline"] = roofline_points(
                self.metrics(select=lambda name: name.startswith(M.ROOFLINE_PREFIXES)),
                self.device()["compute_capability"],  # names the metrics to add when some lack
            )
        return self._cache["roofline"].copy()


def _whole_launches(
    launches: list[dict[str, Any]], layout: container.Layout
) -> tuple[list[dict[str, Any]], list[str]]:
    """The launches that came back whole (a name and at least one metric), and what the user
    must know about the rest: where the file is cut or damaged, which launches were left out."""
    whole = [launch for launch in launches if launch["function"] and launch["metrics"]]
    warnings = []
    if layout.problem:
        warnings.append(f"This report is damaged: {layout.problem}.")
    lost = [
        i for i, launch in enumerate(launches) if not (launch["function"] and launch["metrics"])
    ]
    if lost:
        which = ", ".join(str(i) for i in lost)
        warnings.append(
            f"{len(lost)} of the {len(launches)} launches ncu_report read came back without a "
            f"name or metrics (their records are cut or damaged) and are left out: launch "
            f"{which} in report order; the launches shown are renumbered 0..{len(whole) - 1}."
        )
    elif layout.whole and len(launches) != layout.results:
        warnings.append(
            f"The file holds {layout.results} launch records but ncu_report read "
            f"{len(launches)} launches from it."
        )
    for i, launch in enumerate(launches):
        if launch.get("rules_error"):
            warnings.append(
                f"ncu's advice for launch {i} could not be read: {launch['rules_error']}."
            )
    return whole, warnings


def _integers(values: pd.Series) -> pd.Series:
    """int64 when every value is present, nullable Int64 otherwise."""
    if values.isna().any():
        return values.round().astype("Int64")
    return values.round().astype(np.int64)


def _phase(entries: Iterable[tuple[str, str, int, str]]) -> str:
    """The phase mirror's range (``DOMAIN:RANGE``), or "": the script keeps one open at a
    time; were two seen (a switch racing a launch on another thread), the last listed wins."""
    names = [name for domain, _s, _l, name in entries if domain == PHASE_DOMAIN]
    return names[-1] if names else ""


def _nvtx_path(entries: Iterable[tuple[str, str, int, str]]) -> str:
    """``domain@outer/inner`` per domain of the push/pop ranges, domains joined by ``; ``."""
    paths: dict[str, list[str]] = {}
    for domain, style, _level, name in entries:
        if style == "PushPop":
            paths.setdefault(domain, []).append(name)
    return "; ".join(
        (f"{domain}@" if domain else "") + "/".join(stack) for domain, stack in paths.items()
    )
