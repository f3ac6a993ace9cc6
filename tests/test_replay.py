"""Which cells a new worker replays: what each cell writes (script/effects.py) and the slice of
the history a cell needs (session/replay.py). Pure: cells are parsed as IPython transforms
them, nothing runs (test_session.py runs the slice in a real worker)."""

from __future__ import annotations

import pytest

from nsight_magic.script import prepare_cell
from nsight_magic.session.history import History
from nsight_magic.session.replay import plan_replay

MODULES = frozenset({"torch", "np"})


def writes(cell: str) -> frozenset[str]:
    prepared = prepare_cell(cell)
    return prepared.effects.writes(prepared.names_bound, MODULES)


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ("y = model(x)\ntorch.cuda.synchronize()", {"y"}),
        ("model.half()", {"model"}),
        ("x.add_(1)", {"x"}),
        ("items.append(3)", {"items"}),
        ("model.config.use_cache = False", {"model"}),
        ("d['k'] = 1", {"d"}),
        ("del d['k']", {"d"}),
        ("w.data[0] += 1", {"w"}),
        ("torch.nn.init.zeros_(w)", {"w"}),
        ("torch.add(a, b, out=c)", {"c"}),
        ("out = model(ids, past_key_values=cache)", {"out", "cache"}),
        ("torch.manual_seed(0)", {"torch"}),
        ("torch.backends.cuda.matmul.allow_tf32 = True", {"torch"}),
        ("s = x.sum().item()\nn = model.generate(ids)", {"s", "n"}),
        ("%time y = f(x)", {"y"}),
        ("%%time\nz = g(x)\n", {"z"}),
        ("!nvidia-smi -L", set()),
        ("%pip install tqdm", set()),
        ("files = !ls", {"files"}),
    ],
)
def test_what_a_cell_writes(cell: str, written: set[str]) -> None:
    assert writes(cell) == written


@pytest.mark.parametrize(
    ("cell", "why"),
    [
        ("from math import *", "import"),
        ("exec('q = 1')", "exec"),
        ("globals()['q'] = 1", "globals"),
        ("%cd /tmp", "%cd"),
        ("%env CUDA_LAUNCH_BLOCKING=1", "%env"),
    ],
)
def test_cells_whose_effects_the_text_hides_are_opaque(cell: str, why: str) -> None:
    assert why in prepare_cell(cell).effects.opaque


def test_only_top_level_bindings_are_certain() -> None:
    effects = prepare_cell("a = 1\nif c:\n    b = 2\nfor i in r:\n    e = i\n%time f = 3\n").effects
    assert effects.defined == {"a", "f"}


def _history(*cells: tuple[str, str]) -> History:
    history = History()
    for kind, source in cells:
        name = source.split("\n")[0]
        history.add("setup" if kind == "setup" else "cell", name, prepare_cell(source))
    return history


def _plan(history: History, cell: str, executed=(), **kw):
    return plan_replay(history.entries(), executed, prepare_cell(cell).names_read, **kw)


def test_the_slice_is_setup_plus_the_cells_whose_names_are_read() -> None:
    history = _history(
        ("setup", "import torch\nmodel = build()"),
        ("cell", "!nvidia-smi -L"),
        ("cell", "ids = torch.ones(4)"),
        ("cell", "y = model(ids)\ntorch.cuda.synchronize()"),
        ("cell", "%time z = model(ids)"),
        ("cell", "model.half()"),
        ("cell", "print(y.shape)"),
    )
    plan = _plan(history, "out = model(ids)")
    assert [e.name for e in plan.run] == ["import torch", "ids = torch.ones(4)", "model.half()"]
    assert plan.pending == 7 and len(plan.skipped) == 4
    assert plan.describe("ncu") == "3 of 7 earlier cells in the ncu worker"
    everything = _plan(history, "out = model(ids)", everything=True)
    assert len(everything.run) == 7 and not everything.skipped


def test_a_rebinding_cuts_the_slice_and_a_reading_cell_extends_it() -> None:
    history = _history(
        ("cell", "a = 1"),
        ("cell", "a = 2"),  # a rebound for sure: "a = 1" is not needed
        ("cell", "b = a + 1"),
        ("cell", "if flag:\n    c = 0"),
        ("cell", "c = b * 2"),
        ("cell", "if flag:\n    c = 5"),  # may or may not rebind c: both replayed
    )
    assert [e.name for e in _plan(history, "print(c)").run] == [
        "a = 2", "b = a + 1", "c = b * 2", "if flag:"
    ]  # fmt: skip


def test_a_cell_that_changes_an_object_in_place_is_always_replayed() -> None:
    history = _history(
        ("setup", "model = build()\nopt = make_optimizer(model)"),
        ("cell", "loss = model(x).sum()\nloss.backward()"),
        ("cell", "opt.step()"),  # the model's weights change through the optimizer
        ("cell", "y = model(x)"),
        ("cell", "log = []"),
        ("cell", "log.append(1)"),  # log is never read again, but it is changed in place
    )
    plan = _plan(history, "print(model(x))")
    assert [e.name for e in plan.run] == [
        "model = build()", "loss = model(x).sum()", "opt.step()", "log = []", "log.append(1)"
    ]  # fmt: skip
    assert [e.name for e in plan.skipped] == ["y = model(x)"]


def test_a_function_that_assigns_a_global_writes_it_where_it_is_called() -> None:
    history = _history(
        ("cell", "count = 0"),
        ("cell", "def bump():\n    global count\n    count += 1"),
        ("cell", "bump()"),
    )
    assert len(_plan(history, "print(count)").run) == 3


def test_opaque_cells_and_setup_cells_are_always_replayed() -> None:
    history = _history(("setup", "x = 1"), ("cell", "%cd /tmp"), ("cell", "y = 2"))
    assert [e.name for e in _plan(history, "print(x)").run] == ["x = 1", "%cd /tmp"]
    assert [e.name for e in _plan(history, "print(x)", setup=False).run] == ["%cd /tmp"]


def test_what_the_worker_ran_is_not_replayed_and_supplies_its_names() -> None:
    history = _history(("cell", "a = 1"), ("cell", "b = a"), ("cell", "c = 3"))
    ids = [e.id for e in history.entries()]
    plan = _plan(history, "print(b, c)", executed=[ids[1]])
    assert [e.name for e in plan.run] == ["c = 3"] and not plan.conflict
    # a re-run of an earlier cell (the picker's) sees only the entries before it
    assert [e.name for e in _plan(history, "print(a)", before=ids[1]).run] == ["a = 1"]


def test_a_skipped_cell_needed_after_a_later_cell_touched_its_names_is_a_conflict() -> None:
    history = _history(("cell", "a = [1]; k = 5"), ("cell", "a.append(2)"), ("cell", "b = 0"))
    ids = [e.id for e in history.entries()]
    # this worker ran only "b = 0"; the first cell can be replayed after it (no shared name)
    plan = _plan(history, "print(a, k)", executed=[ids[2]])
    assert len(plan.run) == 2 and not plan.conflict
    # it ran "a.append(2)" (a shipped from the notebook): a is here, and the first cell is
    # not needed for it; it is for k, and replaying it now would undo the append
    assert not _plan(history, "print(a)", executed=[ids[1]]).run
    plan = _plan(history, "print(k)", executed=[ids[1]])
    assert "'a = [1]; k = 5' is needed now" in plan.conflict and "uses a too" in plan.conflict
