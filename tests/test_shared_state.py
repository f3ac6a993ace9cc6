"""One copy of the notebook's state (issue 33), on the CPU: what cannot be sent and why, which
names a re-run must leave as they were (identity across cells and in-place changes both ways are
tests/test_state_graph.py's), and, with the real worker process, a setup cell that runs once (in
the notebook) while the worker gets its names, a setup name that cannot be pickled rebuilt by
one replay that says so, and a notebook ``del`` reaching the worker. CUDA IPC itself needs a
GPU: tests/gpu."""

from __future__ import annotations

import math
import textwrap
import threading
from pathlib import Path

import pytest
from session_support import BareBackend

from nsight_magic.errors import CellFailedError
from nsight_magic.script import prepare_cell
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, Rerun, RunCallbacks
from nsight_magic.session.state import setup_replay
from nsight_magic.session.state.repeat_changes import changed_names
from nsight_magic.shared_state.notebook_side import NotebookState

torch = pytest.importorskip("torch")


def test_what_cannot_be_sent_says_why() -> None:
    """The look says, per name, why a value cannot go (it cannot be pickled, or it is over
    ``auto_vars_max_bytes``); everything else goes in the one message."""
    nb = {"lock": threading.Lock(), "big": torch.zeros(1 << 20), "n": 3, "f": len}
    out = NotebookState(nb).outgoing(dict(nb), max_bytes=1 << 16)
    assert set(out.cannot) == {"lock", "big"}
    assert "cannot be pickled" in out.cannot["lock"]
    assert "over auto_vars_max_bytes" in out.cannot["big"]
    assert set(out.msg.names) == {"n", "f"}


def test_a_rerun_keeps_what_its_text_changes() -> None:
    def train(m, o):
        return None

    ns = {"model": torch.nn.Linear(2, 2), "opt": object(), "w": torch.zeros(3), "train": train}
    mods = frozenset({"torch"})

    def changes(cell: str) -> list[str] | None:
        return changed_names(prepare_cell(textwrap.dedent(cell)), mods, ns)

    assert changes("loss = model(w).sum()\nloss.backward()\nopt.step()") == ["loss", "opt"]
    assert changes("y = model(w)\ns = w[:2].float().sum()") is None  # reads only
    assert changes("w.add_(1)") == ["w"]
    assert changes("train(model, opt)") == ["model", "opt"]  # the notebook's function
    assert changes("exec('x = 1')") == ["*"]


@pytest.fixture
def manager():  # type: ignore[no-untyped-def]
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def _cell(manager: SessionManager, tmp_path: Path, ns: dict, cell: str):  # type: ignore[no-untyped-def,type-arg]
    out: list[str] = []
    request = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path))
    result = manager.profile(request, BareBackend(), notebook=Notebook(user_ns=ns),
                             callbacks=RunCallbacks(output=out.append))  # fmt: skip
    return result, out


def _setup(manager: SessionManager, ns: dict, source: str, name: str = "setup") -> None:  # type: ignore[type-arg]
    manager.notebook = Notebook(user_ns=ns)
    cell = prepare_cell(source)
    assert manager.run_setup(name, cell, lambda: exec(cell.code, ns) is None)


def test_a_setup_cell_runs_once_in_the_notebook_and_the_worker_receives_its_names(
    manager: SessionManager, tmp_path: Path
) -> None:
    log = tmp_path / "setup_runs.txt"
    ns: dict = {}  # type: ignore[type-arg]
    source = (
        f"import torch\nopen({str(log)!r}, 'a').write('ran\\n')\n"
        "model = torch.nn.Linear(8, 8)\nopt = torch.optim.SGD(model.parameters(), lr=1.0)\n"
    )
    _setup(manager, ns, source)
    result, out = _cell(manager, tmp_path, ns, "print(type(model).__name__, len(opt.param_groups))")
    assert "Linear 1" in out
    assert log.read_text() == "ran\n", "the setup cell ran in the notebook only"
    assert not result.meta.get("replayed")
    assert {"model", "opt", "torch"} <= set(result.meta["shared_vars"]["sent_names"])
    status = next(s for s in manager.status() if s.tool == "nsys")
    assert {"model", "opt"} <= set(status.shared_names)


