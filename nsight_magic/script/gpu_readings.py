"""The GPUs' clocks and temperature after each repeat of ``%%nsys --repeat N``, in the profiled
process (``runtime.run_repeats``): a kernel's time follows the SM clock, so a clock that moved
or a GPU that warmed between repeats is part of their spread, and
``analysis/machine_state.repeat_notes`` says so in a line.

A real module pasted into the script by ``build_script`` before the runtime. Standard library
at import time; NVIDIA's binding (``pynvml``, of ``nvidia-ml-py``) only when a run of two
repeats or more reads, and never an exception: without the binding or a driver there is no
reading (None), and the run's notes say nothing of clocks. A read costs about a millisecond a
GPU, between the repeats' NVTX openings (outside every repeat's time)."""

from typing import Any

# --- module only: nothing of the header is used here; the script pastes the rest as it is ---
# --- end module only ---

_NVML: list[Any] = []  # [pynvml] once NVML started in this process, [None] once it could not
IDLE_REASON = 0x1  # NVML's "gpu idle" clock event reason: the clocks are the idle ones


def gpu_reading() -> list[list[Any]] | None:
    """One row per GPU (NVML's order): ``[index, sm_clock_mhz, mem_clock_mhz, temperature_c,
    idle]``, a value None where the GPU does not report it; None when NVML cannot be read."""
    if not _NVML:
        try:
            import pynvml

            pynvml.nvmlInit()
            _NVML.append(pynvml)
        except Exception:  # no binding, no driver, no GPU
            _NVML.append(None)
    nvml = _NVML[0]
    if nvml is None:
        return None
    try:
        return [_row(nvml, index) for index in range(nvml.nvmlDeviceGetCount())]
    except Exception:
        return None


def _row(nvml: Any, index: int) -> list[Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    reasons_of = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                  or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))  # fmt: skip
    bits = _or_none(lambda: int(reasons_of(handle))) if reasons_of else None
    return [
        index,
        _or_none(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        _or_none(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
        _or_none(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        None if bits is None else bool(bits & IDLE_REASON),
    ]


def _or_none(read: Any) -> Any:
    """One NVML query; None where this GPU or driver does not support it."""
    try:
        return read()
    except Exception:
        return None
