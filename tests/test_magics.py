"""The magics in a real IPython InteractiveShell (this machine has no nsys/ncu)."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from nsight_magic.session.history import REGISTRY


@pytest.fixture(scope="module")
def ip() -> InteractiveShell:
    import nsight_magic

    if not hasattr(nsight_magic, "load_ipython_extension"):
        pytest.fail(
            "nsight_magic was imported as a namespace package (its __init__ did not run): the "
            "editable install predates nsight_magic/__init__.py. Fix: `.venv/bin/pip install "
            "--no-deps -e .` or pytest `pythonpath = ['.']`."
        )
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nsight_magic")
    return shell


@pytest.fixture
def runs_dir(ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    ip.run_line_magic("config", f'NsightMagic.runs_dir = "{root}"')
    monkeypatch.setenv("PATH", "/nonexistent")  # make sure no profiler is found
    for var in ("NSIGHT_MAGIC_NSYS", "NSIGHT_MAGIC_NCU"):
        monkeypatch.delenv(var, raising=False)
    ip.run_line_magic("config", 'NsightMagic.nsys_path = ""')
    ip.run_line_magic("config", 'NsightMagic.ncu_path = ""')
    REGISTRY.clear()
    yield root
    REGISTRY.clear()


def test_magics_registered_with_real_help(ip: InteractiveShell) -> None:
    for name in ("nsys", "ncu", "nsight_setup"):
        assert ip.find_cell_magic(name) is not None
    assert ip.find_line_magic("nsight_setup") is not None
    doc = ip.find_cell_magic("nsys").__doc__
    assert "Usage::" in doc and "Example::" in doc and "--warmup N" in doc
    assert "NOT sent back" in doc
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


def test_missing_nsys_prints_one_clear_message(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ip.run_cell_magic("nsys", "--name t", "x = 1")
    assert out is None
    err = capsys.readouterr().err
    assert "ToolNotFoundError" in err and '%config NsightMagic.nsys_path = "' in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not runs_dir.exists() or not any(runs_dir.iterdir())
    # the shell still works afterwards
    assert ip.run_cell("y = 2 + 2").success and ip.user_ns["y"] == 4


def test_configured_path_is_used_and_named(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_line_magic("config", 'NsightMagic.ncu_path = "/opt/nowhere/ncu"')
    ip.run_cell_magic("ncu", "--kernel gemm", "x = 1")
    err = capsys.readouterr().err
    assert "/opt/nowhere/ncu" in err and "from configured" in err


def test_syntax_error_in_cell_reported_before_tool_lookup(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("nsys", "", "x = (1,\ny = 2 +\n")
    err = capsys.readouterr().err
    assert "CellSyntaxError" in err and "line" in err


def test_unpicklable_var_is_named(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell("import threading; lock = threading.Lock()")
    ip.run_cell_magic("nsys", "--vars lock", "x = 1")
    err = capsys.readouterr().err
    assert "UnpicklableVariableError" in err and "'lock'" in err and "%%nsight_setup" in err
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_nsight_setup_runs_in_notebook_and_records(
    ip: InteractiveShell, runs_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("nsight_setup", "--name data", "setup_value = 41 + 1")
    assert ip.user_ns["setup_value"] == 42
    ip.run_cell_magic("nsight_setup", "", "import math")
    ip.run_cell_magic("nsight_setup", "--name data", "setup_value = 7")  # replaces
    assert REGISTRY.sources() == ["setup_value = 7", "import math"]
    capsys.readouterr()
    ip.run_line_magic("nsight_setup", "--list")
    listed = capsys.readouterr().out
    assert "[1] (data)" in listed and "import math" in listed
    # a failing setup cell is not recorded
    ip.run_cell_magic("nsight_setup", "", "raise ValueError('boom')")
    assert len(REGISTRY) == 2
    ip.run_line_magic("nsight_setup", "--clear")
    assert len(REGISTRY) == 0 and "Cleared 2" in capsys.readouterr().out


def test_config_traits_roundtrip(ip: InteractiveShell, runs_dir: Path) -> None:
    ip.run_line_magic("config", 'NsightMagic.nsys_path = "/x/nsys"')
    magics = next(c for c in ip.configurables if type(c).__name__ == "NsightMagic")
    assert magics.nsys_path == "/x/nsys" and magics.runs_dir == str(runs_dir)
