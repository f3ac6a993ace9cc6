"""``NcuReport``: a ``.ncu-rep`` read through NVIDIA's ``ncu_report`` module (no GPU needed).

One row per profiled launch, numbered 0.. in report order (ranges, then actions). Frames follow
the contracts in ARCHITECTURE.md. Everything read is cached: the report is immutable.

Isolation: ``ncu_report`` is never imported in this process. It aborts the whole process (a C++
``abort()``) on some damaged files, which in a notebook would kill the user's kernel. ``open``
runs ``python -m nsight_magic.reports.ncu.extract`` in a child that loads the report and saves
plain data (see ``extract.py``); a crash, timeout or failure of the child becomes a
``CorruptReportError``. Every frame is then built from that in-memory data (no cache on disk).

Speed (measured on tests/data, 2-core machine): the child takes ~0.25-0.4 s per fixture (startup
+ ``load_report`` + reading every metric; ``IMetric.unit()`` ~50 us a call is read once per metric
name); ``metrics()`` of ``--set full`` (2243 metrics x 3 launches) then takes a few ms.
"""

from __future__ import annotations

import functools
import math
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import nsight_magic

from ...analysis import ncu_metrics as M
from ...errors import (
    CorruptReportError,
    EmptyReportError,
    ReportNotFoundError,
    ToolNotFoundError,
)
from . import extract as X

__all__ = ["NcuReport"]

_MAGIC = b"NVR\x00"  # first bytes of every .ncu-rep ncu 2023-2025 writes
EXTRACT_TIMEOUT_S = 120.0  # plus 1 s per 50 MB of report (see _timeout)


