"""Per-cell options in a warm worker, for real on the CPU (the worker without a profiler):
``--pytorch ops|shapes`` turns PyTorch's emit_nvtx on around the captured cell in the same
worker (no relaunch), and the nsys launch argv and key no longer depend on it; a cell with
other launch options keeps a second worker beside the first (LRU of 2, within GPU memory)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from processes import alive
from session_support import BareBackend

from nsight_magic.processes import gpu_memory
from nsight_magic.profilers.nsys import NsysOptions
from nsight_magic.script import prepare_cell
from nsight_magic.session.backends import NsysBackend
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, RunCallbacks

pytest.importorskip("torch")

# emit_nvtx needs a CUDA build; on this CPU-only machine the worker's emit_nvtx is replaced by
# a recorder that says when the cell ran inside it and with which record_shapes
RECORD_EMIT_NVTX = """
import torch.autograd.profiler as _profiler
emit_calls = []

class _Recorder:
    def __init__(self, enabled=True, record_shapes=False):
        self.record_shapes = record_shapes
    def __enter__(self):
        emit_calls.append(("enter", self.record_shapes))
    def __exit__(self, *exc):
        emit_calls.append(("exit", self.record_shapes))

_profiler.emit_nvtx = _Recorder
"""


@pytest.fixture
def manager():
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def _run(manager: SessionManager, tmp_path: Path, cell: str, torch_nvtx: str = "", **kw):
    out: list[str] = []
    request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                          cwd=str(tmp_path), **kw)  # fmt: skip
    result = manager.profile(request, BareBackend(torch_nvtx=torch_nvtx), notebook=manager.notebook,
                             callbacks=RunCallbacks(output=out.append))  # fmt: skip
    return result, out


def test_pytorch_op_ranges_are_turned_on_per_cell_in_the_same_worker(manager, tmp_path) -> None:
    manager.record_setup(RECORD_EMIT_NVTX, "recorder", prepare_cell(RECORD_EMIT_NVTX))
    cell = "print('inside', emit_calls[-1])"
    first, out = _run(manager, tmp_path, cell, torch_nvtx="shapes")
    assert out[-1] == "inside ('enter', True)"
    pid = first.meta["worker"]["pid"]
    second, out = _run(manager, tmp_path, "print(emit_calls)")
    # the shapes cell's ranges were closed after it; the default cell ran without them
    assert out[-1] == "[('enter', True), ('exit', True)]"
    third, out = _run(manager, tmp_path, cell, torch_nvtx="ops")
    assert out[-1] == "inside ('enter', False)"
    assert second.meta["worker"]["pid"] == third.meta["worker"]["pid"] == pid
    assert "emit_nvtx(record_shapes=TORCH_NVTX == " in (third.run_dir / "script.py").read_text()


def test_the_nsys_worker_is_launched_without_pytorch_ranges() -> None:
    plain = NsysBackend(NsysOptions())
    shapes = NsysBackend(NsysOptions(pytorch="autograd-shapes-nvtx"))
    request = CellRequest(cell="x = 1")
    assert plain.launch_key(request) == shapes.launch_key(request)
    assert not any("--pytorch" in a for a in shapes.options.warm().collect_args())
    # the worker turns them on per cell instead; a fresh run still asks nsys for them
    assert (plain.torch_nvtx(), shapes.torch_nvtx()) == ("", "shapes")
    assert NsysBackend(NsysOptions(pytorch="autograd-nvtx")).torch_nvtx() == "ops"
    assert "--pytorch=autograd-shapes-nvtx" in shapes.options.collect_args()


def _pid_of(result) -> int:
    return result.meta["worker"]["pid"]


def test_other_launch_options_keep_a_second_worker_least_recently_used_out(
    manager, tmp_path
) -> None:
    cell = "import os\nprint(os.environ['NSM_TEST'])"
    a, _ = _run(manager, tmp_path, cell, env={"NSM_TEST": "a"})
    b, out = _run(manager, tmp_path, cell, env={"NSM_TEST": "b"})
    assert "starting a second nsys worker" in out[0] and _pid_of(b) != _pid_of(a)
    a2, out = _run(manager, tmp_path, cell, env={"NSM_TEST": "a"})
    assert out == ["a"] and _pid_of(a2) == _pid_of(a)  # no restart: it was kept
    c, _ = _run(manager, tmp_path, cell, env={"NSM_TEST": "c"})
    # "b" was used least recently: it made room for "c"
    assert {s.pid for s in manager.status()} == {_pid_of(a), _pid_of(c)}
    assert not alive(_pid_of(b))
    assert manager.stop() == ["nsys"] and not alive(_pid_of(a)) and not alive(_pid_of(c))


def test_the_second_worker_rule_reads_nvidia_smi() -> None:
    apps = "101, GPU-a, 30000\n101, GPU-b, 500\n202, GPU-a, 1000\n"
    memory = gpu_memory.parse(apps, "GPU-a, 35000\nGPU-b, 79000\n")
    assert memory.mib_by_pid() == {101: 30500.0, 202: 1000.0}
    room, why = memory.room_for_copy_of(101)  # 1.2 x 30000 + 1024 > 35000 free on GPU-a
    assert not room and "35,000 MiB free" in why and "37,024" in why
    assert memory.room_for_copy_of(202) == (True, "")
    assert gpu_memory.GpuMemory().room_for_copy_of(101) == (True, "")  # no nvidia-smi
