"""A profiled cell runs in a process we start from the notebook's kernel: it inherits what
ipykernel changed there, and lacks what IPython gives a cell there. Each test sets the kernel's
state here the way ipykernel does (as test_child_signals.py sets SIGINT ignored) and checks what
the cell sees, warm and fresh."""

from __future__ import annotations

import textwrap
import threading
from pathlib import Path

import pytest
from session_support import BareBackend

from nsight_magic.errors import CellFailedError, ProfileInterrupted
from nsight_magic.profilers.env import without_notebook_backend
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks

# what ipykernel's kernelapp.py sets when MPLBACKEND is unset (``init_gui_pylab``)
KERNEL_MPLBACKEND = "module://matplotlib_inline.backend_inline"


@pytest.fixture
def manager():
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def _printed(manager: SessionManager, tmp_path: Path, cell: str, cancel=None, **kw) -> list[str]:
    out: list[str] = []
    kw.setdefault("cwd", str(tmp_path))
    request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs", **kw)
    result = manager.profile(request, BareBackend(), notebook=manager.notebook,
                             callbacks=RunCallbacks(output=out.append, cancel=cancel))  # fmt: skip
    assert result.report["status"] == "ok", result.report
    return out


@pytest.mark.parametrize("fresh", [False, True])
def test_the_cell_draws_with_agg_not_the_notebooks_inline_backend(
    manager, tmp_path, monkeypatch, fresh
) -> None:
    """The inline backend lives in the notebook: a worker Python without matplotlib_inline
    failed at ``import matplotlib`` ("not a valid value for backend")."""
    monkeypatch.setenv("MPLBACKEND", KERNEL_MPLBACKEND)
    cell = "import os\nprint('backend:', os.environ.get('MPLBACKEND'))"
    assert "backend: agg" in _printed(manager, tmp_path, cell, fresh=fresh)


def test_a_backend_the_user_chose_is_kept(manager, tmp_path, monkeypatch) -> None:
    cell = "import os\nprint('backend:', os.environ.get('MPLBACKEND'))"
    monkeypatch.setenv("MPLBACKEND", "svg")  # set before the notebook started: not ipykernel's
    assert "backend: svg" in _printed(manager, tmp_path, cell)
    monkeypatch.setenv("MPLBACKEND", KERNEL_MPLBACKEND)
    assert "backend: pdf" in _printed(manager, tmp_path, cell, env={"MPLBACKEND": "pdf"})


def test_only_notebook_backends_are_replaced() -> None:
    old_ipykernel = "module://ipykernel.pylab.backend_inline"
    for inline in (KERNEL_MPLBACKEND, old_ipykernel):
        assert without_notebook_backend({"MPLBACKEND": inline, "A": "1"}) == {
            "MPLBACKEND": "agg", "A": "1"}  # fmt: skip
    for chosen in ("QtAgg", "module://my.backend", ""):
        assert without_notebook_backend({"MPLBACKEND": chosen}) == {"MPLBACKEND": chosen}
    assert without_notebook_backend({}) == {}


@pytest.mark.parametrize("fresh", [False, True])
def test_display_works_as_in_the_notebook(manager, tmp_path, fresh) -> None:
    """IPython makes ``display`` a builtin in the notebook: a profiled cell (or a setup cell it
    replays) that calls it failed with NameError in the profiled process. Each object is a
    display of its own, shown by its repr (with no rich display here, its text as a line), as
    the notebook shows ``display('shown', 42)``."""
    printed = _printed(manager, tmp_path, "display('shown', 42)", fresh=fresh)
    assert printed[-2:] == ["'shown'", "42"], printed
    # with IPython syntax the cell has a shell, whose display shows a repr, as IPython does
    assert "'with shell'" in _printed(manager, tmp_path, "%time x = 1\ndisplay('with shell')",
                                      fresh=fresh)  # fmt: skip


def test_top_level_await_runs_as_in_the_notebook(manager, tmp_path) -> None:
    """The kernel runs a cell on its event loop, so ``await`` at a cell's top level works there
    (and the magic's own check lets it through); the profiled process said "SyntaxError:
    'await' outside function". One loop serves every statement and cell, as the kernel's."""
    running = "asyncio.sleep(0, asyncio.get_running_loop())"
    out = _printed(manager, tmp_path, f"import asyncio\nfirst = await {running}")
    # the loop does not pickle: it stays in the worker (where the next cell sees it), and the
    # cell says so in one line (issue 41: what cannot come back to the notebook is named)
    assert len(out) == 1 and out[0].startswith("nsight_magic: not brought back to the notebook")
    assert "first: _UnixSelectorEventLoop holds what cannot go: " in out[0]
    cell = f"now = await {running}\nprint('same loop', now is first)"
    assert "same loop True" in _printed(manager, tmp_path, cell)
    fresh = "import asyncio\nawait asyncio.sleep(0)\nprint('fresh', await asyncio.sleep(0, 42))"
    assert "fresh 42" in _printed(manager, tmp_path, fresh, fresh=True)


