"""Two-way state (issue 41), on the CPU with a real worker: a profiled cell behaves like
``%%time``. What it binds comes back to the notebook, what it changes of the notebook's objects
(through the notebook's own functions too) comes back, an optimizer's state comes back, and no
worker ever replays a profiled cell: a step counter rises by exactly one per profiled training
cell and the weights equal the same steps run in the notebook without the profiler, bit for
bit. CUDA tensors (copied device to device, then mapped by the worker) need a GPU: tests/gpu."""

from __future__ import annotations

from pathlib import Path

import pytest
from session_support import BareBackend

from nsight_magic.errors import CellFailedError
from nsight_magic.script import prepare_cell
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks

torch = pytest.importorskip("torch")

SETUP = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
counter = torch.zeros((), dtype=torch.int64)
x = torch.randn(32, 8)
target = torch.randn(32, 4)
hits = []

def train_step():
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    counter.add_(1)
    hits.append(1)
    return loss.detach()
"""


@pytest.fixture
def manager():  # type: ignore[no-untyped-def]
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def _setup(manager: SessionManager, ns: dict) -> None:  # type: ignore[type-arg]
    manager.notebook = Notebook(user_ns=ns)
    cell = prepare_cell(SETUP)
    assert manager.run_setup("train", cell, lambda: exec(cell.code, ns) is None)


def _cell(manager, tmp_path: Path, ns: dict, cell: str, **request):  # type: ignore[no-untyped-def,type-arg]
    out: list[str] = []
    req = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path), **request)
    result = manager.profile(req, BareBackend(), notebook=Notebook(user_ns=ns),
                             callbacks=RunCallbacks(output=out.append))  # fmt: skip
    return result, out


def _reference(steps: int) -> dict:  # type: ignore[type-arg]
    """The same notebook, ``steps`` training steps run without the profiler."""
    ns: dict = {}  # type: ignore[type-arg]
    exec(SETUP, ns)
    for _ in range(steps):
        ns["loss"] = ns["train_step"]()
    return ns


def _same_weights(a: dict, b: dict) -> bool:  # type: ignore[type-arg]
    return all(
        torch.equal(p, q)
        for p, q in zip(a["model"].parameters(), b["model"].parameters(), strict=True)
    )


def test_a_profiled_cells_bindings_come_back_like_percent_time(manager, tmp_path) -> None:
    ns: dict = {}  # type: ignore[type-arg]
    _setup(manager, ns)
    result, _ = _cell(manager, tmp_path, ns, "y = model(x)\nshape = tuple(y.shape)\nwords = ['a']")
    assert ns["shape"] == (32, 4) and ns["words"] == ["a"]
    assert isinstance(ns["y"], torch.Tensor) and ns["y"].shape == (32, 4)
    assert torch.equal(ns["y"], ns["model"](ns["x"]).detach())
    assert set(result.meta["brought_back"]["names"]) >= {"y", "shape", "words"}
    # the notebook's own objects stay its own (a reference back, not a copy)
    before = ns["model"]
    _cell(manager, tmp_path, ns, "m = model\n")
    assert ns["m"] is before


def test_a_training_cell_changes_the_notebooks_model_once_and_never_again(
    manager, tmp_path
) -> None:
    """``loss = train_step()`` (a notebook function: its effects are not in the cell's text)
    under %%nsys three times, once with --warmup 2: the counter rises by exactly one each time,
    and the weights, the optimizer's state and ``hits`` equal three steps run without the
    profiler. A second worker (another launch option set) receives that state: it replays no
    profiled cell."""
    ns: dict = {}  # type: ignore[type-arg]
    _setup(manager, ns)
    _cell(manager, tmp_path, ns, "loss = train_step()")
    assert int(ns["counter"]) == 1 and ns["hits"] == [1]
    _cell(manager, tmp_path, ns, "loss = train_step()", warmup=2)
    assert int(ns["counter"]) == 2 and ns["hits"] == [1, 1]
    result, _ = _cell(manager, tmp_path, ns, "loss = train_step()")
    assert int(ns["counter"]) == 3 and ns["hits"] == [1, 1, 1]
    assert not result.meta.get("replayed")
    ref = _reference(3)
    assert _same_weights(ns, ref)
    assert torch.equal(ns["loss"], ref["loss"])
    state = ns["opt"].state
    assert len(state) == len(list(ns["model"].parameters()))
    for p, q in zip(ns["model"].parameters(), ref["model"].parameters(), strict=True):
        assert torch.equal(state[p]["exp_avg"], ref["opt"].state[q]["exp_avg"])
        assert float(state[p]["step"]) == 3.0
    # a cell that only reads, in a new worker: it sees the notebook's state and replays nothing
    manager.stop()
    again, out = _cell(manager, tmp_path, ns, "print('count', int(counter), len(hits))")
    assert "count 3 3" in out and not again.meta.get("replayed")
    assert int(ns["counter"]) == 3 and _same_weights(ns, ref)


def test_a_cell_whose_text_hides_what_it_reads_and_binds(manager, tmp_path) -> None:
    """``exec("loss = train_step()")``: the text names nothing of the notebook, so every
    notebook name goes to the worker (a new one, which has none), what the run binds comes
    back, and ``--warmup 1`` (which saves and restores all it received) steps the model once:
    the counter, ``hits`` and the weights equal one step run without the profiler."""
    ns: dict = {}  # type: ignore[type-arg]
    _setup(manager, ns)
    manager.stop()
    result, _ = _cell(manager, tmp_path, ns, 'exec("loss = train_step()")', warmup=1)
    assert int(ns["counter"]) == 1 and ns["hits"] == [1]
    assert "loss" in result.meta["brought_back"]["names"]
    ref = _reference(1)
    assert _same_weights(ns, ref) and torch.equal(ns["loss"], ref["loss"])


def test_what_cannot_come_back_is_named_then_and_where_it_is_needed(manager, tmp_path) -> None:
    """A generator does not pickle: it stays in the nsys worker, the cell says so in one line,
    a later nsys cell still sees it, and a cell in the ncu worker that reads it fails with a
    NameError that says where it is and the fix."""
    ns: dict = {}  # type: ignore[type-arg]
    manager.notebook = Notebook(user_ns=ns)
    result, out = _cell(manager, tmp_path, ns, "it = (i for i in range(3))\nn = 1")
    assert ns["n"] == 1 and "it" not in ns
    assert set(result.meta["brought_back"]["cannot"]) == {"it"}
    (line,) = [x for x in out if "not brought back to the notebook" in x]
    assert "it: " in line and "cannot be pickled" in line
    _, out = _cell(manager, tmp_path, ns, "print('next', next(it))")
    assert "next 0" in out
    with pytest.raises(CellFailedError) as info:
        out2: list[str] = []
        req = CellRequest(cell="print(next(it))", runs_root=tmp_path / "runs", cwd=str(tmp_path))
        manager.profile(req, BareBackend("ncu"), notebook=Notebook(user_ns=ns),
                        callbacks=RunCallbacks(output=out2.append))  # fmt: skip
    message = str(info.value).splitlines()[0]
    assert "name 'it' is not defined in the ncu worker: a profiled cell bound it in the nsys" in (
        message
    )
    assert "Fix: bind it in the notebook" in message


def test_a_name_the_cell_only_reads_keeps_its_object(manager, tmp_path) -> None:
    """Reading is not binding: a list the cell appends to is updated in place, an instance of
    the notebook's own class takes its new attributes in place, and a value the cell only
    reads (a number, a library's object) keeps its object in the notebook."""
    import fractions

    class Meter:
        def __init__(self) -> None:
            self.count = 0

    Meter.__module__ = "__main__"  # as a class a notebook cell defines
    seen: list = []  # type: ignore[type-arg]
    meter = Meter()
    frac = fractions.Fraction(1, 3)
    ns: dict = {"seen": seen, "meter": meter, "frac": frac, "Meter": Meter}  # type: ignore[type-arg]
    manager.notebook = Notebook(user_ns=ns)
    _cell(manager, tmp_path, ns, "seen.append(float(frac))\nmeter.count += 1\nn = 2")
    assert ns["seen"] is seen and seen == [1 / 3]
    assert ns["meter"] is meter and meter.count == 1
    assert ns["frac"] is frac and ns["n"] == 2
