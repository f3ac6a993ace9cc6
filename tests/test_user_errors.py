"""Every user error is one line: bad options and bad cells in a real IPython shell (no
nsys/ncu here) fail the cell with one typed line, no traceback of our internals, and leave no
run folder; ``--`` arguments reach the warm worker's ``nsys launch`` (or ``nsys start``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from nsight_magic.errors import CellSyntaxError
from nsight_magic.processes.locate import Tool
from nsight_magic.profilers import nsys as nsys_argv
from nsight_magic.script import prepare_cell
from nsight_magic.session.backends import NsysBackend, WarmState
from nsight_magic.session.spec import CellRequest


@pytest.fixture
def runs_dir(ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    ip.run_line_magic("config", f'NsightMagic.runs_dir = "{root}"')
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("NSIGHT_MAGIC_NSYS", raising=False)
    return root


def _one_line(ip: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str) -> str:
    capsys.readouterr()
    result = ip.run_cell(cell)
    assert not result.success
    shown = capsys.readouterr()
    text = (shown.out + shown.err).strip()
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    return text


BAD_OPTIONS = {
    '--name "abc': "No closing quotation",
    "--timeout nan": "--timeout nan",
    "--timeout inf": "--timeout inf",
    "--timeout -1": "> 0",
    "--env A=\x00b": "NUL",
    "-o get_ipython": "would hide",
    "-o print": "would hide",
    "-o In": "would hide",
    "-o class": "not a valid variable name",
    "-o 1x": "not a valid variable name",
    "--name \ud800": "lone surrogate",
    # issue 35: names the notebook's namespace needs, a NUL in --name, an absurd --warmup
    "-o __builtins__": "would hide",
    "-o __name__": "would hide",
    "-o _": "would hide",
    "-o _i3": "would hide",
    "-o _oh": "would hide",
    "--name a\x00b": "NUL",
    "--warmup 99999999999999999999": "--warmup",
    "--warmup -1": "--warmup",
}


@pytest.mark.parametrize("line", list(BAD_OPTIONS))
def test_bad_options_are_one_usage_line(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    text = _one_line(ip, capsys, f"%%nsys {line}\nx = 1\n")
    assert text.startswith("UsageError:") and BAD_OPTIONS[line] in text
    assert not runs_dir.exists()
    assert ip.run_cell("get_ipython()").success  # the shell still works


BAD_CELLS = {
    "   \n\t\n": "empty",
    "# only a comment\n": "only comments",
    "x = (1,\n": "does not parse",
    "x = '\x00'\n": "NUL character",
    "x = '\ud800'\n": "lone surrogate",
    "return 5\n": "'return' outside function",
    "yield 1\n": "'yield' outside function",
    "break\n": "'break' outside loop",
}


@pytest.mark.parametrize("cell", list(BAD_CELLS))
def test_bad_cells_are_one_typed_line(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str], cell: str
) -> None:
    text = _one_line(ip, capsys, f"%%nsys\n{cell}")
    assert text.startswith("nsight_magic: CellSyntaxError:") and BAD_CELLS[cell] in text
    assert not runs_dir.exists()
    with pytest.raises(CellSyntaxError):
        prepare_cell(cell)


def test_top_level_await_still_passes() -> None:
    assert prepare_cell("import asyncio\nawait asyncio.sleep(0)\n").labels


def test_extra_args_reach_the_warm_launch_and_start() -> None:
    options = nsys_argv.NsysOptions(extra_args=("--osrt-threshold=1000", "--sample", "cpu",
                                                "--cpuctxsw=process-tree"))  # fmt: skip
    backend, tool = NsysBackend(options), Tool(name="nsys", path="/n/nsys")
    launch = backend.launch(tool, CellRequest(cell="x = 1"), WarmState(name="S"))
    argv = launch.wrap(["/py", "-m", "w"])
    assert argv[argv.index("--osrt-threshold=1000") + 1 :] == ["/py", "-m", "w"]
    assert "--sample" not in argv  # nsys launch refuses it: it goes to start
    start = nsys_argv.start_argv("/n/nsys", "S", "/r/report", nsys_argv.split_extra(
        options.extra_args)[1])  # fmt: skip
    assert start[-3:] == ["--sample", "cpu", "--cpuctxsw=process-tree"]
    assert "--sample=none" not in start and "--cpuctxsw=none" not in start
    # other arguments: another worker (the launch key changes)
    other = NsysBackend(nsys_argv.NsysOptions(extra_args=("--osrt-threshold=5",)))
    request = CellRequest(cell="x = 1")
    assert other.launch_key(request) != backend.launch_key(request)