def test_an_awaiting_statement_that_raises_shows_the_cells_frames(manager, tmp_path) -> None:
    with pytest.raises(CellFailedError) as info:
        _printed(manager, tmp_path, "import asyncio\nx = await asyncio.sleep(0, 0)\n1 / x")
    with pytest.raises(CellFailedError) as awaiting:
        _printed(manager, tmp_path, "await asyncio.sleep(0)\nawait asyncio.sleep(0, 1 / x)")
    for err in (info.value, awaiting.value):
        lines = err.traceback.splitlines()
        assert lines[0] == "Traceback (most recent call last):", lines
        assert lines[1].startswith('  File "<nsight_magic cell>"') and "asyncio" not in lines[1]
        assert err.exc_type == "ZeroDivisionError"


def test_an_interrupted_await_does_not_resume_in_a_later_cell(manager, tmp_path) -> None:
    setup = "import asyncio\nsteps = []\nasync def slow():\n    await asyncio.sleep(2)\n"
    _printed(manager, tmp_path, setup + "    steps.append('resumed')")
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    with pytest.raises(ProfileInterrupted):
        _printed(manager, tmp_path, "await slow()", cancel=cancel)
    later = "await asyncio.sleep(3)\nprint('steps', steps)"
    assert "steps []" in _printed(manager, tmp_path, later)


def test_a_cell_runs_in_the_notebooks_directory_of_now(manager, tmp_path) -> None:
    """``%cd`` in the notebook moves the cells after it; a warm worker kept running them in the
    directory it started in (a fresh run, started in the new one, did not)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "input.txt").write_text("from data/")
    _printed(manager, tmp_path, "x = 1")
    cell = "import os\nprint(open('input.txt').read(), os.getcwd() == os.path.realpath(here))"
    for fresh in (False, True):
        out = _printed(manager, tmp_path, f"here = {str(tmp_path / 'data')!r}\n{cell}",
                       cwd=str(tmp_path / "data"), fresh=fresh)  # fmt: skip
        assert "from data/ True" in out


ARGV_CELL = """\
import argparse, sys
parser = argparse.ArgumentParser()
parser.add_argument("--parent_dir", default="data")
print("args", parser.parse_args(), sys.argv[1:], sys.argv[0].endswith("script.py"))
"""


def test_the_cell_sees_the_same_argv_warm_and_fresh(manager, tmp_path) -> None:
    """A profiled cell's sys.argv is its script alone, warm or fresh. The notebook's is
    ipykernel's (``-f kernel.json``); the warm worker's was its own options, which an argparse
    in the cell took for its own (``--parent`` abbreviates ``--parent_dir``)."""
    for fresh in (False, True):
        out = _printed(manager, tmp_path, ARGV_CELL, fresh=fresh)
        assert "args Namespace(parent_dir='data') [] True" in out, out


def test_a_relative_runs_dir_still_replays_after_a_cd(manager, tmp_path, monkeypatch) -> None:
    """With ``runs_dir`` relative, a run's variables file was recorded relative too: after a
    ``%cd`` a new worker (which follows the notebook's directory) replayed the cell that read a
    shipped variable without it. Run folders are made absolute when created."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()

    def cell(code: str, ns: dict[str, object]) -> list[str]:
        out: list[str] = []
        request = CellRequest(cell=code, runs_root=Path("runs"), cwd=str(Path.cwd()))
        result = manager.profile(request, BareBackend(), notebook=Notebook(user_ns=ns),
                                 callbacks=RunCallbacks(output=out.append))  # fmt: skip
        assert result.report["status"] == "ok", result.report
        assert result.run_dir.is_absolute()
        return out

    ns = {"v": 41}
    cell("w = v + 1", ns)
    monkeypatch.chdir(tmp_path / "elsewhere")  # the notebook's %cd
    manager.stop()  # the next cell gets a new worker, which replays what it reads
    # (the replayed cell gets ``v`` from the notebook again: one copy, sent to each worker)
    assert "w is 42" in cell("print('w is', w)", ns)