def test_a_setup_name_that_cannot_be_pickled_is_rebuilt_by_one_replay_that_says_so(
    manager: SessionManager, tmp_path: Path
) -> None:
    ns: dict = {}  # type: ignore[type-arg]
    _setup(manager, ns, "import threading\nlock = threading.Lock()\nn = 5\n", name="locks")
    result, out = _cell(manager, tmp_path, ns, "with lock:\n    print('n is', n)")
    assert "n is 5" in out
    assert result.meta["replayed"] == ["locks"]
    assert any("replays setup cell 'locks': lock: " in line for line in out)
    again, out = _cell(manager, tmp_path, ns, "with lock:\n    print('again', n)")
    assert "again 5" in out and not again.meta.get("replayed"), "replayed once per worker"


def test_a_replayed_setup_cell_gets_the_names_it_reads_from_ordinary_cells(
    manager: SessionManager, tmp_path: Path
) -> None:
    # `time` was imported in an ordinary cell; the setup cell that uses it must be replayed
    import time

    ns: dict = {"time": time}  # type: ignore[type-arg]
    _setup(manager, ns, "import threading\nlock = threading.Lock()\nt0 = time.monotonic()\n")
    result, out = _cell(manager, tmp_path, ns, "with lock:\n    print('t0', t0 > 0)")
    assert "t0 True" in out and result.meta["replayed"] == ["setup"]
    assert "time" in result.meta["shared_vars"]["sent_names"]


def test_the_last_result_holding_a_run_replays_no_setup_and_deletes_nothing(
    manager: SessionManager, tmp_path: Path
) -> None:
    """The GPU acceptance of 2026-12-07: a cell ending in ``k3`` (a run) left it in ``_``; the
    setup cell's ``for _ in range(steps)`` inside ``generate`` counts as binding ``_``; so every
    new worker replayed the setup cell for ``_``, and then told the notebook that ``torch``,
    ``model`` and ``generate`` were deleted (the replay made them the worker's own). IPython's
    ``_`` makes no setup cell replay, and what a replay makes the worker's own stays in the
    notebook."""
    ns: dict = {}  # type: ignore[type-arg]
    _setup(manager, ns, "import math\ndef f():\n    for _ in range(2):\n        pass\n"
                        "    return math.pi\n")  # fmt: skip
    ns["_"] = threading.Lock()  # IPython's last result: a run, a lock
    result, _ = _cell(manager, tmp_path, ns, "y = f()")
    assert not result.meta.get("replayed")
    assert {"math", "f", "y"} <= set(ns) and ns["y"] == math.pi


def test_what_a_replay_makes_the_workers_own_stays_in_the_notebook(
    manager: SessionManager, tmp_path: Path
) -> None:
    """A setup name the worker had received becomes one that cannot be sent (the notebook
    rebinds it to a lock): the worker replays the setup cell, whose names are then its own;
    the notebook keeps them (they were reported deleted: ``k`` vanished from the notebook)."""
    ns: dict = {}  # type: ignore[type-arg]
    _setup(manager, ns, "obj = [1]\nk = 1\n", name="plain")
    _cell(manager, tmp_path, ns, "a = len(obj) + k")
    ns["obj"] = threading.Lock()
    result, _ = _cell(manager, tmp_path, ns, "b = k + 1")
    assert result.meta.get("replayed") == ["plain"]
    assert ns["k"] == 1 and ns["b"] == 2 and ns["a"] == 2
    assert isinstance(ns["obj"], type(threading.Lock()))


def test_a_name_the_notebook_deletes_is_gone_from_the_worker(
    manager: SessionManager, tmp_path: Path
) -> None:
    ns: dict = {}  # type: ignore[type-arg]
    _setup(manager, ns, "import torch\nw = torch.ones(4)\n")
    _cell(manager, tmp_path, ns, "print(float(w.sum()))")
    del ns["w"]
    with pytest.raises(CellFailedError, match="NameError"):
        _cell(manager, tmp_path, ns, "print(w)")
    status = next(s for s in manager.status() if s.tool == "nsys")
    assert "w" not in status.shared_names


