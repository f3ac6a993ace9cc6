"""The GPUs' state a run was taken under, read through NVML (``nvidia-ml-py``, NVIDIA's binding):
each GPU's SM and memory clocks, temperature, power limit and draw, and why its clocks are held
where they are. A kernel's time depends on them: a run at 1,980 MHz and one at 1,410 MHz, or a
hot GPU against a cool one, differ by more than most changes a user tries. The session reads
this at the start and the end of each capture (the notebook's process: NVML needs no CUDA
context), ``analysis/machine_state.py`` says what differs.

Where NVML cannot be read (no driver, no GPU, the binding missing) the state says why, in one
line: never zeros."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# NVML's clock event ("throttle") reasons by bit (nvml.h; the binding renamed its constants from
# ClocksThrottleReason* to ClocksEventReason*, the bits stayed): named here so any version reads
USER_DEFINED = 0x2  # application clocks or locked clocks set (nvidia-smi -ac / -lgc)
REASONS = {
    0x1: "gpu idle",
    USER_DEFINED: "user-defined clocks",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}


_NVML: list[Any] = []  # the binding, once NVML started in this process (kept: a start costs)
_NVML_LOCK = threading.Lock()


def read_gpu_state() -> dict[str, Any]:
    """``{"source": "nvml", "gpus": [...]}`` (one dict per GPU: ``index, name, sm_clock_mhz,
    mem_clock_mhz, max_sm_clock_mhz, temperature_c, power_limit_w, power_w, clock_reasons,
    clocks_locked``), or ``{"source": "none", "why": ...}``. NVML is started once per process
    and kept (a start can take a second on a GPU without persistence mode; a read, about a
    millisecond)."""
    with _NVML_LOCK:
        if not _NVML:
            try:
                import pynvml
            except ImportError:
                return {"source": "none",
                        "why": "nvidia-ml-py (NVIDIA's NVML binding) is not installed"}  # fmt: skip
            try:
                pynvml.nvmlInit()
            except Exception as exc:  # no driver or no GPU: NVMLError_LibraryNotFound, ...
                return {"source": "none", "why": f"NVML could not start: {exc}"}
            _NVML.append(pynvml)
        nvml = _NVML[0]
        try:
            return {"source": "nvml",
                    "gpus": [_one(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]}  # fmt: skip
        except Exception as exc:
            return {"source": "none", "why": f"NVML failed: {exc}"}


def _one(nvml: Any, index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = nvml.nvmlDeviceGetName(handle)
    reasons_of = (
        getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    bits = _or_none(lambda: int(reasons_of(handle)))
    power = _or_none(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000)
    limit = _or_none(lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000)
    return {
        "index": index,
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "sm_clock_mhz": _or_none(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        "mem_clock_mhz": _or_none(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
        "max_sm_clock_mhz": _or_none(
            lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)
        ),
        "temperature_c": _or_none(
            lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
        ),
        "power_limit_w": limit,
        "power_w": power,
        "clock_reasons": None if bits is None else [n for b, n in REASONS.items() if bits & b],
        "clocks_locked": None if bits is None else bool(bits & USER_DEFINED),
    }


def _or_none(read: Any) -> Any:
    """One NVML query; None where this GPU or driver does not support it."""
    try:
        return read()
    except Exception:
        return None


SETTLE_S = 300.0  # the longest --settle waits for the GPUs to cool (session/bounds.py)
SETTLE_POLL_S = 1.0


@dataclass(frozen=True)
class Settled:
    """What ``settle`` found: ``reached`` (every GPU at or below the temperature), the hottest
    GPU's last reading (None: not read), the seconds waited, and ``why`` it could not wait
    (NVML not readable) or stopped (the bound, a cancel)."""

    below_c: float
    reached: bool
    hottest_c: float | None
    waited_s: float
    why: str = ""

    def record(self) -> dict[str, Any]:
        return {"below_c": self.below_c, "reached": self.reached, "hottest_c": self.hottest_c,
                "waited_s": round(self.waited_s, 3), "why": self.why}  # fmt: skip

    def line(self) -> str:
        """One line for the cell's output when the capture began warmer than asked ("" when
        it did not)."""
        if self.reached:
            return ""
        return f"--settle {self.below_c:g}: the capture began without it: {self.why}"


def settle(below_c: float, bound_s: float, *, cancel: Any = None,
           read: Callable[[], dict[str, Any]] = read_gpu_state,
           sleep: Callable[[float], None] = time.sleep) -> Settled:  # fmt: skip
    """Wait until every GPU reads ``below_c`` °C or less (``%%nsys --settle``: a hot GPU runs
    its kernels slower than a cool one), at most ``bound_s`` seconds, polling once a second;
    ``cancel`` (an Event) stops it. Never raises: the capture goes ahead either way and the
    result says how it began."""
    t0 = time.monotonic()
    hottest: float | None = None
    while True:
        state = read()
        waited = time.monotonic() - t0
        if state.get("source") != "nvml":
            return Settled(below_c, False, None, waited, str(state.get("why", "no reading")))
        temps = [g.get("temperature_c") for g in state.get("gpus") or []]
        numbers = [float(t) for t in temps if isinstance(t, int | float)]
        if not numbers:
            return Settled(below_c, False, None, waited, "NVML gave no GPU temperature")
        hottest = max(numbers)
        if hottest <= below_c:
            return Settled(below_c, True, hottest, waited)
        if waited >= bound_s:
            why = f"the GPUs were still at {hottest:g} °C after {bound_s:g} s"
            return Settled(below_c, False, hottest, waited, why)
        if cancel is not None and cancel.is_set():
            return Settled(below_c, False, hottest, waited, "cancelled")
        sleep(min(SETTLE_POLL_S, max(0.0, bound_s - waited)))
