"""A backend that runs the real session worker with no profiler (this machine has none), so the
worker, the session manager and the pipeline are tested for real on the CPU: the "report" of a
run is the cell status the worker answered."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from nsight_magic.errors import CellFailedError
from nsight_magic.processes.cell_command import cell_command
from nsight_magic.processes.locate import Tool
from nsight_magic.run_folders import runs
from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.script import build_script, history_entry, prepare_cell
from nsight_magic.session.backends import WarmState, process_env
from nsight_magic.session.spec import CellRequest
from nsight_magic.worker.process import Launch, WorkerProcess


def script_for(cell: str, setup_cells=(), cell_name: str = "cell", gate="nsys", **kw) -> str:
    """The script a fresh run writes for ``cell`` after ``setup_cells`` (sources)."""
    history = [
        history_entry("setup", f"setup {i}", prepare_cell(src, cell_name=f"setup cell {i}"))
        for i, src in enumerate(setup_cells, 1)
    ]
    gates = {"nsys": "cudaProfilerApi", "ncu": "nvtx"}
    return build_script(prepare_cell(cell, cell_name=cell_name), history=history,
                        gate=gates.get(gate, gate), **kw)  # fmt: skip


@dataclass
class BareRun:
    report: runs.CellStatus
    run_dir: Path
    meta: dict[str, Any]


class BareBackend:
    """``tool`` names the session slot ("nsys" or "ncu"), so two bare backends make two
    workers, as the two profilers do; ``nvtx_target`` is what ``%%ncu --nvtx`` hands the
    script (its status then says which ranges it marked)."""

    gate = "cudaProfilerApi"
    arms_before_prepare = False

    def __init__(
        self, tool: str = "nsys", nvtx_target: str | None = None, torch_nvtx: str = ""
    ) -> None:
        self.tool = tool  # type: ignore[assignment]
        self.captures = 0
        self.nvtx_target = nvtx_target
        if nvtx_target is not None:
            self.gate = "nvtx"
        self._torch_nvtx = torch_nvtx  # as NsysBackend's --pytorch: "ops" / "shapes" / ""

    def torch_nvtx(self) -> str:
        return self._torch_nvtx

    def options_meta(self) -> dict[str, Any]:
        return {"bare": True}

    def script_args(self) -> dict[str, Any]:
        return {"nvtx_target": self.nvtx_target} if self.nvtx_target else {}

    def locate(self) -> Tool:
        return Tool(name=self.tool, path=sys.executable)  # type: ignore[arg-type]

    def validate(self, tool: Tool) -> None:
        return None

    def launch_key(self, request: CellRequest) -> tuple[Any, ...]:
        return ("bare", self.tool, request.python, tuple(sorted(request.env.items())))

    def process_env(self, request: CellRequest) -> dict[str, str]:
        return process_env(request)

    def fresh_argv(self, tool: Tool, run_dir: Path, request: CellRequest) -> list[str]:
        return cell_command(request.python, run_dir / "script.py", [str(run_dir / "status.json")],
                            request.nproc)  # fmt: skip

    def launch(self, tool: Tool, request: CellRequest, state: WarmState) -> Launch:
        return Launch(lambda command: command, self.process_env(request), request.cwd,
                      request.python)  # fmt: skip

    def after_start(self, tool: Tool, state: WarmState, worker: WorkerProcess) -> None:
        return None

    def begin_capture(self, tool: Tool, state: WarmState, run_dir: Path) -> Any:
        self.captures += 1
        return ["bare-capture"]

    def end_capture(self, tool: Tool, state: WarmState, handle: Any, run_dir: Path) -> None:
        return None

    def report_path(self, run_dir: Path) -> Path:
        return RunDir(run_dir).status

    def load(self, tool: Tool, run_dir: Path, nproc: int = 1) -> Any:
        return RunDir(run_dir).read_status()

    def check_captured(self, report: Any, status: dict[str, Any], run_dir: Path) -> None:
        return None

    def result(
        self, report: Any, run_dir: Path, meta: dict[str, Any], *, parent: Any, drill_runner: Any
    ) -> BareRun:
        return BareRun(report, run_dir, meta)


# torch's gloo rendezvous on a loaded machine now and then fails while connecting the ranks
# ("Gloo connectFullMesh failed ... Connection closed by peer [127.0.0.1]", a known upstream
# flake: pytorch/pytorch#53270, #57469); seen once in CI-like runs of the 2-rank CPU tests
GLOO_FLAKE = "connectFullMesh"
T = TypeVar("T")


def gloo_retry(call: Callable[[], T]) -> T:
    """``call()``, once more when the ranks' gloo rendezvous itself failed (nothing of ours)."""
    try:
        return call()
    except CellFailedError as exc:
        if GLOO_FLAKE not in str(exc):
            raise
        return call()
