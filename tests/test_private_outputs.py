"""Files we write stay this user's under any umask (and what the profiler or the script wrote
into a run folder is made so when the run ends), and the processes we start to read GPU facts
get no profiler injected (issue 35, item 11). Real fixtures from tests/data."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from session_support import BareBackend

from nsight_magic.processes import locate as tools
from nsight_magic.reports.nsys.export import stamp_path, write_stamp
from nsight_magic.run_folders.ownership import make_private
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook


@pytest.fixture
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_export_stamp_is_private_under_umask_zero(
    tmp_path: Path, data_dir: Path, umask_zero: None
) -> None:
    rep = tmp_path / "x.nsys-rep"
    shutil.copy(data_dir / "nsys_small.nsys-rep", rep)
    export = tmp_path / "x.sqlite"
    shutil.copy(data_dir / "nsys_small.sqlite", export)
    write_stamp(rep, export)
    assert stat.S_IMODE(stamp_path(export).stat().st_mode) == 0o600


def test_nvidia_smi_gets_no_injection_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The notebook may run under a profiler: nvidia-smi must not inherit its injection."""
    monkeypatch.setenv("LD_PRELOAD", "/opt/nsys/libToolsInjection64.so")
    monkeypatch.setenv("CUDA_INJECTION64_PATH", "/opt/nsys/libToolsInjection64.so")
    monkeypatch.setenv("NSYS_PROFILING_SESSION_ID", "1")
    seen: dict[str, Any] = {}

    def fake_run(argv: list[str], timeout: float, env: Any = None, **kwargs: Any) -> Any:
        seen.update(env=env)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(tools, "find_nvidia_smi", lambda: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(tools, "run_bounded", fake_run)  # how every process we run is run
    assert tools.gpu_info() == []
    env = seen["env"]
    assert "LD_PRELOAD" not in env and "CUDA_INJECTION64_PATH" not in env
    assert "NSYS_PROFILING_SESSION_ID" not in env and env.get("PATH") == os.environ["PATH"]


def test_an_export_nsys_wrote_is_made_private(
    tmp_path: Path, data_dir: Path, umask_zero: None
) -> None:
    """nsys writes its export under the notebook's umask (0666 under umask 0); it holds the
    profiled process's environment, so export_report makes it 0600 (a parquet dir 0700)."""
    from nsight_magic.reports.nsys.export import _private

    sqlite = tmp_path / "x.sqlite"
    shutil.copy(data_dir / "nsys_small.sqlite", sqlite)
    sqlite.chmod(0o666)
    pq_dir = tmp_path / "x_pq"
    shutil.copytree(data_dir / "nsys_small_pq", pq_dir)
    for path in [pq_dir, *pq_dir.iterdir()]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    _private(sqlite)
    _private(pq_dir)
    assert stat.S_IMODE(sqlite.stat().st_mode) == 0o600
    assert stat.S_IMODE(pq_dir.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in pq_dir.iterdir()} == {0o600}


class _ReportWritingBackend(BareBackend):
    """The bare worker, and at the capture's end a real .nsys-rep (tests/data) written into
    the run folder the way nsys writes it under umask 0: 0666."""

    def __init__(self, report: Path) -> None:
        super().__init__()
        self.source = report

    def end_capture(self, tool: Any, state: Any, handle: Any, run_dir: Path) -> None:
        target = run_dir / "report.nsys-rep"
        shutil.copyfile(self.source, target)
        target.chmod(0o666)


@pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh"])
def test_every_file_of_a_run_is_owner_only_under_umask_zero(
    tmp_path: Path, data_dir: Path, umask_zero: None, fresh: bool
) -> None:
    """Before: status.json of a fresh run (written by the script) and the profiler's report
    were 0666 under umask 0. Now files are 0600 and folders 0700, whoever wrote them."""
    manager = SessionManager(setup=SetupRegistry())
    try:
        request = CellRequest(cell="x = 1", runs_root=tmp_path / "runs", cwd=str(tmp_path),
                              fresh=fresh, vars=("v",), warmup=1)  # fmt: skip
        result = manager.profile(request, _ReportWritingBackend(data_dir / "nsys_small.nsys-rep"),
                                 notebook=Notebook(user_ns={"v": 3}))  # fmt: skip
    finally:
        manager.stop()
    folder = Path(result.run_dir)
    paths = [folder, *folder.rglob("*")]
    assert {p.name for p in paths} >= {"status.json", "meta.json", "script.py", "vars.pkl"}
    assert (folder / "report.nsys-rep").exists() != fresh  # the bare fresh run has no capture
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in paths}
    assert {name: mode for name, mode in modes.items() if mode & 0o077} == {}


def test_make_private_never_follows_a_link_out_of_the_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours to change")
    outside.chmod(0o666)
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    (run / "sub").chmod(0o777)
    (run / "sub" / "report.ncu-rep").write_bytes(b"x")
    (run / "sub" / "report.ncu-rep").chmod(0o664)
    (run / "link").symlink_to(outside)
    (run / "dirlink").symlink_to(tmp_path)
    make_private(run)
    assert stat.S_IMODE((run / "sub").stat().st_mode) == 0o700
    assert stat.S_IMODE((run / "sub" / "report.ncu-rep").stat().st_mode) == 0o600
    assert stat.S_IMODE(outside.stat().st_mode) == 0o666
