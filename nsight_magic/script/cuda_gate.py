"""The gate of the generated script: cudaProfilerStart/Stop around the captured cell for nsys
(``--capture-range=cudaProfilerApi``), a sync only for ncu (the cell's NVTX range gates).

A real module pasted into the script by ``build_script`` (``script/template.py``) after the
recorder and before the runtime, which uses ``Gate``. Standard library only at import time;
``torch`` is imported when the cell uses it or no cudart can be loaded. The block marked
"module only" is left out of the script: the script's header assigns ``CODE``.
"""

import ctypes
import ctypes.util
import glob
import os
import sys
import time

# --- module only: build_script writes these in the script's header, with the cell's values ---
CODE = ""  # the cell as Python (IPython syntax transformed)
# --- end module only ---


def gpu_device_nodes() -> bool:
    """Whether this machine shows an NVIDIA GPU's device node (``/dev/nvidiactl``; ``/dev/dxg``
    under WSL2). Without one no CUDA call can succeed; on Linux this costs a stat, where asking
    torch costs its import (seconds). True on other systems (no cheap answer there)."""
    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/dxg"))


class Gate:
    """cudaProfilerStart/Stop for nsys (--capture-range=cudaProfilerApi): through torch when the
    cell state uses it, else cudart through ctypes (CuPy/Triton/numba cells), else torch. For
    ncu the cell's NVTX range is the gate, so ``kind`` is "nvtx" and start/stop only sync.
    Without a GPU ``kind`` is "none" and start/stop do nothing."""

    def __init__(self, mode: str) -> None:
        self.kind = "none"
        self.lib: ctypes.CDLL | None = None
        if mode == "nvtx":
            self.kind = "nvtx"
            return
        if not gpu_device_nodes():  # no GPU to gate: not even torch is imported to learn so
            return
        # a torch cell gates through torch's own cudart, the one its kernels go through
        if ("torch" in sys.modules or "torch" in CODE) and self._torch_cuda():
            self.kind = "torch"
            return
        lib = self._find_cudart()
        if lib is not None:
            self.kind, self.lib = "cudart", lib
        elif self._torch_cuda():
            self.kind = "torch"

    @staticmethod
    def _torch_cuda() -> bool:
        try:
            import torch

            return bool(torch.cuda.is_available())
        except Exception:
            return False

    @staticmethod
    def _find_cudart() -> ctypes.CDLL | None:
        names = [ctypes.util.find_library("cudart")]
        names += ["libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"]
        for base in sys.path:  # pip wheels: nvidia/cuda_runtime/lib (12.x), nvidia/cu13/lib
            names += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libcudart.so*")))
        for name in names:
            if not name:
                continue
            try:
                lib = ctypes.CDLL(name)
            except OSError:
                continue
            count = ctypes.c_int(0)
            if lib.cudaGetDeviceCount(ctypes.byref(count)) == 0 and count.value > 0:
                return lib
        return None

    def sync(self) -> None:
        if self.kind == "torch" or (self.kind == "nvtx" and "torch" in sys.modules):
            import torch

            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
        elif self.lib is not None:
            self.lib.cudaDeviceSynchronize()

    def start(self) -> None:
        self.sync()  # work queued before the cell must not leak into the capture
        if self.kind == "torch":
            import torch.cuda.profiler

            torch.cuda.profiler.start()
        elif self.lib is not None:
            self.lib.cudaProfilerStart()

    def stop(self) -> None:
        self.sync()  # kernels still running at stop would be cut off
        if self.kind == "torch":
            import torch.cuda.profiler

            torch.cuda.profiler.stop()
        elif self.lib is not None:
            self.lib.cudaProfilerStop()


class RangeWindow:
    """``%%nsys --nvtx RANGE#K``: the gate opens at the K-th opening of the range (on any
    thread, before the range's own push, so the report holds the range) and closes once that
    opening's range closed; the cell's other work stays outside the capture. The script's
    ``RangeRecorder`` calls :meth:`open` with each opening's ordinal and :meth:`close` with the
    token it returned. Why not nsys's own ``--capture-range=nvtx``: it would start at the
    range's first opening wherever it happens (a warm-up run, a replayed setup cell), it cannot
    skip to the K-th, and it needs the domain spelled and escaped before the cell runs."""

    def __init__(self, gate: Gate, instance: int) -> None:
        self.gate = gate
        self.instance = instance
        self.state = "waiting"  # -> "open" -> "closed"
        self.times: dict[str, float] = {}

    def open(self, ordinal: int) -> "RangeWindow | None":
        if ordinal != self.instance or self.state != "waiting":
            return None
        self.state = "open"
        self.gate.start()
        self.times["start"] = time.perf_counter()
        return self

    def close(self) -> None:
        """Close the window (the K-th range closed, or the cell ended with it still open)."""
        if self.state != "open":
            return
        self.state = "closed"
        self.times["stop"] = time.perf_counter()
        self.gate.stop()  # waits for the range's kernels; in a warm session writes the report
        self.times["stopped"] = time.perf_counter()

    def status(self) -> dict[str, object]:
        return {"instance": self.instance, "state": self.state, **self.times}
