"""argv for ``nsys profile`` of a generated cell script (a list, never a shell string)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

# nsys drops NVTX ranges of unregistered strings unless told otherwise; the python nvtx
# package does not register them all, so the per-statement ranges would go missing.
NSYS_ENV = {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
DEFAULT_TRACE = ("cuda", "nvtx")
KNOWN_TRACE = {
    "cuda",
    "nvtx",
    "osrt",
    "cublas",
    "cudnn",
    "cusparse",
    "opengl",
    "mpi",
    "ucx",
    "openacc",
    "openmp",
    "vulkan",
    "nvvideo",
    "oshmem",
    "none",
    "python-gil",
    "cuda-hw",
}


def parse_trace(trace: str | Sequence[str]) -> tuple[str, ...]:
    """``"cuda,nvtx,osrt"`` or a sequence -> validated tuple; ValueError on unknown APIs."""
    items = trace.split(",") if isinstance(trace, str) else list(trace)
    items = [t.strip() for t in items if t.strip()]
    unknown = [t for t in items if t not in KNOWN_TRACE]
    if not items or unknown:
        raise ValueError(
            f"--trace: unknown API(s) {unknown or items}; use a comma list of "
            f"{', '.join(sorted(KNOWN_TRACE))}"
        )
    return tuple(items)


def profile_argv(
    nsys: str | os.PathLike[str],
    report_base: str | os.PathLike[str],
    script: str | os.PathLike[str],
    *,
    python: str = sys.executable,
    trace: str | Sequence[str] = DEFAULT_TRACE,
    extra_args: Sequence[str] = (),
    script_args: Sequence[str] = (),
) -> list[str]:
    """``nsys profile ... -o REPORT_BASE [extra] python script [script_args]``. Capture is
    gated by the script's cudaProfilerStart/Stop; nsys adds ``.nsys-rep`` to REPORT_BASE."""
    return [
        os.fspath(nsys),
        "profile",
        f"--trace={','.join(parse_trace(trace))}",
        "--sample=none",
        "--cpuctxsw=none",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--force-overwrite=true",
        "-o",
        os.fspath(report_base),
        *extra_args,
        python,
        os.fspath(script),
        *script_args,
    ]
