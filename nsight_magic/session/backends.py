"""The two profilers behind one interface. What differs between an nsys and an ncu run is the
argv, how the cell is gated, how a warm worker is launched and each capture begun and ended,
and how the report is read and checked; the pipeline does the rest the same way for both.

nsys: fresh runs are ``nsys profile --capture-range=cudaProfilerApi``; a warm worker runs under
``nsys launch`` and each cell under ``nsys start --capture-range=cudaProfilerApi
--capture-range-end=stop`` (the report is written when the worker's cudaProfilerStop returns).
ncu: fresh runs are ``ncu --nvtx --nvtx-include nsight_magic@capture …``; a warm worker runs under
``ncu --mode launch`` and each capture is one ``ncu --mode attach`` with that run's filters,
stopped with SIGINT once the cell is done (measured: tools/fixtures/probes/session_probe2.py).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..analysis.range_spec import NvtxRange, opened_ranges, target_hint
from ..errors import (
    CorruptReportError,
    NothingCapturedError,
    ProfilerError,
    ProfilerOptionError,
    ReportTimeoutError,
    ToolVersionError,
)
from ..package_info import pythonpath_with_package
from ..processes import deadline
from ..processes import locate as tools
from ..processes.cell_command import cell_command, one_rank_command
from ..processes.clean_env import clean_env
from ..processes.locate import Tool, ToolName
from ..profilers import ncu as ncu_argv
from ..profilers import nsys as nsys_argv
from ..profilers.commands import (
    RELEASE_ATTACH_RETRY_S,
    RELEASE_S,
    attach,
    detach,
    log_line,
    ncu_catalog,
    nsys_profile_help,
    run_cli,
)
from ..profilers.env import without_notebook_backend
from ..profilers.options import options_meta
from ..run_folders.run_dir import RunDir
from ..script import Gate
from ..script.display_frames import FRAMES_ENV
from ..worker.conversation import Conversation
from ..worker.process import Launch, WorkerProcess
from .spec import CellRequest

_versions: dict[str, tuple[int, ...] | None] = {}
# one lock per path: the nsys worker's start (a setup cell's prewarm) never waits for the ncu
# prewarm's `ncu --version` beside it, nor the other way round
_versions_locks: dict[str, threading.Lock] = {}


def locate_tool(name: ToolName) -> Tool:
    """Find the tool and check its version once per path (``--version`` costs a second)."""
    path = tools.find_tool(name)
    with _versions_locks.setdefault(path, threading.Lock()):
        if path not in _versions:
            limit = deadline.bound(tools.VERSION_TIMEOUT_S)  # or what is left of --timeout
            expired = None if limit.timeout is None else limit.expired
            version = tools.tool_version(path, limit.seconds, expired)
            tools.check_version(name, version)
            _versions[path] = version
    return Tool(name=name, path=path, version=_versions[path])


@dataclass
class WarmState:
    """Per-worker facts a backend keeps: the nsys session name, the ncu port."""

    name: str = ""
    port: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    tool: ToolName
    gate: Gate
    # whether ``begin_capture`` may run while the worker still loads, receives and prepares:
    # true where it only arms a collection that the cell's own gate opens (``nsys start``)
    arms_before_prepare: bool

    def options_meta(self) -> dict[str, Any]: ...
    def script_args(self) -> dict[str, Any]: ...
    def locate(self) -> Tool: ...
    def validate(self, tool: Tool) -> None: ...
    def launch_key(self, request: CellRequest) -> tuple[Any, ...]: ...
    def fresh_argv(self, tool: Tool, run_dir: Path, request: CellRequest) -> list[str]: ...
    def process_env(self, request: CellRequest) -> dict[str, str]: ...
    def launch(self, tool: Tool, request: CellRequest, state: WarmState) -> Launch: ...
    def torch_nvtx(self) -> str: ...
    def after_start(self, tool: Tool, state: WarmState, worker: WorkerProcess) -> None: ...
    def begin_capture(self, tool: Tool, state: WarmState, run_dir: Path) -> Any: ...
    def end_capture(self, tool: Tool, state: WarmState, handle: Any, run_dir: Path) -> None: ...
    def report_path(self, run_dir: Path) -> Path: ...
    def load(self, tool: Tool, run_dir: Path, nproc: int = 1) -> Any: ...
    def check_captured(self, report: Any, status: dict[str, Any], run_dir: Path) -> None: ...
    def result(self, report: Any, run_dir: Path, meta: dict[str, Any], *, parent: Any,
               drill_runner: Any) -> Any: ...  # fmt: skip


def process_env(request: CellRequest, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The profiled process's environment: ours plus the user's ``--env``, no injection
    variables nor the notebook's inline matplotlib backend; with several ranks the package is
    importable (the per-rank shim)."""
    # FRAMES_ENV: the cell's displays and stderr come as frames the session reads back
    env = clean_env({**(extra or {}), "PYTHONUNBUFFERED": "1", FRAMES_ENV: "1", **request.env},
                    base=without_notebook_backend(os.environ))  # fmt: skip
    if request.nproc > 1:
        env["PYTHONPATH"] = pythonpath_with_package(env)
        # torchrun sets 1 itself when it is unset, with a 3-line banner in the cell's output:
        # the same value, without the banner; a value the user set is kept
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _ranges_hint(status: dict[str, Any]) -> str:
    """Why an NVTX-filtered run profiled nothing, from what the cell script saw: the ranges the
    cell opened, whether ``--nvtx`` named one of them, and the spelling that would."""
    ranges = [NvtxRange(*map(str, r)) for r in status.get("ranges") or [] if len(r) == 3]
    target = status.get("target")
    if isinstance(target, dict) and target.get("spec"):
        return " " + target_hint(str(target["spec"]), ranges, target.get("matched") or [],
                                 int(target.get("opened") or 0))  # fmt: skip
    if not ranges:
        return " The cell opened no NVTX range of its own."
    return f" The cell opened these NVTX ranges: {opened_ranges(ranges)}."


