"""argv for Nsight Systems: ``nsys profile`` of a cell script (fresh runs), and the warm-session
commands ``nsys launch`` / ``start`` / ``cancel`` / ``shutdown``. Lists, never shell strings.

Warm session (measured on the lent H100, Nsight 2025.3.1, tools/fixtures/probes/session_probe2.py):
a plain ``nsys start`` returns before collection is live, so a 10 ms cell run right after it lost
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

from .options import option

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
# ``--pytorch``'s words (sorted: the order argparse lists them) and nsys's values for them
PYTORCH_WORDS: dict[str, PyTorchRanges | None] = {
    "off": None, "ops": "autograd-nvtx", "shapes": "autograd-shapes-nvtx"}  # fmt: skip
# ``launch`` refuses --sample/--cpuctxsw: they go on ``start``; fresh runs give them to profile.
SAMPLING_OFF = ("--sample=none", "--cpuctxsw=none")
# The host side (``--host``), measured on the lent H100 with Nsight Systems 2025.3.1
# (tools/fixtures/capture_idle.sh): ``nsys launch`` takes --trace=...osrt, --python-sampling,
# --python-backtrace and --cudabacktrace, and ``nsys start`` refuses them ("unrecognised
# option"); ``start`` takes --sample and --cpuctxsw, which ``launch`` refuses. So the first group
# is fixed per warm worker and the second is given per cell. Native CUDA backtraces
# (--cudabacktrace=all) are left out: on a 24-token decode loop they alone took the body from
# 9-15 ms to 44-70 ms. --python-backtrace=cuda (a CUDA call's Python line) records only calls
# that also get a native backtrace ("tracing and backtraces of the selected API ... must be
# enabled"): without --cudabacktrace none (H200, 2026-11-29: no such sample in 12 cycles of
# 15,978 calls, nor in a --host training cell's 13,613; tools/fixtures/probes/
# host_launch_probe.py sampling). It stays, so that ``%%nsys --host -- --cudabacktrace=all``
# (a worker of its own) gives each CUDA call its Python line.
HOST_TRACE = "osrt"
HOST_LAUNCH = ("--python-sampling=true", "--python-backtrace=cuda")
HOST_SAMPLING = ("--sample=process-tree", "--cpuctxsw=process-tree")
GATE = ("--capture-range=cudaProfilerApi", "--capture-range-end=stop")
# ``--memory``: every device allocation and free (CUDA_GPU_MEMORY_USAGE_EVENTS); an application
# option, so ``nsys launch`` takes it and a warm worker keeps it (benchmarks/README.md: its cost)
MEMORY_USAGE = "--cuda-memory-usage=true"


def split_instance(text: str) -> tuple[str, int]:
    """``%%nsys --nvtx`` text -> (range spec, instance): "train@step#3" -> ("train@step", 3),
    "train:train@step" -> ("train:train@step", 1). The instance counts the range's openings in
    the captured run of the cell, from 1; a name that itself ends in ``#N`` takes ``#1`` after
    it. ValueError (naming the flag) for an empty name or an instance below 1."""
    text = text.strip()
    head, sep, tail = text.rpartition("#")
    count = tail.strip()
    # isdecimal, not isdigit: "²" is a digit int() refuses ("a#²" is then a name, as "a#x")
    if not (sep and count.isdecimal()):
        spec, instance = text, 1
    elif len(count) > 9:  # int() refuses 4300 digits; no cell opens a range 10**9 times
        raise ValueError(f"--nvtx {text[:40]!r}: the instance after '#' is too large")
    else:
        spec, instance = head.strip(), int(count)
    if not spec or spec.endswith(":"):
        raise ValueError(f"--nvtx {text!r}: no range name; write DOMAIN:RANGE or RANGE, then #K")
    if instance < 1:
        raise ValueError(f"--nvtx {text!r}: the instance after '#' counts from 1")
    return spec, instance


def _capture_spec(text: str | None) -> str | None:
    """The flag's text, checked (``split_instance``); None when not given."""
    if not text or not text.strip():
        return None
    split_instance(text)
    return text.strip()


