"""The magics in a real IPython InteractiveShell (this machine has no nsys/ncu)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from nsight_magic.errors import CellSyntaxError, ToolNotFoundError, UnpicklableVariableError
from nsight_magic.session.history import REGISTRY
from nsight_magic.session.manager import MANAGER


@pytest.fixture
def runs_dir(ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    ip.run_line_magic("config", f'NsightMagic.runs_dir = "{root}"')
    monkeypatch.setenv("PATH", "/nonexistent")  # make sure no profiler is found
    for var in ("NSIGHT_MAGIC_NSYS", "NSIGHT_MAGIC_NCU"):
        monkeypatch.delenv(var, raising=False)
    ip.run_line_magic("config", 'NsightMagic.nsys_path = ""')
    ip.run_line_magic("config", 'NsightMagic.ncu_path = ""')
    MANAGER.clear_setup()
    yield root
    MANAGER.clear_setup()


def test_magics_registered_with_real_help(ip: InteractiveShell) -> None:
    for name in ("nsys", "ncu", "nsight_setup"):
        assert ip.find_cell_magic(name) is not None
    assert ip.find_line_magic("nsight_setup") is not None
    doc = ip.find_cell_magic("nsys").__doc__
    assert "Usage::" in doc and "Example::" in doc and "--warmup N" in doc
    # what the cell changes comes back (issue 56): the help says so, never the opposite
    assert "comes back" in doc and "NOT sent back" not in doc
    ncu_doc = ip.find_cell_magic("ncu").__doc__
    for flag in ("--set", "--section", "--metrics", "--kernel", "--launch-skip", "--nvtx"):
        assert flag in ncu_doc
    # what `%%nsys?` shows
    info = ip.object_inspect("%%nsys")
    assert info["found"] and "Usage::" in (info.get("docstring") or "")


def test_bad_flag_is_usage_error_and_leaves_no_run_dir(
    ip: InteractiveShell, runs_dir: Path
) -> None:
    with pytest.raises(UsageError):
        ip.run_cell_magic("nsys", "--bogus", "x = 1")
    with pytest.raises(UsageError):
        ip.run_cell_magic("nsys", "--warmup -2", "x = 1")
    with pytest.raises(UsageError, match="KEY=VALUE"):
        ip.run_cell_magic("nsys", "--env NOEQUALS", "x = 1")
    with pytest.raises(UsageError, match="cudda"):
        ip.run_cell_magic("nsys", "--trace cudda", "x = 1")
    with pytest.raises(UsageError):
        ip.run_cell_magic("ncu", "--launch-count notanumber", "x = 1")
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def _failed_cell(ip: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str):
    """Run ``cell``: it must FAIL (so Run All / nbclient stop) and show one plain message."""
    capsys.readouterr()
    result = ip.run_cell(cell)
    assert not result.success, "a failed profile must fail the cell"
    shown = capsys.readouterr()
    return result.error_in_exec, (shown.out + shown.err).strip()


def test_missing_nsys_fails_the_cell_with_one_clear_line(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error, shown = _failed_cell(ip, capsys, "%%nsys --name t\nx = 1")
    assert isinstance(error, ToolNotFoundError)
    assert shown.startswith("nsight_magic: ToolNotFoundError:") and len(shown.splitlines()) == 1
    assert '%config NsightMagic.nsys_path = "' in shown and "Traceback" not in shown
    assert not runs_dir.exists() or not any(runs_dir.iterdir())
    # the shell still works afterwards
    assert ip.run_cell("y = 2 + 2").success and ip.user_ns["y"] == 4


def test_configured_path_is_used_and_named(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_line_magic("config", 'NsightMagic.ncu_path = "/opt/nowhere/ncu"')
    error, shown = _failed_cell(ip, capsys, "%%ncu --kernel gemm\nx = 1")
    assert isinstance(error, ToolNotFoundError)
    assert "/opt/nowhere/ncu" in shown and "from configured" in shown


def test_syntax_error_in_cell_reported_before_tool_lookup(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error, shown = _failed_cell(ip, capsys, "%%nsys\nx = (1,\ny = 2 +\n")
    assert isinstance(error, CellSyntaxError)  # before nsys is looked for (none here)
    assert "<nsight_magic cell>" in shown and "line 1" in shown
    error, shown = _failed_cell(ip, capsys, "%%nsys\n   \n")
    assert isinstance(error, CellSyntaxError) and "empty" in shown
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_unpicklable_var_is_named(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell("import threading; lock = threading.Lock()")
    error, shown = _failed_cell(ip, capsys, "%%nsys --vars lock\nx = 1")
    assert isinstance(error, UnpicklableVariableError)  # before nsys is looked for
    assert "'lock'" in shown and "%%nsight_setup" in shown and len(shown.splitlines()) == 1
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_nsight_setup_runs_in_notebook_and_records(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("nsight_setup", "--name data", "setup_value = 41 + 1")
    assert ip.user_ns["setup_value"] == 42
    ip.run_cell_magic("nsight_setup", "", "import math")
    ip.run_cell_magic("nsight_setup", "--name data", "setup_value = 7")  # replaces
    assert REGISTRY.sources() == ["setup_value = 7", "import math"]
    # every worker runs them once: they are in the session history, in order
    kinds = [(e.kind, e.cell.source) for e in MANAGER.history.entries()][-3:]
    assert kinds == [("setup", "setup_value = 41 + 1"), ("setup", "import math"),
                     ("setup", "setup_value = 7")]  # fmt: skip
    # --worker-only: recorded for the workers, not run here
    ip.run_cell_magic("nsight_setup", "--worker-only --name big", "worker_only_value = 1")
    assert "worker_only_value" not in ip.user_ns
    assert MANAGER.history.entries()[-1].cell.source == "worker_only_value = 1"
    capsys.readouterr()
    ip.run_line_magic("nsight_setup", "--list")
    listed = capsys.readouterr().out
    assert "[1] (data)" in listed and "import math" in listed
    # a failing setup cell is not recorded, and fails its cell (Run All stops there)
    result = ip.run_cell("%%nsight_setup\nraise ValueError('boom')")
    assert not result.success and len(REGISTRY) == 3
    ip.run_line_magic("nsight_setup", "--clear")
    assert len(REGISTRY) == 0 and "Cleared 3" in capsys.readouterr().out
    assert not [e for e in MANAGER.history.entries() if e.kind == "setup"]


def test_config_traits_roundtrip(ip: InteractiveShell, runs_dir: Path) -> None:
    ip.run_line_magic("config", 'NsightMagic.nsys_path = "/x/nsys"')
    magics = next(c for c in ip.configurables if type(c).__name__ == "NsightMagic")
    assert magics.nsys_path == "/x/nsys" and magics.runs_dir == str(runs_dir)


def test_negative_auto_vars_max_bytes_is_refused_with_the_fix(
    ip: InteractiveShell, runs_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """%config logs a refused value (IPython does not fail the cell): the value stays as it
    was and the message says what to give."""
    magics = next(c for c in ip.configurables if type(c).__name__ == "NsightMagic")
    before = magics.auto_vars_max_bytes
    with caplog.at_level("ERROR"):
        ip.run_line_magic("config", "NsightMagic.auto_vars_max_bytes = -1")
    assert magics.auto_vars_max_bytes == before
    assert "auto_vars_max_bytes is -1; give a size in bytes >= 0" in caplog.text
    ip.run_line_magic("config", "NsightMagic.auto_vars_max_bytes = 0")  # 0 stays valid
    assert magics.auto_vars_max_bytes == 0
    ip.run_line_magic("config", f"NsightMagic.auto_vars_max_bytes = {before}")


@pytest.mark.parametrize("spec", ["LLM@prefill", "LLM:LLM@prefill", ":pick", "pick"])
def test_ncu_nvtx_reaches_the_backend_in_every_spelling(
    ip: InteractiveShell, runs_dir: Path, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    """``%%ncu --nvtx SPEC`` through the magic: the spelling the user typed becomes the range the
    cell script marks (``nvtx_target``), with no earlier nsys run of the cell (issue 21: this
    path raised a TypeError before the cell ran, on the GPU, in all four spellings)."""
    seen: list[Any] = []

    def profile(request: Any, backend: Any, **kwargs: Any) -> None:
        seen.append(backend.options)

    monkeypatch.setattr(MANAGER, "profile", profile)
    ip.run_cell_magic("nsight_ncu", f"--nvtx {spec} --launch-count 3", "x = 1")
    (options,) = seen
    assert options.nvtx_target == spec and options.launch_count == 3


def test_session_start_host_is_for_the_nsys_worker_only(ip) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="start nsys --host"):
        ip.run_line_magic("nsight_session", "start ncu --host")
    with pytest.raises(UsageError, match="start nsys --host"):
        ip.run_line_magic("nsight_session", "stop --host")


def test_more_ranks_than_the_machine_has_are_refused(ip: InteractiveShell, runs_dir: Path) -> None:
    """``--nproc 100000`` started torchrun with 100000 ranks; this machine has no GPU, so the
    bound is its CPU cores (gloo ranks), said in the message."""
    with pytest.raises(UsageError, match=r"--nproc 100000: no GPU is visible here") as info:
        ip.run_cell_magic("nsys", "--fresh --nproc 100000", "x = 1")
    assert "give --nproc 1.." in str(info.value)
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_rank_limit_counts_gpu_nodes_narrowed_by_cuda_visible_devices(tmp_path: Path) -> None:
    from nsight_magic.processes.cell_command import rank_limit, visible_gpus

    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()  # the names /dev holds on a 4-GPU machine
    dev = str(tmp_path)
    assert visible_gpus({}, dev) == 4
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, dev) == 2
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,2"}, dev) == 1  # CUDA stops at -1
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, dev) == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, dev) == 4
    limit, why = rank_limit({"CUDA_VISIBLE_DEVICES": "1,2"}, dev)
    assert limit == 2 and "2 GPU(s) (CUDA_VISIBLE_DEVICES)" in why
    limit, why = rank_limit({"CUDA_VISIBLE_DEVICES": "-1"}, dev)
    assert limit >= 1 and "no GPU is visible here" in why and "CPU (gloo)" in why
