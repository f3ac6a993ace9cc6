"""``NcuReport``: a ``.ncu-rep`` read through NVIDIA's ``ncu_report`` module (no GPU needed).

One row per profiled launch, numbered 0.. in report order (ranges, then actions). Frames follow
the contracts in ARCHITECTURE.md. Everything read is cached: the report is immutable.

Speed: ``IMetric.unit()`` costs ~50 us a call while value/kind cost ~1 us, so units are looked
up once per metric name for the whole report (a metric's unit does not change between launches).
Measured on tests/data: ``--set full`` (2243 metrics x 3 launches) -> ``metrics()`` in ~0.1 s,
i.e. ~5 us per metric value, so 100 launches x 7000 metrics take ~3-4 s.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from ..errors import (
    CorruptReportError,
    EmptyReportError,
    ReportError,
    ReportNotFoundError,
    ToolNotFoundError,
)
from . import metrics as M

__all__ = ["NcuReport"]

_MAGIC = b"NVR\x00"  # first bytes of every .ncu-rep ncu 2023-2025 writes
# ncu_report.IMetric.ValueKind: FLOAT=3, DOUBLE=4, UINT32=5, UINT64=6 are numbers; 2 is a string.
_NUMERIC_KINDS = frozenset({3, 4, 5, 6})
_STRING_KIND = 2

_F = TypeVar("_F", bound=Callable[..., Any])


def _reading(method: _F) -> _F:
    """Turn anything ncu_report raises while reading into a CorruptReportError."""

    @functools.wraps(method)
    def wrapper(self: NcuReport, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except ReportError:
            raise
        except Exception as exc:
            raise CorruptReportError(f"{self.path}: cannot read the report ({exc}).") from exc

    return wrapper  # type: ignore[return-value]


class NcuReport:
    """A loaded Nsight Compute report. Use :meth:`open`."""

    def __init__(self, path: Path, context: Any, actions: list[Any]) -> None:
        self.path = path
        self._context = context
        self._actions = actions
        self._units: dict[str, str] = {}
        self._cache: dict[str, Any] = {}

    # --- loading ----------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> NcuReport:
        """Load ``path``. Raises ReportNotFoundError, EmptyReportError (0 bytes) or
        CorruptReportError (not a .ncu-rep, truncated, or no profiled launch in it)."""
        path = Path(path)
        if not path.exists():
            raise ReportNotFoundError(f"{path} does not exist; check the path or re-run %%ncu.")
        if path.is_dir():
            raise CorruptReportError(f"{path} is a folder, not a .ncu-rep file.")
        size = path.stat().st_size
        if size == 0:
            raise EmptyReportError(
                f"{path} is empty (0 bytes): ncu stopped before writing it; re-run %%ncu."
            )
        with open(path, "rb") as fh:
            head = fh.read(len(_MAGIC))
        if head != _MAGIC:
            raise CorruptReportError(f"{path} is not an Nsight Compute report (.ncu-rep).")
        try:
            import ncu_report
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise ToolNotFoundError(
                "The ncu_report module is missing; install it with `pip install ncu-report`."
            ) from exc
        try:
            context = ncu_report.load_report(str(path))
            actions = [
                rng.action_by_idx(i)
                for rng in (context.range_by_idx(r) for r in range(context.num_ranges()))
                for i in range(rng.num_actions())
            ]
        except Exception as exc:
            raise CorruptReportError(f"{path}: ncu_report cannot read it ({exc}).") from exc
        if not actions:
            # ncu_report "loads" garbage and truncated files as a report with 0 ranges.
            raise CorruptReportError(
                f"{path} holds no profiled kernel: the file is truncated or damaged; re-run %%ncu."
            )
        return cls(path, context, actions)

    def __len__(self) -> int:
        return len(self._actions)

    def __repr__(self) -> str:
        return f"NcuReport({str(self.path)!r}, launches={len(self)})"

    # --- low-level access -------------------------------------------------------------------
    def _unit(self, action: Any, name: str) -> str:
        unit = self._units.get(name)
        if unit is None:
            unit = self._units[name] = action.metric_by_name(name).unit() or ""
        return unit

    def _value(self, launch: int, name: str) -> Any:
        """A metric's value (float, or str for string metrics), or None when absent."""
        metric = self._actions[launch].metric_by_name(name)
        if metric is None:
            return None
        kind = metric.kind()
        if kind in _NUMERIC_KINDS:
            return metric.as_double()
        if kind == _STRING_KIND:
            return metric.as_string()
        return None

    def _number(self, launch: int, name: str) -> float:
        value = self._value(launch, name)
        return float(value) if isinstance(value, float) else math.nan

    def _metric_rows(self, launch: int, names: Iterable[str]) -> list[tuple[str, float, str]]:
        action = self._actions[launch]
        rows = []
        for name in names:
            metric = action.metric_by_name(name)
            # Instanced metrics (PM sampling, per-SM) keep their aggregate value; the
            # per-instance series is left out of the long frame.
            if metric is None or metric.kind() not in _NUMERIC_KINDS:
                continue
            rows.append((name, metric.as_double(), self._unit(action, name)))
        return rows

    # --- frames -----------------------------------------------------------------------------
    @_reading
    def kernels(self) -> pd.DataFrame:
        """One row per launch: ``launch, name, demangled, mangled, duration_ns, grid, block,
        registers_per_thread, shared_mem_bytes, sm_clock_hz, device_id, stream_id, nvtx,
        process_id``. ``shared_mem_bytes`` = static + dynamic shared memory per block;
        ``nvtx`` = the push/pop ranges around the launch, ``domain@outer/inner`` (no ``domain@``
        for the default domain; domains joined by ``; ``); ``process_id`` is <NA> because
        ncu_report does not expose it."""
        if "kernels" in self._cache:
            return self._cache["kernels"].copy()
        import ncu_report

        rows = []
        for launch, action in enumerate(self._actions):
            num = functools.partial(self._number, launch)

            def dims(prefix: str, num: Callable[[str], float] = num) -> str:
                xyz = [num(f"{prefix}_{axis}") for axis in "xyz"]
                return "(" + ", ".join(str(int(v)) if v == v else "?" for v in xyz) + ")"

            rows.append(
                {
                    "launch": launch,
                    "name": action.name(ncu_report.IAction.NameBase_FUNCTION),
                    "demangled": action.name(ncu_report.IAction.NameBase_DEMANGLED),
                    "mangled": action.name(ncu_report.IAction.NameBase_MANGLED),
                    "duration_ns": num(M.DURATION),
                    "grid": dims("launch__grid_dim"),
                    "block": dims("launch__block_dim"),
                    "registers_per_thread": num("launch__registers_per_thread"),
                    "shared_mem_bytes": num("launch__shared_mem_per_block_static")
                    + num("launch__shared_mem_per_block_dynamic"),
                    "sm_clock_hz": num(M.SM_CLOCK),
                    "device_id": num("launch__device_id"),
                    "stream_id": num("launch__stream_id"),
                    "nvtx": _nvtx_path(action),
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

    @_reading
    def _read_metrics(self, select: Callable[[str], bool] | None) -> pd.DataFrame:
        names = self.kernels()["name"]
        launches, metric_names, values, units = [], [], [], []
        for launch, action in enumerate(self._actions):
            wanted = action.metric_names()
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

    @_reading
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
        if not 0 <= launch < len(self._actions):
            raise KeyError(f"launch {launch} is not in this report (0..{len(self._actions) - 1})")
        return self._sections(launch)

    @_reading
    def _sections(self, launch: int) -> dict[str, pd.DataFrame]:
        action = self._actions[launch]
        out: dict[str, pd.DataFrame] = {}
        for section in action.sections():
            names: list[str] = []
            for metric in (*section.header_metrics(), *section.body_metrics()):
                name = metric.name()
                if metric.kind() == _STRING_KIND and name.startswith(("breakdown:", "group:")):
                    names.extend(n for n in metric.as_string().split(",") if n)
                else:
                    names.append(name)
            rows = self._metric_rows(launch, dict.fromkeys(names))
            out[section.name()] = pd.DataFrame(rows, columns=["metric", "value", "unit"])
        return out

    @_reading
    def nvtx_ranges(self) -> pd.DataFrame:
        """Long frame ``launch, domain, range, style, level``: every NVTX range open around
        each launch (``domain`` "" for the default domain; level 0 = outermost push/pop)."""
        rows = []
        for launch, action in enumerate(self._actions):
            for domain, style, level, name in _nvtx_entries(action):
                rows.append((launch, domain, name, style, level))
        return pd.DataFrame(rows, columns=["launch", "domain", "range", "style", "level"]).astype(
            {"launch": np.int64, "level": np.int64}
        )

    @_reading
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

    def roofline(self) -> pd.DataFrame:
        """Per-launch roofline points: :func:`..analysis.roofline.roofline_points`."""
        from ..analysis.roofline import roofline_points

        if "roofline" not in self._cache:
            # read only the counters the roofline uses: a full-set launch has ~7000 metrics
            self._cache["roofline"] = roofline_points(
                self.metrics(select=lambda name: name.startswith(M.ROOFLINE_PREFIXES))
            )
        return self._cache["roofline"].copy()


def _integers(values: pd.Series) -> pd.Series:
    """int64 when every value is present, nullable Int64 otherwise."""
    if values.isna().any():
        return values.round().astype("Int64")
    return values.round().astype(np.int64)


def _nvtx_entries(action: Any) -> list[tuple[str, str, int, str]]:
    """(domain, style, level, range) for the ranges open around one launch."""
    state = action.nvtx_state()
    if state is None:
        return []
    entries = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        dname = domain.name()
        dname = "" if dname == "<default domain>" else dname
        for level, name in enumerate(domain.push_pop_ranges()):
            entries.append((dname, "PushPop", level, name))
        for name in domain.start_end_ranges():
            entries.append((dname, "StartEnd", 0, name))
    return entries


def _nvtx_path(action: Any) -> str:
    paths: dict[str, list[str]] = {}
    for domain, style, _level, name in _nvtx_entries(action):
        if style == "PushPop":
            paths.setdefault(domain, []).append(name)
    return "; ".join(
        (f"{domain}@" if domain else "") + "/".join(stack) for domain, stack in paths.items()
    )
