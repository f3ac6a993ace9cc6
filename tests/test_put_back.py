"""The worker's put-back around a run that repeats the notebook's work (warm-ups, ``--repeat``,
a drill-down's re-run): ``shared_state/worker_side.WorkerState.kept``, on a real worker state in
this process. Plain vs profiled, through real workers, is tests/differential's (its
``repeat-*`` cases); here what those cannot show: an object the notebook cannot share with the
worker (a lock among its attributes) is put back too, and the repeats of one capture share one
look (``one_look``) and leave what the look knew as a single ``kept()`` leaves it."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest

from nsight_magic.shared_state import worker_side
from nsight_magic.shared_state.worker_side import WorkerState


class Box:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n = 0
        self.items = [1]


def _run(ns: dict[str, Any]) -> None:
    """What a repeated cell does: rebinds an attribute, appends inside one, adds one, binds
    and deletes names, changes a shared list."""
    box = ns["box"]
    box.n += 1
    box.items.append(box.n)
    box.extra = "made"
    ns["made"] = [box.n]
    ns["hits"].append(1)
    del ns["gone"]


def _namespace() -> dict[str, Any]:
    return {"__name__": "__main__", "box": Box(), "hits": [], "gone": 5}


@pytest.mark.parametrize("shared", [False, True], ids=["each-looks", "one-look"])
def test_every_repeat_is_put_back_what_cannot_be_shared_too(shared: bool) -> None:
    ns = _namespace()
    box, hits, items, lock = ns["box"], ns["hits"], ns["box"].items, ns["box"].lock
    state = WorkerState(ns)
    with state.one_look() if shared else contextlib.nullcontext():
        for _ in range(3):
            with state.kept():
                _run(ns)
        _run(ns)  # the last repeat: the notebook's one run
    assert ns["box"] is box and box.lock is lock and box.items is items and ns["hits"] is hits
    assert (box.n, box.items, box.extra, ns["made"], hits) == (1, [1, 1], "made", [1], [1])
    assert "gone" not in ns


def test_one_look_looks_once_and_forgets_what_the_runs_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = _namespace()
    state = WorkerState(ns)
    looks = []
    real = worker_side.WorkerState._look
    monkeypatch.setattr(worker_side.WorkerState, "_look",
                        lambda self: looks.append(1) or real(self))  # fmt: skip
    with state.one_look():
        for _ in range(4):
            with state.kept():
                _run(ns)
        shared_keys = set(state.graph.table)
    assert len(looks) == 1
    # what the look gave keys to (the notebook never had it) goes once the capture ends, as
    # one kept() alone forgets it; nothing the runs made is kept alive between them
    assert set(state.graph.table) <= shared_keys
    assert not [k for k in state.graph.table if k not in state.graph.prints]


def test_a_run_that_raises_keeps_its_changes_and_the_next_one_looks_again() -> None:
    ns = _namespace()
    state = WorkerState(ns)
    with state.one_look():
        with pytest.raises(ValueError), state.kept(keep_on_error=True):
            _run(ns)
            raise ValueError("the cell's own error")
        assert ns["box"].n == 1 and "gone" not in ns  # the run that raised is the cell's
        ns["gone"] = 6
        with state.kept():
            _run(ns)
    assert ns["box"].n == 1 and ns["gone"] == 6 and ns["hits"] == [1]


class Guarded(Box):
    """An attribute its ``__setattr__`` refuses once set (as some libraries' objects do), set
    first, so the others come after it."""

    def __init__(self) -> None:
        self.frozen = "set once"
        super().__init__()

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "frozen" and "frozen" in vars(self):
            raise AttributeError("frozen is read-only")
        super().__setattr__(name, value)


def test_an_attribute_that_refuses_does_not_stop_the_others() -> None:
    ns = _namespace()
    ns["box"] = box = Guarded()
    state = WorkerState(ns)
    with state.kept():
        vars(box)["frozen"] = "changed behind its back"
        box.n = 7
        box.items = ["rebound"]
        ns["hits"].append(1)
    assert (box.n, box.items, ns["hits"]) == (0, [1], [])
    assert box.frozen == "changed behind its back"  # refused, and said by nothing: left as is
