"""A failing ``--warmup`` or ``--vars`` unpickling shows the user's frames only, in a warm
worker as in a fresh run (issue 35 item 11): before, the warm traceback began with the worker's
``op_prepare`` and went through the script's ``warmup``/``run_statements``/``load_vars``. For
real on the CPU: the session worker without a profiler (``BareBackend``)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from session_support import BareBackend

from nsight_magic.errors import CellFailedError
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks

OUR_FRAMES = ("serve.py", "script.py", "op_prepare", "run_statements", "load_vars", "warmup")


class BadToUnpickle:
    """Pickles fine in the notebook; unpickling it in the profiled process raises."""

    def __reduce__(self) -> Any:
        return (int, ("not a number",))


@pytest.fixture
def manager():
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def _failure(manager: SessionManager, tmp_path: Path, cell: str, **kw: Any) -> CellFailedError:
    request = CellRequest(cell=textwrap.dedent(cell), runs_root=tmp_path / "runs",
                          cwd=str(tmp_path), **kw)  # fmt: skip
    with pytest.raises(CellFailedError) as info:
        manager.profile(request, BareBackend(), notebook=Notebook(user_ns={"b": BadToUnpickle()}),
                        callbacks=RunCallbacks())  # fmt: skip
    return info.value


@pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh"])
def test_a_warmup_failure_shows_only_the_cells_frames(manager, tmp_path: Path, fresh: bool) -> None:
    cell = """
        def f():
            raise ValueError("boom")
        f()
    """
    error = _failure(manager, tmp_path, cell, warmup=1, fresh=fresh)
    assert "during warm-up" in str(error)
    frames = [ln.strip() for ln in error.traceback.splitlines() if ln.strip().startswith("File")]
    assert frames == [
        'File "<nsight_magic cell>", line 3, in <module>',
        'File "<nsight_magic cell>", line 2, in f',
    ]
    assert not any(ours in error.traceback for ours in OUR_FRAMES)


@pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh"])
def test_a_vars_unpickling_failure_shows_no_frames_of_ours(
    manager, tmp_path: Path, fresh: bool
) -> None:
    error = _failure(manager, tmp_path, "print(b)", vars=("b",), fresh=fresh)
    assert "A vars step raised ValueError" in str(error)
    assert error.traceback.strip() == "ValueError: invalid literal for int() with base 10: " \
        "'not a number'"  # fmt: skip
    assert not any(ours in error.traceback for ours in OUR_FRAMES)
