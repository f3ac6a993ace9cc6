"""What the GPUs' state says about a run's times (pure functions over what
``processes/gpu_state.read_gpu_state`` recorded at a capture's start and end, meta.json's
``gpu_state``): a clock that moved or a GPU that heated during the capture, and two runs taken
under different clocks, power limits or GPUs, and (``%%nsys --repeat N``) a clock that moved or a
GPU that warmed between repeats (``script/gpu_readings.py``'s readings after each). A line each,
for ``run.warnings`` and ``compare()``'s summary; nothing when the state was not recorded (its
``why`` is said once)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CLOCK_CHANGE", "HEATING_C", "capture_notes", "repeat_notes", "run_differences"]

CLOCK_CHANGE = 0.05  # a relative SM or memory clock change worth saying (5%)
HEATING_C = 10  # degrees the GPU warmed during one capture worth saying
SLOWDOWNS = {"software power cap", "hardware slowdown", "software thermal slowdown",
             "hardware thermal slowdown", "hardware power brake"}  # fmt: skip


def _gpus(state: Mapping[str, Any] | None) -> dict[int, Mapping[str, Any]]:
    if not isinstance(state, Mapping) or state.get("source") != "nvml":
        return {}
    return {int(g["index"]): g for g in state.get("gpus") or [] if isinstance(g, Mapping)}


def _idle(gpu: Mapping[str, Any]) -> bool:
    """The driver said the GPU was idle when read: its clocks are the idle ones (345 MHz on an
    H100, tests/data/gpu_state.json), not the speed any kernel ran at, so they are not compared."""
    return "gpu idle" in (gpu.get("clock_reasons") or ())


def _moved(a: Any, b: Any, share: float = CLOCK_CHANGE) -> bool:
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and (
        abs(b - a) / a > share)  # fmt: skip


def capture_notes(recorded: Mapping[str, Any] | None) -> list[str]:
    """What changed on the GPUs between the capture's start and end (all of them: NVML's
    indexes are not the CUDA device ids a run's kernels name under CUDA_VISIBLE_DEVICES): an
    SM or memory clock that moved by more than 5% (neither read idle), a GPU that warmed by
    10 °C or more, a slowdown (power cap, thermal) the driver reported at the end."""
    if not isinstance(recorded, Mapping):
        return []
    start, end = _gpus(recorded.get("start")), _gpus(recorded.get("end"))
    notes = []
    for index in sorted(set(start) & set(end)):
        a, b = start[index], end[index]
        for key, what in (("sm_clock_mhz", "SM clock"), ("mem_clock_mhz", "memory clock")):
            if not (_idle(a) or _idle(b)) and _moved(a.get(key), b.get(key)):
                notes.append(f"GPU {index}'s {what} moved from {a[key]} to {b[key]} MHz during "
                             "the capture: its kernels ran at more than one speed")  # fmt: skip
        ta, tb = a.get("temperature_c"), b.get("temperature_c")
        if isinstance(ta, (int, float)) and isinstance(tb, (int, float)) and tb - ta >= HEATING_C:
            notes.append(f"GPU {index} warmed from {ta} to {tb} °C during the capture")
        slowed = sorted(SLOWDOWNS & set(b.get("clock_reasons") or ()))
        if slowed:
            notes.append(f"GPU {index}'s clocks were held down at the capture's end: "
                         f"{', '.join(slowed)}")  # fmt: skip
    return notes


def _per_gpu(readings: Sequence[Any]) -> dict[int, list[tuple[int, list[Any]]]]:
    """``{gpu index: [(repeat, row), ...]}`` of ``script/gpu_readings.gpu_reading`` rows
    (``[index, sm_clock_mhz, mem_clock_mhz, temperature_c, idle]``), repeats 1-based; a
    repeat without a reading (NVML not readable) or a malformed row is left out."""
    gpus: dict[int, list[tuple[int, list[Any]]]] = {}
    for repeat, rows in enumerate(readings, start=1):
        for row in rows if isinstance(rows, list) else []:
            if isinstance(row, list) and len(row) == 5 and isinstance(row[0], int):
                gpus.setdefault(row[0], []).append((repeat, row))
    return gpus


def repeat_notes(readings: Sequence[Any] | None) -> list[str]:
    """What moved on the GPUs between the repeats of a ``%%nsys --repeat N`` run (the status's
    ``repeat_gpu``: each GPU's clocks and temperature after each repeat): an SM or memory clock
    apart by more than 5% between two repeats (readings taken idle left out), a GPU that
    warmed by 10 °C or more from the first repeat to a later one. Empty when nothing moved or
    nothing was read."""
    if not isinstance(readings, Sequence) or len(readings) < 2:
        return []
    notes = []
    for index, rows in sorted(_per_gpu(readings).items()):
        busy = [(r, row) for r, row in rows if row[4] is not True]
        for column, what in ((1, "SM clock"), (2, "memory clock")):
            clocked = [(r, row[column]) for r, row in busy if isinstance(row[column], int | float)]
            if len(clocked) < 2:
                continue
            low, high = min(clocked, key=lambda x: x[1]), max(clocked, key=lambda x: x[1])
            if _moved(low[1], high[1]):
                notes.append(f"GPU {index}'s {what} moved between the repeats: {high[1]} MHz "
                             f"after repeat {high[0]}, {low[1]} MHz after repeat {low[0]}; "
                             "the repeats ran at more than one speed")  # fmt: skip
        temps = [(r, row[3]) for r, row in rows if isinstance(row[3], int | float)]
        if len(temps) >= 2:
            first, hottest = temps[0], max(temps, key=lambda x: x[1])
            if hottest[1] - first[1] >= HEATING_C:
                notes.append(f"GPU {index} warmed from {first[1]} °C after repeat {first[0]} "
                             f"to {hottest[1]} °C after repeat {hottest[0]}")  # fmt: skip
    return notes


def run_differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None,
                    label_a: str = "a", label_b: str = "b") -> list[str]:  # fmt: skip
    """How two runs' GPUs differed at their captures' start (meta.json ``gpu_state``): another
    GPU, SM clocks apart by more than 5% (neither idle), another power limit, clocks locked in
    one only. Empty when they match or either was not recorded."""
    start_a = _gpus((a or {}).get("start") if isinstance(a, Mapping) else None)
    start_b = _gpus((b or {}).get("start") if isinstance(b, Mapping) else None)
    lines = []
    for index in sorted(set(start_a) & set(start_b)):
        x, y = start_a[index], start_b[index]
        if x.get("name") != y.get("name"):
            lines.append(f"GPU {index}: {label_a} ran on {x.get('name')}, {label_b} on "
                         f"{y.get('name')}")  # fmt: skip
            continue
        if not (_idle(x) or _idle(y)) and _moved(x.get("sm_clock_mhz"), y.get("sm_clock_mhz")):
            lines.append(f"GPU {index}: SM clock {x['sm_clock_mhz']} MHz in {label_a}, "
                         f"{y['sm_clock_mhz']} MHz in {label_b}: times are not comparable "
                         "as they are")  # fmt: skip
        if _moved(x.get("power_limit_w"), y.get("power_limit_w"), 0.01):
            lines.append(f"GPU {index}: power limit {x['power_limit_w']:.0f} W in {label_a}, "
                         f"{y['power_limit_w']:.0f} W in {label_b}")  # fmt: skip
        if None not in (x.get("clocks_locked"), y.get("clocks_locked")) and (
                x["clocks_locked"] != y["clocks_locked"]):  # fmt: skip
            locked = label_a if x["clocks_locked"] else label_b
            lines.append(f"GPU {index}: clocks locked in {locked} only")
    return lines