@dataclass(frozen=True)
class NsysOptions:
    """What nsys records: the options of ``%%nsys``, declared once (``profilers/options.py``
    generates the magic's flags, its help and meta.json's ``options`` from these fields).
    ``cuda_graph_trace``: "node" puts the kernels of CUDA graph launches in
    the kernel table (nsys's default "graph" records a whole launch as one item and no kernel
    rows); ``pytorch``: nsys's PyTorch NVTX ranges per aten op (with shapes for
    "autograd-shapes-nvtx"); None leaves them off. ``host``: the host side too: OS runtime
    calls, CPU samples with Python backtraces, and Python + native backtraces of CUDA API calls
    (what the thread was doing while the GPU idled: ``NsysRun.idle_breakdown``)."""

    trace: tuple[str, ...] = option(
        DEFAULT_TRACE,
        "--trace",
        "APIs to trace (nsys --trace).",
        metavar="API,...",
        parse=lambda text: parse_trace(text),
    )
    # RUF009: ``option`` is a field specifier (dataclasses.field with metadata), not a default
    cuda_graph_trace: GraphTrace = option(  # noqa: RUF009
        "node",
        "--cuda-graph-trace",
        "node (default): the kernels of CUDA graph launches are "
        "in the kernel table; graph: one item per graph launch (less overhead, no kernels).",
    )
    pytorch: PyTorchRanges | None = option(  # noqa: RUF009
        None,
        "--pytorch",
        "Record PyTorch's aten op ranges (ops; shapes: with input shapes), for "
        "'which op launched this kernel'.",
        cli=PYTORCH_WORDS,
    )
    extra_args: tuple[str, ...] = option(())
    memory: bool = option(
        False,
        "--memory",
        "Where the GPU memory went: nsys records every device allocation and free "
        "(--cuda-memory-usage=true: run.gpu_memory(), the Memory tab) and the worker keeps "
        "PyTorch's allocator history of the cell (the largest tensors at the peak and the "
        "lines that made them). Costs time: see docs/memory.md.",
    )
    host: bool = option(
        False,
        "--host",
        "Also capture the host side: OS runtime calls and CPU samples with Python "
        "backtraces (the Idle tab then says which Python line the thread ran while the GPU "
        "idled). The Python line of each CUDA call needs native CUDA backtraces, left out "
        "since they slow the host 3-5x: add them with -- --cudabacktrace=all. Costs time: see "
        "docs/benchmarks.md.",
    )

    nvtx_capture: str | None = option(
        None,
        "--nvtx",
        "Capture only one opening of this NVTX range (any thread's GPU work while it is "
        "open): DOMAIN:RANGE (':RANGE' for the default domain) or a bare RANGE, spelled as "
        "for the ncu magic; RANGE#K takes its K-th opening in the cell (default #1).",
        metavar="RANGE[#K]",
        parse=_capture_spec,
    )

    def warm(self) -> NsysOptions:
        """A warm worker's launch options: no ``--pytorch``; the worker turns PyTorch's op
        ranges on around each cell that asks (``torch_nvtx``), so it is never relaunched; no
        ``--nvtx`` either (the cell script gates the capture itself: ``script_args``); and
        nsys's allocation events always (``--cuda-memory-usage``: nothing measurable on a
        decode loop or a training step, the report 16-28% larger: benchmarks P13), so a
        ``--memory`` cell needs no second worker, which paid its own start and imports (a
        first ``--memory`` cell: benchmarks/README.md, design measurements). What a
        run shows is still what it asked: ``results/memory_frames``."""
        return dataclasses.replace(self, pytorch=None, nvtx_capture=None, memory=True)

    def script_args(self) -> dict[str, object]:
        """``--nvtx RANGE#K`` as the cell script takes it (``RangeWindow``); {} without it."""
        if not self.nvtx_capture:
            return {}
        spec, instance = split_instance(self.nvtx_capture)
        return {"nvtx_capture": spec, "nvtx_instance": instance}

    @property
    def torch_nvtx(self) -> str:
        """``pytorch`` as the warm script takes it: "ops", "shapes" or "" (off)."""
        return {"autograd-nvtx": "ops", "autograd-shapes-nvtx": "shapes"}.get(
            self.pytorch or "", ""
        )

    def collect_args(self) -> list[str]:
        """What to trace: shared by ``profile`` and ``launch``."""
        trace = parse_trace(self.trace)
        if self.host and HOST_TRACE not in trace:
            trace = (*trace, HOST_TRACE)
        args = [f"--trace={','.join(trace)}"]
        args.append(f"--cuda-graph-trace={self.cuda_graph_trace}")
        if self.pytorch:
            args.append(f"--pytorch={self.pytorch}")
        if self.memory:
            args.append(MEMORY_USAGE)
        if self.host:
            args.extend(HOST_LAUNCH)
        return args

    def sampling_args(self) -> tuple[str, ...]:
        """CPU sampling and context switches: given to ``profile`` and per cell to ``start``."""
        return HOST_SAMPLING if self.host else SAMPLING_OFF


