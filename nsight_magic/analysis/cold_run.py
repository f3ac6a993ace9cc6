"""Is a captured run the workload's steady state, or its first call? (pure functions)

The first run of code in a process pays one-time costs that later runs do not: CUDA lazy
loading (CUDA >= 12.2 loads a kernel's module when it is first launched), cuBLAS/cuDNN handle
and plan creation, allocator growth. Measured on the GPU image (docs/sessions.md): a first captured
prefill showed 460 ms of GPU-projected time where the warm one takes a few ms; the first pass of
an 800-step decode loop 37 s, the next 1.5 s.

The signal read from the trace (nsys's CUDA API table): the module loads inside the capture
(``cuLibraryLoad*``, ``cuModuleLoad*``: what lazy loading calls, from inside the launch that
needs the module) and launch calls far slower than the run's typical launch (a first launch
waiting for its module, or for a library's set-up: the "first-kernel gap"). Their union in time
is the first-call cost. A warm run has none: the warm rank of the 2-rank fixture shows no load
and no launch over 67 us (its kernels all ran before the gate), while rank 1 (extra GEMMs of a
new shape inside the capture) and every other fixture (captured on its first run) spend 16-94 ms
in module loads. Handle
creation itself is not traced (``--trace=cuda`` has no cuBLAS/cuDNN calls); its cost shows up
as those same slow first launches. The session adds the one fact the trace cannot give: that
this was the first execution of the cell's code in its worker (``meta["first_run"]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .gaps import busy_intervals

__all__ = ["FirstCallEffects", "cold_run_warnings", "first_call_effects"]

MODULE_LOAD_PREFIXES = ("cuLibraryLoad", "cuModuleLoad", "cudaLibraryLoad")
# a launch this many times slower than the run's median launch, and at least SLOW_LAUNCH_NS,
# waited for something a later run will not (a module load, a library's set-up)
SLOW_LAUNCH_FACTOR = 50.0
SLOW_LAUNCH_NS = 1_000_000
# first-call time below both of these is noise, not a cold run
MIN_EFFECT_NS = 1_000_000
MIN_EFFECT_SHARE = 0.01
FIX = "re-run with --warmup 1 (runs the cell once outside the capture first)"


@dataclass(frozen=True)
class FirstCallEffects:
    """What a run's CUDA API trace shows of first-call costs: ``module_loads`` calls taking
    ``load_ns``; ``slow_launches`` launch calls taking ``slow_launch_ns``; ``effect_ns`` the
    time covered by either (their union: a lazy load runs inside its launch), ``window_ns``
    the capture's length."""

    module_loads: int
    load_ns: int
    slow_launches: int
    slow_launch_ns: int
    effect_ns: int
    window_ns: int

    @property
    def share(self) -> float:
        return self.effect_ns / self.window_ns if self.window_ns > 0 else 0.0

    @property
    def cold(self) -> bool:
        """First-call costs large enough to distort what the run shows."""
        return self.effect_ns >= MIN_EFFECT_NS and self.share >= MIN_EFFECT_SHARE


def first_call_effects(cuda_api: pd.DataFrame, window: tuple[int, int]) -> FirstCallEffects:
    """First-call costs in ``cuda_api`` (``NsysReport.cuda_api()``: ``name, start_ns, end_ns,
    duration_ns``) over the capture ``window`` (``capture_window()``)."""
    names = [str(n) for n in cuda_api["name"]]
    duration = cuda_api["duration_ns"].to_numpy(dtype=np.int64, na_value=0)
    loads = np.array([n.startswith(MODULE_LOAD_PREFIXES) for n in names], dtype=bool)
    launch = np.array(["Launch" in n for n in names], dtype=bool)
    slow = np.zeros(len(names), dtype=bool)
    if launch.any():
        typical = float(np.median(duration[launch]))
        threshold = max(SLOW_LAUNCH_NS, SLOW_LAUNCH_FACTOR * typical)
        slow = launch & (duration >= threshold)
    either = loads | slow
    starts = cuda_api["start_ns"].to_numpy(dtype=np.int64, na_value=0)
    ends = cuda_api["end_ns"].to_numpy(dtype=np.int64, na_value=0)
    union_starts, union_ends = busy_intervals(starts[either], ends[either])
    return FirstCallEffects(
        module_loads=int(loads.sum()),
        load_ns=int(duration[loads].sum()),
        slow_launches=int(slow.sum()),
        slow_launch_ns=int(duration[slow].sum()),
        effect_ns=int((union_ends - union_starts).sum()),
        window_ns=max(0, int(window[1]) - int(window[0])),
    )


def cold_run_warnings(
    effects: FirstCallEffects | None, *, first_run: bool | None, warmup: int = 0
) -> list[str]:
    """The one line a run's view and ``run.warnings`` show when it is not the steady state:
    its trace shows first-call costs (``effects.cold``), or the session knows it was the first
    execution of the cell's code in its worker with no warm-up (``first_run``); empty
    otherwise. ``effects`` None: no CUDA API trace to read."""
    first = bool(first_run) and warmup == 0
    if effects is not None and effects.cold:
        parts = []
        if effects.module_loads:
            parts.append(
                f"{effects.module_loads} CUDA module load(s) ({effects.load_ns / 1e6:.1f} ms)"
            )
        if effects.slow_launches:
            slow_ms = effects.slow_launch_ns / 1e6
            parts.append(f"{effects.slow_launches} slow first launch(es) ({slow_ms:.1f} ms)")
        where = " (the first run of this cell's code in its worker)" if first else ""
        return [
            f"Cold run{where}: {' and '.join(parts)} take {effects.effect_ns / 1e6:.1f} ms, "
            f"{effects.share:.0%} of the capture: one-time costs, not the workload; {FIX}."
        ]
    if first:
        return [
            "First run of this cell's code in its worker, with no warm-up: caches, cuBLAS/cuDNN "
            f"plans and the allocator may not be warm yet; to measure the steady state, {FIX}."
        ]
    return []