def _window_hint(text: str, status: dict[str, Any]) -> str:
    """Why ``%%nsys --nvtx RANGE#K`` captured nothing: the range never opened (the ranges the
    cell did open, the closest spelling), or it opened fewer than K times."""
    spec, instance = nsys_argv.split_instance(text)
    target = status.get("target") or {}
    opened = int(target.get("opened") or 0)
    if opened:
        return (
            f"--nvtx {text!r} asks for opening {instance} of the range, and the cell opened it "
            f"{opened} time(s); pick #1..#{opened}."
        )
    ranges = [NvtxRange(*map(str, r)) for r in status.get("ranges") or [] if len(r) == 3]
    return target_hint(spec, ranges, [], 0)


class NsysBackend:
    tool: ToolName = "nsys"
    gate: Gate = "cudaProfilerApi"
    # ``nsys start`` (0.12-0.17 s on the H100) collects from the worker's cudaProfilerStart on,
    # which only the gated cell calls: it can run while the worker loads and prepares
    arms_before_prepare = True

    def __init__(self, options: nsys_argv.NsysOptions | None = None) -> None:
        self.options = options or nsys_argv.NsysOptions()

    def options_meta(self) -> dict[str, Any]:
        return options_meta(self.options)

    def script_args(self) -> dict[str, Any]:
        """What the cell script needs of this backend beyond the gate (``build_script``):
        ``--nvtx RANGE#K``, the one opening of a range the script's gate follows; ``--memory``
        keeps PyTorch's allocator history of the cell."""
        memory = {"memory_history": True} if self.options.memory else {}
        return {**self.options.script_args(), **memory}

    def locate(self) -> Tool:
        return locate_tool("nsys")

    def validate(self, tool: Tool) -> None:
        """Trace names are checked when the options are parsed; ``--host`` needs options an
        older nsys lacks: refused here, before a worker starts, naming them."""
        if not self.options.host:
            return
        missing = nsys_argv.missing_host_options(nsys_profile_help(tool.path))
        if missing:
            raise ToolVersionError(
                f"--host needs nsys options that this Nsight Systems ({tool.version_text}, "
                f"{tool.path}) does not list: {', '.join(missing)}. Update Nsight Systems "
                "(2025.3 has them) or profile without --host."
            )

    def result(
        self, report: Any, run_dir: Path, meta: dict[str, Any], *, parent: Any, drill_runner: Any
    ) -> Any:
        from ..results.run_loading import nsys_run

        return nsys_run(report, run_dir, meta, drill_runner=drill_runner)

    def torch_nvtx(self) -> str:  # --pytorch in a warm worker: emit_nvtx around the cell
        return self.options.torch_nvtx

    def launch_key(self, request: CellRequest) -> tuple[Any, ...]:
        # nsys fixes what it traces at launch: another trace choice needs another worker
        return ("nsys", request.python, tuple(sorted(request.env.items())), self.options.warm())

    def process_env(self, request: CellRequest) -> dict[str, str]:
        return process_env(request, nsys_argv.NSYS_ENV)

    def fresh_argv(self, tool: Tool, run_dir: Path, request: CellRequest) -> list[str]:
        # nsys follows torchrun's whole process tree: every rank is in the one report
        folder = RunDir(run_dir)
        command = cell_command(request.python, folder.script, [str(folder.status)], request.nproc)
        return nsys_argv.profile_argv(tool.path, folder.report_base, command, options=self.options)

    def launch(self, tool: Tool, request: CellRequest, state: WarmState) -> Launch:
        def wrap(command: list[str]) -> list[str]:
            return nsys_argv.launch_argv(tool.path, state.name, command, self.options.warm())

        return Launch(wrap, self.process_env(request), request.cwd, request.python)

    def after_start(self, tool: Tool, state: WarmState, worker: WorkerProcess) -> None:
        return None

    def begin_capture(self, tool: Tool, state: WarmState, run_dir: Path) -> Any:
        _, start_extra = nsys_argv.split_extra(self.options.extra_args)
        argv = nsys_argv.start_argv(tool.path, state.name, RunDir(run_dir).report_base, start_extra,
                                    sampling=self.options.sampling_args())  # fmt: skip
        done = run_cli(argv, run_dir)
        if done.returncode != 0:
            raise ProfilerError(
                f"nsys start failed (exit {done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-500:]}\nargv: {argv}"
            )
        return argv

    def end_capture(self, tool: Tool, state: WarmState, handle: Any, run_dir: Path) -> None:
        if not self.report_path(run_dir).exists():
            # the gate never opened (no CUDA in the cell): disarm the waiting collection so the
            # next cell's ``nsys start`` is accepted
            run_cli(nsys_argv.session_argv(tool.path, "cancel", state.name), run_dir)

    def report_path(self, run_dir: Path) -> Path:
        return RunDir(run_dir).report("nsys")

    def load(self, tool: Tool, run_dir: Path, nproc: int = 1) -> Any:
        """The .nsys-rep exported as a parquet dir (columnar: 1M kernels load 3.4x faster than
        from SQLite, benchmarks/README.md), or as SQLite where this nsys cannot write parquet.
        Several ranks, or ``--host``: SQLite first, the only export that carries the NVTX
        payloads (NCCL's message size and communicator for the collectives table; the Python
        backtraces of ``--python-sampling`` / ``--python-backtrace``)."""
        from ..reports import open_report
        from ..reports.nsys.export import export_report

        rep = self.report_path(run_dir)

        def export(kind: Any, out: Path | None = None) -> Path:
            limit = deadline.bound(deadline.EXPORT_S)  # a hung export is never retried
            try:
                return export_report(rep, kind, out=out, nsys=tool.path, timeout_s=limit.seconds)
            except ReportTimeoutError:
                raise limit.expired(f"`nsys export --type {kind}` of {rep}") from None

        if nproc > 1 or self.options.host:
            with contextlib.suppress(CorruptReportError):
                return open_report(export("sqlite"))
        try:
            exported = export("parquetdir", RunDir(run_dir).parquet_export)
        except CorruptReportError:
            exported = export("sqlite")
        return open_report(exported)

    def check_captured(self, report: Any, status: dict[str, Any], run_dir: Path) -> None:
        window = status.get("window")
        if isinstance(window, dict) and window.get("state") == "waiting":
            raise NothingCapturedError(
                "Nothing was captured: " + _window_hint(self.options.nvtx_capture or "", status)
            )
        if report is None:
            why = (
                "the cell found no CUDA device (torch.cuda unavailable and no libcudart), so "
                "the capture range never started"
                if status.get("gate_kind") == "none"
                else "the cell ran no CUDA work, so nsys wrote no report"
            )
            raise NothingCapturedError(f"Nothing was captured: {why}. Log: {RunDir(run_dir).log}")
        work = report.gpu_work() if hasattr(report, "gpu_work") else None
        empty = (not work.has_gpu_work) if work is not None else (
            report.kernels().empty and report.memcpy().empty and report.memset().empty
        )  # fmt: skip
        if empty:
            raise NothingCapturedError(
                "Nothing was captured: the report holds no kernels, CUDA graph launches, copies "
                f"or memsets from the cell. Report: {run_dir}"
            )


