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
