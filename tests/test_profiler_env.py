"""Every profiler command we start gets its environment from one builder
(``processes.clean_env.clean_env``): the injection variables of the notebook's own environment
(LD_PRELOAD, NSYS_*, QUADD_*, CUDA_INJECTION*, NVTX_INJECTION*) never reach ``nsys --version``,
``export``, ``start``, ``cancel``, ``shutdown``, ``launch`` or ncu's ``--list-sets`` and attach.

The "profiler" here is a two-line shell script put on PATH in a tmp folder: it records its
argv and environment and exits; it never writes a report."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from nsight_magic.errors import CorruptReportError, ProfilerError
from nsight_magic.processes import locate as tools
from nsight_magic.processes.clean_env import is_injection_variable
from nsight_magic.processes.locate import Tool
from nsight_magic.profilers import commands as profiler_cli
from nsight_magic.reports.nsys.export import export_report
from nsight_magic.session import backends
from nsight_magic.session.backends import NcuBackend, NsysBackend, WarmState
from nsight_magic.session.spec import CellRequest

INJECTED = {"LD_PRELOAD": "", "CUDA_INJECTION64_PATH": "/nonexistent/inject.so",
            "NSYS_PROFILING_SESSION_ID": "7", "QUADD_INJECTION_PROXY": "x",
            "NVTX_INJECTION64_PATH": "/nonexistent/nvtx.so"}  # fmt: skip


@pytest.fixture
def recording_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A script that appends its argv and ``env`` to a file and exits 1, plus that file;
    this process's environment holds every kind of injection variable."""
    dump = tmp_path / "calls.txt"
    tool = tmp_path / "bin" / "fake-profiler"
    tool.parent.mkdir()
    tool.write_text(f'#!/bin/sh\necho "ARGV $*" >> {dump}\nenv >> {dump}\nexit 1\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    for name, value in INJECTED.items():
        monkeypatch.setenv(name, value)
    return tool, dump


def _calls(dump: Path) -> list[tuple[str, set[str]]]:
    """(argv line, names of the environment) per call."""
    out: list[tuple[str, set[str]]] = []
    for line in dump.read_text().splitlines():
        if line.startswith("ARGV "):
            out.append((line[5:], set()))
        elif "=" in line and out:
            out[-1][1].add(line.split("=", 1)[0])
    return out


def _assert_clean(dump: Path, verb: str) -> None:
    calls = _calls(dump)
    assert calls and all(verb in argv for argv, _ in calls), calls
    for _, names in calls:
        assert not [n for n in names if is_injection_variable(n)], names
        assert "PATH" in names  # the rest of the environment is kept


def test_version(recording_tool: tuple[Path, Path]) -> None:
    tool, dump = recording_tool
    assert tools.tool_version(str(tool)) is None
    _assert_clean(dump, "--version")


def test_export(recording_tool: tuple[Path, Path], tmp_path: Path) -> None:
    tool, dump = recording_tool
    rep = tmp_path / "x.nsys-rep"
    rep.write_bytes(b"")
    with pytest.raises(CorruptReportError):  # exit 1, no output: one typed line
        export_report(rep, "sqlite", nsys=tool)
    _assert_clean(dump, "export")


def test_shutdown(recording_tool: tuple[Path, Path]) -> None:
    tool, dump = recording_tool
    profiler_cli.shutdown_session(str(tool), "nsight_magic_1")
    _assert_clean(dump, "shutdown")


@pytest.mark.parametrize("verb", ["start", "cancel"])
def test_start_and_cancel(recording_tool: tuple[Path, Path], tmp_path: Path, verb: str) -> None:
    tool, dump = recording_tool
    backend, t, state = NsysBackend(), Tool(name="nsys", path=str(tool)), WarmState(name="s")
    if verb == "start":
        with pytest.raises(ProfilerError, match="nsys start failed"):
            backend.begin_capture(t, state, tmp_path)
    else:
        backend.end_capture(t, state, None, tmp_path)  # no report: the capture is cancelled
    _assert_clean(dump, verb)


@pytest.mark.parametrize("backend", [NsysBackend(), NcuBackend()], ids=["nsys", "ncu"])
def test_launch_and_fresh_env(recording_tool: tuple[Path, Path], backend: object) -> None:
    request = CellRequest(cell="x = 1", env={"MY_FLAG": "1"})
    tool = Tool(name=backend.tool, path="profiler")  # type: ignore[attr-defined]
    launch = backend.launch(tool, request, WarmState(name="s", port=20000))  # type: ignore[attr-defined]
    for env in (launch.env, backend.process_env(request)):  # type: ignore[attr-defined]
        inherited = {n for n in env if is_injection_variable(n)} & set(INJECTED)
        assert not inherited and env["MY_FLAG"] == "1"


def test_ncu_list_sets(recording_tool: tuple[Path, Path]) -> None:
    tool, dump = recording_tool
    profiler_cli.ncu_catalog.cache_clear()
    assert profiler_cli.ncu_catalog(str(tool)) == {"set": frozenset(), "section": frozenset()}
    _assert_clean(dump, "--list-")


def test_ncu_attach(recording_tool: tuple[Path, Path], tmp_path: Path) -> None:
    tool, dump = recording_tool
    with pytest.raises(ProfilerError, match="could not attach"):
        profiler_cli.attach([str(tool), "--mode", "attach"], tmp_path / "profiler.log")
    _assert_clean(dump, "attach")


def test_the_user_env_still_reaches_the_cell() -> None:
    """--env may set an injection variable on purpose (the builder adds ``extra`` last)."""
    env = backends.process_env(CellRequest(cell="", env={"LD_PRELOAD": "/opt/mine.so"}))
    assert env["LD_PRELOAD"] == "/opt/mine.so"
