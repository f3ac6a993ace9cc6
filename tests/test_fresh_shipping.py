"""What a fresh process (``--fresh``, a crashed ncu worker's re-run) gets by value from the
notebook: the names its cell reads, and every name that goes when the cell's text hides what it
reads (``exec("loss = train_step()")``: the H100 acceptance's drill-down of such a cell raised
NameError for ``train_step``)."""

from __future__ import annotations

import pickle

import pytest

from nsight_magic.errors import MissingVariableError
from nsight_magic.script import prepare_cell
from nsight_magic.session.spec import Notebook
from nsight_magic.session.variables import plan_by_value


def _step() -> int:
    return 1


def _notebook() -> Notebook:
    ns = {"train_step": _step, "lr": 0.5, "big": b"x" * 4096, "__name__": "__main__"}
    return Notebook(user_ns=ns, auto_vars_max_bytes=1024)


def test_a_cell_that_names_what_it_reads_gets_those_names_only() -> None:
    plan = plan_by_value(_notebook(), prepare_cell("y = lr * 2").names_read)
    assert set(plan.entries) == {"lr"} and not plan.held_back
    with pytest.raises(MissingVariableError, match="big"):  # read, and over the limit
        plan_by_value(_notebook(), prepare_cell("n = len(big)").names_read).check()


def test_a_cell_whose_text_hides_what_it_reads_gets_every_name_that_goes() -> None:
    plan = plan_by_value(_notebook(), prepare_cell('exec("loss = train_step()")').names_read)
    assert set(plan.entries) == {"train_step", "lr"}
    plan.check()  # big is over the limit, but the text never names it: left out, no error
    kind, blob = plan.entries["train_step"]
    assert kind == "pickle" and pickle.loads(blob)() == 1


def test_a_list_of_tensors_over_the_limit_is_held_back_before_it_is_pickled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A list of a model's tensors (``state = [*params, *ema, *moments]``, 34 GB on the H100)
    was pickled whole to learn its size: the fresh run after the ncu worker's crash sat in it
    until its timeout. Its size is the tensors' own, each tensor's memory once."""
    torch = pytest.importorskip("torch")
    from nsight_magic.session import variables

    weights = [torch.zeros(256) for _ in range(8)]  # 8 kB each
    model = torch.nn.Linear(16, 16)
    ns = {"state": [*weights, *weights, weights[0][:4]], "nested": {"m": [model]}, "lr": 0.5,
          "__name__": "__main__"}  # fmt: skip
    assert variables.estimated_bytes(ns["state"]) == 8 * 1024  # the repeats and the view: once
    assert variables.estimated_bytes(ns["nested"]) == (16 * 16 + 16) * 4
    assert variables.estimated_bytes([1, "a"]) is None  # nothing of known size: pickled to see
    pickled: list[str] = []
    real = variables.serialize
    monkeypatch.setattr(variables, "serialize",
                        lambda name, obj: pickled.append(name) or real(name, obj))  # fmt: skip
    notebook = Notebook(user_ns=ns, auto_vars_max_bytes=4096)
    plan = plan_by_value(notebook, prepare_cell('exec("loss = step(state)")').names_read)
    assert set(plan.entries) == {"lr", "nested"} and "state" not in pickled  # left out
    plan = plan_by_value(notebook, prepare_cell("n = len(state)").names_read)
    assert "8.2 kB" in plan.held_back["state"] and "state" not in pickled  # named: said why
