"""Fuzzed ``%%nsys`` / ``%%ncu`` option lines and cells in a real IPython shell (no profiler
here, so a well-formed one ends in ToolNotFoundError): whatever is typed, the cell fails with a
typed error (UsageError for options, an NsightMagicError otherwise), shows no traceback of our
internals, leaves no run folder, and the shell keeps working."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from nsight_magic.errors import NsightMagicError

SCALE = float(os.environ.get("NSIGHT_MAGIC_FUZZ_SCALE", "1"))
FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))  # fmt: skip

OPTION_TOKENS = [
    "--name", "--warmup", "--vars", "--env", "--python", "--timeout", "--fresh", "--no-setup",
    "--nproc", "-o", "--trace", "--cuda-graph-trace", "--pytorch", "--", "--bogus", "x", "a,b",
    "nan", "inf", "-inf", "-1", "0", "1e309", "3", "A=1", "=1", "A=\x00", "'", '"', '"abc',
    "\\", "get_ipython", "print", "class", "cuda,nvtx", "cudda", "node", "graph", "ops",
    "\ud800", "~/x", "../../etc", "--sample=cpu", "é", " ", "\t",
]  # fmt: skip
CELL_PARTS = [
    "x = 1", "", "   ", "# comment", "return 5", "yield 1", "break", "x = (1,", "'\x00'",
    "'\ud800'", "%time y = 2", "!true", "%%time", "await asyncio.sleep(0)", "import os",
    "def f():\n    return 1", "nonlocal q", "\\", "x = 'é'", "\t", "@",
]  # fmt: skip


@pytest.fixture(scope="module")
def runs_dir(ip: InteractiveShell, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "runs"
    ip.run_line_magic("config", f'NsightMagic.runs_dir = "{root}"')
    ip.run_line_magic("config", 'NsightMagic.nsys_path = ""')
    ip.run_line_magic("config", 'NsightMagic.ncu_path = ""')
    return root


@pytest.fixture(autouse=True)
def no_profiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    for var in ("NSIGHT_MAGIC_NSYS", "NSIGHT_MAGIC_NCU"):
        monkeypatch.delenv(var, raising=False)


def _check(ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str],
           magic: str, line: str, cell: str) -> None:  # fmt: skip
    capsys.readouterr()
    result = ip.run_cell(f"%%{magic} {line}\n{cell}")
    shown = capsys.readouterr()
    text = shown.out + shown.err
    error = result.error_in_exec or result.error_before_exec
    assert not result.success, (line, cell)
    assert isinstance(error, UsageError | NsightMagicError), (line, cell, type(error), text)
    assert "Traceback" not in text, (line, cell, text)
    assert not runs_dir.exists() or not any(runs_dir.iterdir()), (line, cell)


@settings(FUZZ, max_examples=round(300 * SCALE))
@given(
    magic=st.sampled_from(["nsys", "ncu"]),
    line=st.lists(st.sampled_from(OPTION_TOKENS), max_size=6).map(" ".join),
    cell=st.lists(st.sampled_from(CELL_PARTS), min_size=1, max_size=3).map("\n".join),
)
def test_fuzzed_lines_and_cells_fail_typed(ip, runs_dir, capsys, magic, line, cell) -> None:  # type: ignore[no-untyped-def]
    # the line a magic receives is one line: a newline would end it
    _check(ip, runs_dir, capsys, magic, line.replace("\n", " "), cell)


def test_shell_still_works_after_the_fuzz(ip: InteractiveShell) -> None:
    assert ip.run_cell("z = 40 + 2").success and ip.user_ns["z"] == 42
    assert ip.run_cell("get_ipython()").success
