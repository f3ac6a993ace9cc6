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