def test_worker_only_setup_is_built_in_each_worker_and_a_drill_down_works(
    manager: SessionManager, tmp_path: Path
) -> None:
    """``%%nsight_setup --worker-only``: the notebook never ran it, so each worker (the nsys
    worker, then the ncu worker a drill-down starts) replays it, says so, and the drill-down
    runs (before: the ncu worker skipped it without a word and the drill-down hit NameError)."""
    ns: dict = {}  # type: ignore[type-arg]
    manager.notebook = Notebook(user_ns=ns)
    cell = prepare_cell("base = 40\n")
    assert manager.run_setup("model", cell, lambda: True, in_notebook=False)
    first, out = _cell(manager, tmp_path, ns, "y = base + 2\nprint('y', y)")
    assert "y 42" in out and first.meta["replayed"] == ["model"]
    assert any("replays setup cell 'model': base not in the notebook" in line for line in out)
    drill_out: list[str] = []
    request = CellRequest(cell="y = base + 2\nprint('y', y)", runs_root=tmp_path / "runs",
                          cwd=str(tmp_path))  # fmt: skip
    drill = manager.profile(request, BareBackend("ncu"),
                            rerun=Rerun(before=first.meta["history_id"]),
                            callbacks=RunCallbacks(output=drill_out.append))  # fmt: skip
    # it ran (base was there: no NameError), and its print, a repeat of the cell's, is not shown
    assert drill.report["status"] == "ok" and "y 42" not in drill_out
    assert (
        drill.meta["replayed"] == ["model"]
        and drill.meta["worker"]["pid"] != first.meta["worker"]["pid"]
    )


def test_a_worker_only_setup_binding_its_name_in_a_try_block_is_still_built_in_the_worker(
    manager: SessionManager, tmp_path: Path
) -> None:
    """A ``--worker-only`` setup cell is replayed when the notebook lacks a name it binds:
    that counted only names every run binds for sure, so ``base``, bound in a ``try``, did not,
    and with ``os`` in the notebook (an ordinary cell imported it) no worker built ``base``:
    a NameError with no reason (issue 42 item 2)."""
    import os

    ns: dict = {"os": os}  # type: ignore[type-arg]
    manager.notebook = Notebook(user_ns=ns)
    source = textwrap.dedent("""\
        import os
        try:
            base = int(os.environ.get("NSM_BASE", "40"))
        except ValueError:
            base = 0
    """)
    assert manager.run_setup("model", prepare_cell(source), lambda: True, in_notebook=False)
    result, out = _cell(manager, tmp_path, ns, "print('y', base + 2)")
    assert "y 42" in out and result.meta["replayed"] == ["model"]


def test_underscore_names_are_the_users_and_ipythons_own_stay_home(
    manager: SessionManager, tmp_path: Path
) -> None:
    """``_p, _e = ...`` in a setup cell and ``_scale`` in an ordinary cell are the user's names
    and reach the worker (issue 41: NameError '_e'); IPython's ``_i3``, ``_7``, ``Out`` do not
    (its last results ``_``, ``__``, ``___`` do: issue 56)."""
    from nsight_magic.vocabulary.notebook_names import is_ipython_own

    ns: dict = {"_scale": 3, "_": "last output", "_i3": "x = 1", "_7": 7}  # type: ignore[type-arg]
    _setup(manager, ns, "import torch\n_p, _e = [torch.ones(2)], [torch.zeros(2)]\n")
    result, out = _cell(
        manager, tmp_path, ns, "print('sum', float(_p[0].sum() + _e[0].sum()) * _scale)"
    )
    assert "sum 6.0" in out
    sent = set(result.meta["shared_vars"]["sent_names"])
    assert {"_p", "_e", "_scale"} <= sent and not sent & {"_i3", "_7"}
    assert "_" in sent  # IPython's last result travels (``prev = _`` in a profiled cell)
    assert all(
        is_ipython_own(n)
        for n in (
            "_",
            "__",
            "___",
            "_i",
            "_ii",
            "_i12",
            "_12",
            "_oh",
            "_ih",
            "_dh",
            "In",
            "Out",
            "_exit_code",
            "__name__",
        )
    )
    assert not any(is_ipython_own(n) for n in ("_p", "_e", "_helper", "_cfg", "_i2x", "__x"))


