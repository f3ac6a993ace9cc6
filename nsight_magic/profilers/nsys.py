"""argv for Nsight Systems: ``nsys profile`` of a cell script (fresh runs), and the warm-session
commands ``nsys launch`` / ``start`` / ``cancel`` / ``shutdown``. Lists, never shell strings.

Warm session (measured on the lent H100, Nsight 2025.3.1, tools/probes/session_probe2.py): a
plain ``nsys start`` returns before collection is live, so a 10 ms cell run right after it lost
0-44 of its 44 kernels. Starting each cell's collection with ``--capture-range=cudaProfilerApi
--capture-range-end=stop`` and gating the cell with cudaProfilerStart/Stop in the worker captured
44/44 kernels and 3/3 ranges in every cycle; cudaProfilerStop returns once the report is
written (~3 s), after which ``nsys stop`` is refused ("not allowed in this state").
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

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


GraphTrace = Literal["node", "graph"]
PyTorchRanges = Literal["autograd-nvtx", "autograd-shapes-nvtx"]
# ``launch`` refuses --sample/--cpuctxsw: they go on ``start``; fresh runs give them to profile.
SAMPLING_OFF = ("--sample=none", "--cpuctxsw=none")
GATE = ("--capture-range=cudaProfilerApi", "--capture-range-end=stop")


@dataclass(frozen=True)
class NsysOptions:
    """What nsys records. ``cuda_graph_trace``: "node" puts the kernels of CUDA graph launches in
    the kernel table (nsys's default "graph" records a whole launch as one item and no kernel
    rows); ``pytorch``: nsys's PyTorch NVTX ranges per aten op (with shapes for
    "autograd-shapes-nvtx"); None leaves them off."""

    trace: tuple[str, ...] = DEFAULT_TRACE
    cuda_graph_trace: GraphTrace = "node"
    pytorch: PyTorchRanges | None = None
    extra_args: tuple[str, ...] = ()

    def warm(self) -> NsysOptions:
        """A warm worker's launch options: no ``--pytorch``; the worker turns PyTorch's op
        ranges on around each cell that asks (``torch_nvtx``), so it is never relaunched."""
        return dataclasses.replace(self, pytorch=None)

    @property
    def torch_nvtx(self) -> str:
        """``pytorch`` as the warm script takes it: "ops", "shapes" or "" (off)."""
        return {"autograd-nvtx": "ops", "autograd-shapes-nvtx": "shapes"}.get(
            self.pytorch or "", ""
        )

    def collect_args(self) -> list[str]:
        """What to trace: shared by ``profile`` and ``launch``."""
        args = [f"--trace={','.join(parse_trace(self.trace))}"]
        args.append(f"--cuda-graph-trace={self.cuda_graph_trace}")
        if self.pytorch:
            args.append(f"--pytorch={self.pytorch}")
        return args


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
    command: Sequence[str],
    *,
    options: NsysOptions | None = None,
) -> list[str]:
    """``nsys profile ... -o REPORT_BASE [extra] COMMAND`` (``python script.py status.json``,
    or torchrun running it on every rank: nsys follows the whole process tree). Capture is
    gated by the script's cudaProfilerStart/Stop; nsys adds ``.nsys-rep`` to REPORT_BASE."""
    options = options or NsysOptions()
    return [
        os.fspath(nsys),
        "profile",
        *options.collect_args(),
        *SAMPLING_OFF,
        *GATE,
        "--force-overwrite=true",
        "-o",
        os.fspath(report_base),
        *options.extra_args,
        *[os.fspath(c) for c in command],
    ]


def launch_argv(
    nsys: str | os.PathLike[str], session: str, command: Sequence[str], options: NsysOptions
) -> list[str]:
    """``nsys launch --session=S`` of a warm worker: injection loaded, nothing collected until
    a ``start``. What is traced is fixed here, so a change of options needs a new worker."""
    return [os.fspath(nsys), "launch", f"--session={session}", *options.collect_args(), *command]


def start_argv(
    nsys: str | os.PathLike[str],
    session: str,
    report_base: str | os.PathLike[str],
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``nsys start`` for one cell: collection begins at the worker's cudaProfilerStart and ends,
    report written, at its cudaProfilerStop (see the module docstring)."""
    return [
        os.fspath(nsys),
        "start",
        f"--session={session}",
        *SAMPLING_OFF,
        *GATE,
        "--force-overwrite=true",
        "-o",
        os.fspath(report_base),
        *extra_args,
    ]


def session_argv(nsys: str | os.PathLike[str], verb: str, session: str) -> list[str]:
    """``nsys cancel|stop|shutdown --session=S``."""
    if verb not in ("cancel", "stop", "shutdown"):
        raise ValueError(f"unknown nsys session verb {verb!r}")
    return [os.fspath(nsys), verb, f"--session={session}"]
