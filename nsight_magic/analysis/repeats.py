"""Per-repeat statistics of a run captured with ``%%nsys --repeat N`` (pure functions).

The cell ran N times in one capture, each time inside its own opening of the ``cell`` range
(domain ``nsight_magic``; ``script/runtime.run_repeats``). A GPU operation belongs to the
repeat during whose opening its launching CUDA call started, on any thread of that process
(autograd's backward thread included), so work that a repeat launched and the GPU ran later
still counts for it. What ran between the openings (the put-back of the state a repeat
changed) belongs to none.

Per kernel name (and per NVTX range) the N per-repeat totals give ``repeat_mean_ns``,
``repeat_med_ns``, ``repeat_std_ns`` (sample std, n - 1), the mean's 95% interval
``repeat_ci95_lo_ns`` .. ``repeat_ci95_hi_ns`` (Student's t with n - 1 degrees of freedom) and
``repeat_rsd_pct`` (std over mean, %). A run of one repeat has none of these columns: its
frames stay equal to ``nsys stats``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..vocabulary.nvtx_names import CELL_RANGE, NVTX_DOMAIN
from .keyjoin import first_match

__all__ = [
    "MFU_KEYS",
    "MFU_REPEAT_COLUMNS",
    "RANGE_KEYS",
    "REPEAT_COLUMNS",
    "UNSTABLE_RSD_PCT",
    "RepeatStats",
    "kernel_repeats",
    "mfu_with_repeats",
    "phase_repeats",
    "projection_repeats",
    "range_repeats",
    "repeat_stats",
    "repeat_table",
    "repeat_windows",
    "summary_with_repeats",
    "t95",
    "unstable_notes",
    "with_repeat_stats",
]

REPEAT_COLUMNS = [
    "repeat_mean_ns",
    "repeat_med_ns",
    "repeat_std_ns",
    "repeat_ci95_lo_ns",
    "repeat_ci95_hi_ns",
    "repeat_rsd_pct",
]
RANGE_KEYS = ["domain", "range", "style"]  # a projection's row
MFU_KEYS = ["domain", "range"]  # an MFU row: a range over its styles
# the MFU's 95% interval over the repeats (mfu_with_repeats)
MFU_REPEAT_COLUMNS = ["mfu_ci95_lo_frac", "mfu_ci95_hi_frac"]
UNSTABLE_RSD_PCT = 5.0  # a run's GPU time per repeat varying more than this is said unstable

# Student's t, 97.5% point (two-sided 95%), for 1..30 degrees of freedom
_T975 = (
    12.7062047, 4.30265273, 3.18244631, 2.77644511, 2.57058184, 2.44691185, 2.36462425,
    2.30600414, 2.26215716, 2.22813885, 2.20098516, 2.17881283, 2.16036866, 2.14478669,
    2.13144955, 2.11990530, 2.10981558, 2.10092204, 2.09302405, 2.08596345, 2.07961384,
    2.07387307, 2.06865761, 2.06389856, 2.05953855, 2.05552944, 2.05183052, 2.04840714,
    2.04522964, 2.04227246,
)  # fmt: skip
_Z975 = 1.959963984540054


def t95(dof: int) -> float:
    """Student's t 97.5% point for ``dof`` degrees of freedom (a table to 30; beyond, the
    Cornish-Fisher expansion around the normal's, within 2e-5 of the exact value)."""
    if dof < 1:
        return math.nan
    if dof <= len(_T975):
        return _T975[dof - 1]
    z = _Z975
    return (z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * dof**3))  # fmt: skip


def repeat_windows(nvtx: pd.DataFrame) -> pd.DataFrame:
    """The repeats: ``pid, start_ns, end_ns, repeat`` (0-based, in start order per process),
    one per opening of the ``cell`` range of domain ``nsight_magic``."""
    cells = nvtx[(nvtx["domain"] == NVTX_DOMAIN) & (nvtx["range"] == CELL_RANGE)]
    cells = cells[["pid", "start_ns", "end_ns"]].sort_values(["pid", "start_ns"], kind="stable")
    cells = cells.reset_index(drop=True)
    cells["repeat"] = cells.groupby("pid").cumcount().astype(np.int64)
    return cells