def test_a_replayed_setup_cell_reads_the_values_it_read_in_the_notebook(
    manager: SessionManager, tmp_path: Path
) -> None:
    """Issue 43 item 5: ``k = 3``; a setup cell with a lock (so a worker replays it) and
    ``val = k * 2``; ``k = 100``; then a profiled cell: the worker's ``val`` is the notebook's
    6, not 200, and ``k`` is today's 100."""
    ns: dict = {"k": 3}  # type: ignore[type-arg]
    _setup(manager, ns, "import threading\nlk = threading.Lock()\nval = k * 2\n", name="locked")
    ns["k"] = 100
    result, out = _cell(manager, tmp_path, ns, "print('val', val, 'k', k)")
    assert result.meta["replayed"] == ["locked"]
    assert "val 6 k 100" in out


def test_only_plain_small_values_go_with_a_setup_cell() -> None:
    """What a setup cell read goes with it for a replay only when plain and small: a number,
    a string, their containers; never a model, a lock or a list of 20,000 items (nothing is
    pickled just to learn its size)."""
    import pickle

    ns = {"k": 3, "cfg": {"lr": 0.1, "layers": [1, 2]}, "lock": threading.Lock(),
          "model": torch.nn.Linear(2, 2), "many": list(range(20_000)), "obj": object()}  # fmt: skip
    blob = setup_replay.values_read(set(ns) | {"missing"}, ns)
    assert blob is not None and pickle.loads(blob) == {"k": 3, "cfg": {"lr": 0.1, "layers": [1, 2]}}
    assert setup_replay.values_read({"model", "lock"}, ns) is None


def test_a_call_of_notebook_code_changes_what_its_body_reaches_not_the_whole_notebook() -> None:
    """Issue 41: a drill-down of ``loss = train_step()`` saved all of a 56 GB notebook to host
    memory and back (99.6 s on the H200) where the step reaches 0.1 GB. The names a notebook
    function's body reaches are read from its code (through the notebook functions it calls,
    and for a method of a class a cell defined); what cannot be read stays ``["*"]``."""
    ns: dict = {"__name__": "__main__"}  # a notebook's namespace: cells exec in it
    exec(
        textwrap.dedent(
            """
            import torch
            big = torch.zeros(4)
            model, other, counter, lr = torch.nn.Linear(2, 2), torch.zeros(2), torch.zeros(()), 0.1
            opt = torch.optim.SGD(model.parameters(), lr=lr)
            def helper():
                counter.add_(1)
            def train_step():
                loss = model(torch.ones(2)).sum()
                loss.backward()
                opt.step()
                helper()
                return [p.grad for p in model.parameters()]
            class Trainer:
                def step(self):
                    opt.step()
            trainer = Trainer()
            def runs_code(src):
                exec(src)
            def closes_over(m):
                def inner():
                    m.weight.data.zero_()
                return inner
            zero_it = closes_over(model)
            def plain_closure():
                n = 3
                def inner():
                    return n + len(other)
                return inner
            counted = plain_closure()
            """
        ),
        ns,
    )
    mods = frozenset({"torch"})

    def changes(cell: str) -> list[str] | None:
        return changed_names(prepare_cell(textwrap.dedent(cell)), mods, ns)

    # its body's names and those of the notebook function it calls; not big, not torch
    assert changes("loss = train_step()") == ["counter", "model", "opt"]
    assert changes("trainer.step()") == ["opt", "trainer"]  # a method of the notebook's class
    assert changes("y = counted()") == ["other"]  # a closure over a plain value
    assert changes("zero_it()") == ["*"]  # a closure over an object: not named in its code
    assert changes("runs_code('big.add_(1)')") == ["*"]  # exec: any name
    assert changes("train_step(); other.add_(1)") == ["counter", "model", "opt", "other"]
