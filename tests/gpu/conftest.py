"""GPU end-to-end tests drive the magics in a real IPython shell, as a user does. Skipped unless
nsys/ncu are found and torch sees CUDA (run them with ``pytest -m gpu -s tests/gpu``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsight_magic.errors import ToolNotFoundError
from nsight_magic.processes import locate as tools
from nsight_magic.session.manager import MANAGER


def have(name: str) -> bool:
    try:
        tools.find_tool(name)  # type: ignore[arg-type]
        return True
    except ToolNotFoundError:
        return False


def cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture
def ip(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A shell with the extension loaded, run folders under tmp_path, no setup cells, and no
    worker left over from another test."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nsight_magic")
    shell.run_line_magic("config", f'NsightMagic.runs_dir = "{tmp_path / "runs"}"')
    MANAGER.reset()
    MANAGER.clear_setup()
    yield shell
    MANAGER.reset()
    MANAGER.clear_setup()


def magic(shell, name: str, line: str, cell: str):  # type: ignore[no-untyped-def]
    """Run ``%%name line`` + cell through run_cell (as Jupyter does); the result object, or the
    typed error the cell failed with."""
    result = shell.run_cell(f"%%{name} {line}\n{cell}")
    if not result.success:
        return result.error_in_exec
    return result.result