class _PlainUnpickler(pickle.Unpickler):
    """Builtin containers and scalars only: the child's output never needs a class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in the extracted data")


def _timeout(size: int) -> float:
    return EXTRACT_TIMEOUT_S + size / 50e6


def _extract(path: Path, timeout: float) -> dict[str, Any]:
    """Run the extraction child on ``path``; its data, or the typed error for what went wrong."""
    package_root = str(Path(nsight_magic.__file__).resolve().parent.parent)
    env = dict(os.environ)
    # so the child finds this very package even if it was put on sys.path at runtime
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), package_root) if p)
    with tempfile.TemporaryDirectory(prefix="nsight-magic-ncu-") as tmp:  # private (0700)
        out = Path(tmp) / "extract.pkl"
        argv = [
            sys.executable,
            "-m",
            X.MODULE,
            str(path.resolve()),
            str(out),
        ]
        try:
            proc = subprocess.run(
                argv,
                cwd=tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise CorruptReportError(
                f"{path}: ncu_report did not finish reading it within {timeout:.0f} s; the file "
                "is damaged or unusually large (pass a larger timeout= to NcuReport.open)."
            ) from exc
        except OSError as exc:
            raise CorruptReportError(
                f"{path}: cannot start a Python child to read it ({exc})."
            ) from exc
        stderr = proc.stderr.decode(errors="replace").strip()
        detail = stderr.splitlines()[-1] if stderr else ""
        if proc.returncode < 0:
            try:
                sig = signal.Signals(-proc.returncode).name
            except ValueError:
                sig = f"signal {-proc.returncode}"
            raise CorruptReportError(
                f"{path} is damaged: ncu_report crashed reading it ({sig}); re-run %%ncu."
            )
        if proc.returncode == X.EXIT_NO_MODULE:
            raise ToolNotFoundError(
                f"The ncu_report module is missing ({detail}); install it with "
                "`pip install ncu-report`."
            )
        if proc.returncode != 0:
            raise CorruptReportError(
                f"{path}: ncu_report cannot read it ({detail or f'exit {proc.returncode}'})."
            )
        try:
            with open(out, "rb") as fh:
                data = _PlainUnpickler(fh).load()
        except Exception as exc:
            raise CorruptReportError(
                f"{path}: the data read from it could not be loaded back ({exc})."
            ) from exc
    if not _valid(data):
        raise CorruptReportError(f"{path}: the data read from it is not in the expected layout.")
    return data


def _valid(data: Any) -> bool:
    if not isinstance(data, dict) or data.get("format") != X.FORMAT:
        return False
    launches, units = data.get("launches"), data.get("units")
    if not isinstance(launches, list) or not isinstance(units, dict):
        return False
    keys = {"function", "demangled", "mangled", "metrics", "sections", "nvtx"}
    return all(
        isinstance(launch, dict)
        and keys <= launch.keys()
        and isinstance(launch["metrics"], dict)
        and isinstance(launch["sections"], list)
        and isinstance(launch["nvtx"], list)
        for launch in launches
    )


class NcuReport:
    """A loaded Nsight Compute report. Use :meth:`open`."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self._launches: list[dict[str, Any]] = data["launches"]
        self._units: dict[str, str] = data["units"]
        self._cache: dict[str, Any] = {}

    # --- loading ----------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, *, timeout: float | None = None) -> NcuReport:
        """Load ``path`` (read by ``ncu_report`` in a child process, see the module docstring).
        Raises ReportNotFoundError, EmptyReportError (0 bytes) or CorruptReportError (not a
        .ncu-rep, truncated, damaged enough to crash ncu_report, or no profiled launch in it);
        ToolNotFoundError when ``ncu_report`` is not installed. ``timeout`` (s) bounds the
        child; default 120 s + 1 s per 50 MB."""
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
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(_MAGIC))
        except OSError as exc:
            raise CorruptReportError(f"{path} cannot be read ({exc}).") from exc
        if head != _MAGIC:
            raise CorruptReportError(f"{path} is not an Nsight Compute report (.ncu-rep).")
        data = _extract(path, _timeout(size) if timeout is None else timeout)
        if not data["launches"]:
            # ncu_report "loads" garbage and truncated files as a report with 0 ranges.
            raise CorruptReportError(
                f"{path} holds no profiled kernel: the file is truncated or damaged; re-run %%ncu."
            )
        return cls(path, data)

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
        process_id``. ``shared_mem_bytes`` = static + dynamic shared memory per block;
        ``nvtx`` = the push/pop ranges around the launch, ``domain@outer/inner`` (no ``domain@``
        for the default domain; domains joined by ``; ``); ``process_id`` is <NA> because
        ncu_report does not expose it."""
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
        if not 0 <= launch < len(self._launches):
            raise KeyError(f"launch {launch} is not in this report (0..{len(self._launches) - 1})")
        columns = ["metric", "value", "unit"]
        return {
            name: pd.DataFrame(self._metric_rows(launch, names), columns=columns)
            for name, names in self._launches[launch]["sections"]
        }

    def nvtx_ranges(self) -> pd.DataFrame:
        """Long frame ``launch, domain, range, style, level``: every NVTX range open around
        each launch (``domain`` "" for the default domain; level 0 = outermost push/pop)."""
        rows = []
        for launch, data in enumerate(self._launches):
            for domain, style, level, name in data["nvtx"]:
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

    def roofline(self) -> pd.DataFrame:
        """Per-launch roofline points: :func:`..analysis.roofline.roofline_points`."""
        from ...analysis.roofline import roofline_points

        if "roofline" not in self._cache:
            # read only the counters the roofline uses: a full-set launch has ~7000 metrics
            self._cache["roofline"] = roofline_points(
                self.metrics(select=lambda name: name.startswith(M.ROOFLINE_PREFIXES)),
                self.device()["compute_capability"],  # names the metrics to add when some lack
            )
        return self._cache["roofline"].copy()


def _integers(values: pd.Series) -> pd.Series:
    """int64 when every value is present, nullable Int64 otherwise."""
    if values.isna().any():
        return values.round().astype("Int64")
    return values.round().astype(np.int64)


def _nvtx_path(entries: Iterable[tuple[str, str, int, str]]) -> str:
    """``domain@outer/inner`` per domain of the push/pop ranges, domains joined by ``; ``."""
    paths: dict[str, list[str]] = {}
    for domain, style, _level, name in entries:
        if style == "PushPop":
            paths.setdefault(domain, []).append(name)
    return "; ".join(
        (f"{domain}@" if domain else "") + "/".join(stack) for domain, stack in paths.items()
    )