def free_port_base(span: int = 64, tries: int = 50) -> int:
    """A base port with ``span`` free ports after it on 127.0.0.1 (ncu's target listens from the
    base up, one port per profiled process), away from ncu's default 49152 so two notebooks on
    one machine never attach to each other's worker."""
    for _ in range(tries):
        # the OS's randomness: the notebook's seeded ``random`` is the user's stream, never ours
        base = 20000 + span * secrets.randbelow((48000 - 20000) // span)
        probes = []
        try:
            for port in (base, base + 1, base + span - 1):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                probes.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in probes:
                s.close()
    raise ProfilerError("No free port range for Nsight Compute's attach was found.")


class NcuBackend:
    tool: ToolName = "ncu"
    gate: Gate = "nvtx"
    # the attach waits for the prepared worker: an ncu attach while the worker runs CUDA work
    # (a warm-up, a state snapshot) has not been tried on the GPU
    arms_before_prepare = False

    def __init__(self, options: ncu_argv.NcuOptions | None = None) -> None:
        self.options = options or ncu_argv.NcuOptions()

    def options_meta(self) -> dict[str, Any]:
        return options_meta(self.options)

    def script_args(self) -> dict[str, Any]:
        """``--nvtx NAME``: the script marks the ranges NAME names (``TARGET_FILTER``), or
        only their ``nvtx_instance``-th opening."""
        if not self.options.nvtx_target:
            return {}
        args: dict[str, Any] = {"nvtx_target": self.options.nvtx_target}
        if self.options.nvtx_instance:
            args["nvtx_instance"] = self.options.nvtx_instance
        return args

    def locate(self) -> Tool:
        return locate_tool("ncu")

    def result(
        self, report: Any, run_dir: Path, meta: dict[str, Any], *, parent: Any, drill_runner: Any
    ) -> Any:
        from ..results import NcuRun

        return NcuRun(report, run_dir, meta, parent=parent)

    def validate(self, tool: Tool) -> None:
        """``--set``/``--section`` against what this ncu knows, before anything starts (ncu's
        own error would come after a run folder and a worker)."""
        known = ncu_catalog(tool.path)
        for kind, wanted in (("set", [self.options.set] if self.options.set else []),
                             ("section", list(self.options.sections))):  # fmt: skip
            have = known.get(kind)
            bad = [w for w in wanted if have and w not in have]
            if bad:
                raise ProfilerOptionError(
                    f"--{kind} {', '.join(bad)}: this ncu has no such {kind}; it knows "
                    f"{', '.join(sorted(have or ()))}."
                )

    def torch_nvtx(self) -> str:
        return ""

    def launch_key(self, request: CellRequest) -> tuple[Any, ...]:
        # ncu takes its filters per attach: only the interpreter and environment are fixed
        return ("ncu", request.python, tuple(sorted(request.env.items())))

    def process_env(self, request: CellRequest) -> dict[str, str]:
        return process_env(request)

    def fresh_argv(self, tool: Tool, run_dir: Path, request: CellRequest) -> list[str]:
        folder = RunDir(run_dir)
        script, status = folder.script, [str(folder.status)]
        if request.nproc <= 1:
            command = cell_command(request.python, script, status)
            return ncu_argv.profile_argv(
                tool.path, folder.report_base, command, options=self.options
            )
        # one rank under ncu, its peers bare: ncu replays only that rank's kernels
        prefix = folder.write_rank_prefix(ncu_argv.profile_argv(tool.path, folder.report_base,
                                                                options=self.options))  # fmt: skip
        return one_rank_command(request.python, script, status, request.nproc, request.rank, prefix)

    def launch(self, tool: Tool, request: CellRequest, state: WarmState) -> Launch:
        state.port = free_port_base()

        def wrap(command: list[str]) -> list[str]:
            return ncu_argv.launch_argv(tool.path, state.port, command)

        return Launch(wrap, self.process_env(request), request.cwd, request.python)

    def after_start(self, tool: Tool, state: WarmState, worker: WorkerProcess) -> None:
        """Under ``ncu --mode launch`` the worker's ncu side only listens once the worker is
        inside its first CUDA call, where it then waits for a tool: ask the worker to make that
        call, attach (selecting nothing) as soon as it listens, and detach once it returns."""
        reply: dict[str, Any] = {}
        limit = deadline.bound(RELEASE_S)

        def first_cuda_call() -> None:
            with contextlib.suppress(Exception):  # a dead worker is reported by the next request
                reply.update(Conversation(worker).cuda_init(limit.seconds).data)

        thread = threading.Thread(target=first_cuda_call, daemon=True)
        thread.start()
        with tempfile.TemporaryDirectory(prefix="nsm-ncu-") as tmp:
            argv = ncu_argv.attach_argv(tool.path, state.port, Path(tmp) / "release",
                                        ncu_argv.RELEASE)  # fmt: skip
            # the attach's output goes to the run's log (set by the session), which outlives
            # this temporary folder, so an error message can point at it
            log = Path(state.extra.get("log") or Path(tmp) / "release.log")
            proc = attach(argv, log, retry_s=RELEASE_ATTACH_RETRY_S)
            try:
                thread.join(limit.seconds)
            finally:
                detach(proc)
        state.extra["cuda_init"] = reply

    def begin_capture(self, tool: Tool, state: WarmState, run_dir: Path) -> Any:
        argv = ncu_argv.attach_argv(tool.path, state.port, RunDir(run_dir).report_base,
                                    self.options)  # fmt: skip
        log_line(run_dir, f"$ {' '.join(argv)}")
        return attach(argv, RunDir(run_dir).log)

    def end_capture(self, tool: Tool, state: WarmState, handle: Any, run_dir: Path) -> None:
        detach(handle)

    def report_path(self, run_dir: Path) -> Path:
        return RunDir(run_dir).report("ncu")

    def load(self, tool: Tool, run_dir: Path, nproc: int = 1) -> Any:
        from ..reports.ncu.report import NcuReport

        return NcuReport.open(self.report_path(run_dir))

    def check_captured(self, report: Any, status: dict[str, Any], run_dir: Path) -> None:
        # the report, not the log: a worker started for this cell wrote its release attach's
        # "No kernels were profiled" (it selects nothing by design) into the same log
        if report is None or len(report) == 0:
            hint = (
                " (the script could not import nvtx, so no range exists)"
                if not status.get("nvtx", True)
                else _ranges_hint(status)
            )
            error = NothingCapturedError(
                f"Nothing was captured: no kernel launch matched "
                f"{self.options.describe_filter()}.{hint} Log: {RunDir(run_dir).log}"
            )
            target = status.get("target")
            # the cell opened the range --nvtx names, yet the attach kept no launch of it: a
            # fresh ncu run of the same script can still (session/runs/fallback.py)
            error.target_opened = isinstance(target, dict) and bool(target.get("opened"))
            error.run_dir = run_dir
            raise error