def _repeat_of(pids: np.ndarray, times: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Each (pid, time)'s repeat, -1 where it falls in none (before, between or after)."""
    out = np.full(len(times), -1, dtype=np.int64)
    for pid, own in windows.groupby("pid", sort=False):
        starts, ends = own["start_ns"].to_numpy(), own["end_ns"].to_numpy()
        at = np.flatnonzero(pids == pid)
        slot = np.searchsorted(starts, times[at], side="right") - 1
        inside = (slot >= 0) & (times[at] < ends[np.clip(slot, 0, None)])
        out[at[inside]] = own["repeat"].to_numpy()[slot[inside]]
    return out


def launch_repeats(ops: pd.DataFrame, cuda_api: pd.DataFrame, windows: pd.DataFrame) -> np.ndarray:
    """Each GPU op's repeat (its launching call's start, joined on pid and correlation id as
    nsys joins them), -1 for an op launched outside every repeat or without a recorded call."""
    if ops.empty or cuda_api.empty or windows.empty:
        return np.full(len(ops), -1, dtype=np.int64)
    call = first_match(cuda_api["pid"].to_numpy(), cuda_api["correlation_id"].to_numpy(),
                       ops["pid"].to_numpy(), ops["correlation_id"].to_numpy())  # fmt: skip
    starts = cuda_api["start_ns"].to_numpy()
    launched = np.where(call >= 0, starts[np.clip(call, 0, None)], np.iinfo(np.int64).min)
    found = _repeat_of(ops["pid"].to_numpy(), launched, windows)
    return np.where(call >= 0, found, -1)


def _per_repeat(keys: pd.Series, values: np.ndarray, repeat: np.ndarray, n: int) -> pd.DataFrame:
    """Per key, its total in each of the ``n`` repeats (columns 0..n-1; 0 where it ran none)."""
    inside = repeat >= 0
    frame = pd.DataFrame({"key": keys.to_numpy()[inside], "repeat": repeat[inside],
                          "value": values[inside].astype(np.float64)})  # fmt: skip
    table = frame.pivot_table(index="key", columns="repeat", values="value", aggfunc="sum",
                              fill_value=0.0, observed=True)  # fmt: skip
    return table.reindex(columns=range(n), fill_value=0.0)


def repeat_stats(per_repeat: pd.DataFrame) -> pd.DataFrame:
    """``REPEAT_COLUMNS`` of each row of per-repeat totals (one column per repeat)."""
    values = per_repeat.to_numpy(dtype=np.float64)
    n = values.shape[1]
    mean = values.mean(axis=1) if n else np.full(len(values), np.nan)
    std = values.std(axis=1, ddof=1) if n > 1 else np.full(len(values), np.nan)
    half = t95(n - 1) * std / math.sqrt(n) if n > 1 else np.full(len(values), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        rsd = np.where(mean > 0, 100.0 * std / mean, np.nan)
    return pd.DataFrame(
        {
            "repeat_mean_ns": mean,
            "repeat_med_ns": np.median(values, axis=1) if n else mean,
            "repeat_std_ns": std,
            "repeat_ci95_lo_ns": mean - half,
            "repeat_ci95_hi_ns": mean + half,
            "repeat_rsd_pct": rsd,
        },
        index=per_repeat.index,
    )


@dataclass(frozen=True)
class RepeatStats:
    """A run's GPU time per repeat: ``totals_ns`` (the kernel time each repeat launched, in
    order), their mean, 95% interval and RSD."""

    totals_ns: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.totals_ns)

    def row(self) -> pd.Series:
        stats = repeat_stats(pd.DataFrame([list(self.totals_ns)]))
        return stats.iloc[0]

    def line(self) -> str:
        """``10 repeats: GPU time per repeat 4.21 ms (4.18-4.24), RSD 1.2%``."""
        r = self.row()
        if self.n < 2:
            return f"{self.n} repeat: no spread to read"
        return (f"{self.n} repeats: GPU time per repeat {r.repeat_mean_ns / 1e6:.3f} ms "
                f"({r.repeat_ci95_lo_ns / 1e6:.3f}-{r.repeat_ci95_hi_ns / 1e6:.3f}, 95%), "
                f"RSD {r.repeat_rsd_pct:.1f}%")  # fmt: skip


def _count(windows: pd.DataFrame, expected: int) -> int:
    """``expected`` when every process holds that many openings of the cell (a run's meta says
    how many repeats it ran: a report alone cannot tell a repeat from a ``cell`` range of the
    user's), else 0."""
    if expected < 2 or windows.empty:
        return 0
    counts = windows.groupby("pid")["repeat"].size()
    return expected if bool((counts == expected).all()) else 0


def kernel_repeats(kernels: pd.DataFrame, cuda_api: pd.DataFrame, nvtx: pd.DataFrame,
                   expected: int) -> tuple[pd.DataFrame, RepeatStats] | None:  # fmt: skip
    """Per kernel name its per-repeat ``REPEAT_COLUMNS`` (indexed by name) and the run's
    ``RepeatStats`` for a run of ``expected`` >= 2 repeats; None otherwise, or when the
    report does not hold that many openings of the cell in each process."""
    windows = repeat_windows(nvtx)
    n = _count(windows, expected)
    if n < 2:
        return None
    repeat = launch_repeats(kernels, cuda_api, windows)
    durations = kernels["duration_ns"].to_numpy()
    table = _per_repeat(kernels["name"].astype(str), durations, repeat, n)
    totals = tuple(float(durations[repeat == r].sum()) for r in range(n))
    return repeat_stats(table), RepeatStats(totals)


def range_repeats(trace: pd.DataFrame, windows: pd.DataFrame, expected: int, *, value: str,
                  keys: Sequence[str] = RANGE_KEYS) -> pd.DataFrame | None:  # fmt: skip
    """Per ``keys`` of a range trace (one row per opening: its ``start_ns``, ``pid`` and
    ``value``, e.g. ``nvtx_gpu_proj_trace``'s ``proj_duration_ns`` or a phase trace's
    ``phase_duration_ns``) its per-repeat ``REPEAT_COLUMNS``, an opening counting for the
    repeat (of ``windows``, ``repeat_windows``' answer) it opened in; None under two repeats
    (as ``kernel_repeats``)."""
    n = _count(windows, expected)
    if n < 2 or trace.empty:
        return None
    repeat = _repeat_of(trace["pid"].to_numpy(), trace["start_ns"].to_numpy(), windows)
    columns = [trace[k].astype(str) for k in keys]
    names = pd.Series(list(zip(*columns, strict=True))) if len(keys) > 1 else columns[0]
    table = _per_repeat(names, trace[value].to_numpy(), repeat, n)
    return repeat_stats(table)


def projection_repeats(trace: pd.DataFrame, windows: pd.DataFrame, expected: int,
                       keys: Sequence[str] = RANGE_KEYS) -> pd.DataFrame | None:  # fmt: skip
    """Per ``keys`` of a projection trace (``nvtx_gpu_proj_trace``) its per-repeat
    ``REPEAT_COLUMNS`` of the projected GPU time (``range_repeats``)."""
    return range_repeats(trace, windows, expected, value="proj_duration_ns", keys=keys)


def phase_repeats(trace: pd.DataFrame, windows: pd.DataFrame, expected: int,
                  keys: Sequence[str] = RANGE_KEYS) -> pd.DataFrame | None:  # fmt: skip
    """Per ``keys`` of a phase trace (``analysis.phases.project_phases``) its per-repeat
    ``REPEAT_COLUMNS`` of the phase time (``range_repeats``)."""
    return range_repeats(trace, windows, expected, value="phase_duration_ns", keys=keys)


def mfu_with_repeats(mfu: pd.DataFrame, phase: pd.DataFrame | None,
                     projection: pd.DataFrame | None, phase_source: str,
                     repeats: int) -> pd.DataFrame:  # fmt: skip
    """An MFU-per-range frame (``analysis.mfu.model_mfu``) with its time's per-repeat
    ``REPEAT_COLUMNS`` (``phase``'s, keyed by ``(domain, range)``, for a row whose
    ``time_source`` is ``phase_source``; ``projection``'s for the others) and the MFU's 95%
    interval ``mfu_ci95_lo_frac`` .. ``mfu_ci95_hi_frac``: each repeat runs the same cell from
    the same state, so it does 1/N of the run's FLOPs, and the MFU of the mean time per repeat
    (``mfu_frac``) moves inversely with the time, so the time's interval ends give the MFU's.
    A bound above 1 (impossible) is left blank, as ``mfu_frac`` would be. ``mfu`` unchanged
    when neither frame holds repeats."""
    if phase is None and projection is None:
        return mfu
    out = mfu.copy()
    keys = list(zip(out["domain"].astype(str), out["range"].astype(str), strict=True))
    from_phase = (out["time_source"] == phase_source).to_numpy()
    empty = pd.DataFrame(columns=REPEAT_COLUMNS, dtype=np.float64)
    by_phase = (phase if phase is not None else empty).reindex(keys)
    by_projection = (projection if projection is not None else empty).reindex(keys)
    for column in REPEAT_COLUMNS:
        out[column] = np.where(from_phase, by_phase[column].to_numpy(dtype=np.float64),
                               by_projection[column].to_numpy(dtype=np.float64))  # fmt: skip
    mean = out["repeat_mean_ns"].to_numpy(dtype=np.float64)
    frac = pd.to_numeric(out["mfu_frac"], errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        for column, end in (("mfu_ci95_lo_frac", "repeat_ci95_hi_ns"),
                            ("mfu_ci95_hi_frac", "repeat_ci95_lo_ns")):  # fmt: skip
            bound = out[end].to_numpy(dtype=np.float64)
            value = np.where(bound > 0, frac * mean / bound, np.nan)
            out[column] = np.where((value >= 0) & (value <= 1), value, np.nan)
    out.attrs = dict(mfu.attrs, repeats=repeats)
    return out


def with_repeat_stats(frame: pd.DataFrame, stats: pd.DataFrame | None, keys: Sequence[str],
                      repeats: int) -> pd.DataFrame:  # fmt: skip
    """``frame`` with ``REPEAT_COLUMNS`` joined on ``keys`` (a row no repeat holds: NaN) and
    ``attrs["repeats"]``; ``frame`` unchanged when ``stats`` is None."""
    if stats is None:
        return frame
    index = (pd.MultiIndex.from_frame(frame[list(keys)]) if len(keys) > 1
             else pd.Index(frame[keys[0]]))  # fmt: skip
    out = frame.copy()
    joined = stats.reindex(index)
    for column in REPEAT_COLUMNS:
        out[column] = joined[column].to_numpy()
    out.attrs["repeats"] = repeats
    return out


Found = tuple[pd.DataFrame, RepeatStats]  # kernel_repeats' answer


def summary_with_repeats(summary: pd.DataFrame, found: Found | None) -> pd.DataFrame:
    """A kernel summary with ``kernel_repeats``' columns and, for ``compare()``'s run total,
    ``attrs["repeat_totals_ns"]``; ``summary`` itself for a run of one repeat."""
    if found is None:
        return summary
    out = with_repeat_stats(summary, found[0], ["name"], found[1].n)
    out.attrs["repeat_totals_ns"] = list(found[1].totals_ns)
    return out


def repeat_table(stats: RepeatStats | None, walls_s: Sequence[float]) -> pd.DataFrame:
    """One row per repeat: ``repeat`` (1..N), ``kernel_time_ns`` and ``wall_ns`` (``walls_s``,
    each repeat's own time on the CPU, in ns; NaN when their number is not N)."""
    n = stats.n if stats is not None else 0
    walls = [float(w) * 1e9 for w in walls_s] if len(walls_s) == n else [math.nan] * n
    return pd.DataFrame({
        "repeat": pd.array(range(1, n + 1), dtype="int64"),
        "kernel_time_ns": pd.array([int(t) for t in stats.totals_ns] if stats else [],
                                   dtype="int64"),
        "wall_ns": pd.array(walls, dtype="float64"),
    })  # fmt: skip


def unstable_notes(stats: RepeatStats | None) -> list[str]:
    """The line a run of unstable repeats gets (RSD of its GPU time per repeat over 5%)."""
    if stats is None or stats.n < 2:
        return []
    rsd = float(stats.row().repeat_rsd_pct)
    if not rsd > UNSTABLE_RSD_PCT:
        return []
    return [f"Unstable: the GPU time per repeat varies by {rsd:.1f}% (RSD over {stats.n} "
            f"repeats, above {UNSTABLE_RSD_PCT:.0f}%); a comparison reads this noise as its "
            "interval. Warm up (--warmup 1), lock the clocks or repeat more."]  # fmt: skip