def missing_host_options(profile_help: str) -> list[str]:
    """The ``--host`` options (``HOST_LAUNCH``, ``HOST_SAMPLING``, osrt) that ``nsys profile
    --help`` of the installed nsys does not list; [] when it lists them all (2025.3.1 does)."""
    wanted = [a.split("=", 1)[0] for a in (*HOST_LAUNCH, *HOST_SAMPLING)]
    missing = [w for w in dict.fromkeys(wanted) if f"{w}=" not in profile_help]
    if "process-tree" not in profile_help:
        missing.append("--sample=process-tree")
    if HOST_TRACE not in profile_help:
        missing.append(f"--trace={HOST_TRACE}")
    return missing


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
        *options.sampling_args(),
        *GATE,
        "--force-overwrite=true",
        "-o",
        os.fspath(report_base),
        *options.extra_args,
        *[os.fspath(c) for c in command],
    ]


START_ONLY_FLAGS = ("--sample", "--cpuctxsw")  # what ``nsys launch`` refuses; ``start`` takes


def split_extra(extra_args: Sequence[str]) -> tuple[list[str], list[str]]:
    """The user's ``--`` arguments of a warm run as (for ``nsys launch``, for ``nsys start``):
    ``--sample``/``--cpuctxsw`` (``--flag=value`` or ``--flag value``) go to ``start``, which
    is where a warm session sets them; everything else to ``launch``."""
    launch: list[str] = []
    start: list[str] = []
    args = list(extra_args)
    i = 0
    while i < len(args):
        arg = args[i]
        flag = arg.split("=", 1)[0]
        if flag in START_ONLY_FLAGS:
            takes_next = "=" not in arg and i + 1 < len(args) and not args[i + 1].startswith("-")
            start += args[i : i + 2] if takes_next else [arg]
            i += 2 if takes_next else 1
            continue
        launch.append(arg)
        i += 1
    return launch, start


def launch_argv(
    nsys: str | os.PathLike[str], session: str, command: Sequence[str], options: NsysOptions
) -> list[str]:
    """``nsys launch --session=S`` of a warm worker: injection loaded, nothing collected until
    a ``start``. What is traced is fixed here (with the user's ``--`` arguments), so a change
    of options needs a new worker."""
    extra, _ = split_extra(options.extra_args)
    return [os.fspath(nsys), "launch", f"--session={session}", *options.collect_args(), *extra,
            *command]  # fmt: skip


def start_argv(
    nsys: str | os.PathLike[str],
    session: str,
    report_base: str | os.PathLike[str],
    extra_args: Sequence[str] = (),
    sampling: Sequence[str] = SAMPLING_OFF,
) -> list[str]:
    """``nsys start`` for one cell: collection begins at the worker's cudaProfilerStart and ends,
    report written, at its cudaProfilerStop (see the module docstring). ``sampling``:
    ``NsysOptions.sampling_args()`` (``launch`` refuses those options); ``extra_args`` (the
    user's ``--sample``/``--cpuctxsw``) replace the flag of the same name there."""
    given = {a.split("=", 1)[0] for a in extra_args}
    return [
        os.fspath(nsys),
        "start",
        f"--session={session}",
        *[a for a in sampling if a.split("=", 1)[0] not in given],
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
