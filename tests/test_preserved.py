"""A run that repeats work the notebook already has (warm-ups, a drill-down's re-run, a replayed
profiled cell) leaves what the worker received as it was, whatever the cell's text hides in a
call (issue 41): ``shared_objects.preserved`` on the CPU (the CUDA copies need a GPU:
tests/gpu), where the snapshot goes for given memory figures, and with the real worker a
``%%nsys --warmup 2`` of ``loss = train_step()`` that steps the model once."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from session_support import BareBackend

from nsight_magic.script import prepare_cell
from nsight_magic.script.cuda_save import snapshot_place
from nsight_magic.script.shared_objects import TABLE, preserved
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks
from nsight_magic.session.state.notebook_snapshot import fits, kept_objects

torch = pytest.importorskip("torch")

GiB = 1 << 30

TRAINING = textwrap.dedent("""\
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.0),
                                torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    counter = torch.zeros((), dtype=torch.int64)
    data = torch.randn(32, 8)

    def train_step():
        model.train()
        loss = model(data).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        for group in opt.param_groups:
            group["lr"] *= 0.5
        counter.add_(1)
        model.eval()
        return loss.item()
""")


def test_a_snapshot_goes_to_the_device_only_with_room_and_a_margin() -> None:
    # 80 GiB card: the margin is 5 % (4 GiB), larger than 1 GiB
    assert snapshot_place(40 * GiB, free=45 * GiB, total=80 * GiB, host_available=None) == "device"
    assert snapshot_place(40 * GiB, free=43 * GiB, total=80 * GiB, host_available=None) == "staged"
    # a small card: the 1 GiB margin is the larger one
    assert snapshot_place(2 * GiB, free=3 * GiB, total=8 * GiB, host_available=0) == "device"
    assert snapshot_place(2 * GiB, free=3 * GiB - 1, total=8 * GiB, host_available=0) == "host"
    # not on the device: staged while it takes at most 3/4 of what the host has available
    assert snapshot_place(43 * GiB, free=0, total=80 * GiB, host_available=60 * GiB) == "staged"
    assert snapshot_place(43 * GiB, free=0, total=80 * GiB, host_available=50 * GiB) == "host"


def _table(ns: dict[str, Any]) -> dict[str, Any]:
    """The worker's table as ``receive`` leaves it: each tracked object under a key."""
    ns[TABLE] = {i: ns[name] for i, name in enumerate(("model", "opt", "counter", "data"), 1)}
    return ns


def _state(ns: dict[str, Any]) -> dict[str, Any]:
    opt = ns["opt"]
    index = {p: i for i, p in enumerate(ns["model"].parameters())}
    return {
        "params": [p.detach().clone() for p in ns["model"].parameters()],
        "grads": [p.grad for p in ns["model"].parameters()],
        "state": {index[p]: {k: v.clone() for k, v in s.items()} for p, s in opt.state.items()},
        "state_ids": {index[p]: id(s) for p, s in opt.state.items()},
        "groups": [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups],
        "counter": ns["counter"].clone(),
        "training": [m.training for m in ns["model"].modules()],
    }


def _assert_same(before: dict[str, Any], after: dict[str, Any], same_objects: bool = True) -> None:
    assert all(torch.equal(a, b) for a, b in zip(before["params"], after["params"], strict=True))
    assert after["grads"] == before["grads"]  # None before and after: no stray gradient
    assert after["state"].keys() == before["state"].keys(), "no state entry added or dropped"
    if same_objects:  # each parameter's state dict is the one it was
        assert after["state_ids"] == before["state_ids"]
    for key, entry in before["state"].items():
        assert entry.keys() == after["state"][key].keys()
        assert all(torch.equal(v, after["state"][key][k]) for k, v in entry.items())
    assert after["groups"] == before["groups"]
    assert torch.equal(after["counter"], before["counter"])
    assert after["training"] == before["training"]


def test_the_notebook_copies_a_re_runs_state_itself_only_with_room_for_ncu_beside_it() -> None:
    """A drill-down's whole-state copy in the notebook (notebook_snapshot.py): room for the copy,
    for ncu's backup of the same bytes the worker maps, 2 GiB for the worker and the margin.
    The 34.19 GB training state of the acceptance: on an H200 (150.1 GB by torch) with the
    notebook's ~36 GB and three idle workers' ~3 GB taken, yes; on an 80 GB H100, no (the
    worker stages it through host memory, as before)."""
    need = 34_189_575_972
    assert fits(need, free=int(150.1e9 - 36e9 - 3e9), total=int(150.1e9))
    assert not fits(need, free=int(80e9 - 36e9 - 3e9), total=int(80e9))
    # the exact bound: 2 x need + 2 GiB + 5 % of the card
    total = 100 * GiB
    bound = 2 * (10 * GiB) + 2 * GiB + 5 * GiB
    assert fits(10 * GiB, free=bound, total=total) and not fits(10 * GiB, bound - 1, total)


def test_the_notebook_copies_what_the_re_run_may_change_and_every_received_modules_buffers() -> (
    None
):
    """What the notebook copies for the worker (``kept_objects``) is what ``preserved`` would
    keep of the memory it maps: the objects of the names the cell may change, and the buffers
    of every module the worker received (batch-norm statistics a forward in training mode
    updates); everything it received for ``["*"]``."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    frozen = torch.nn.BatchNorm1d(4)
    opt, data = torch.optim.AdamW(model.parameters()), torch.randn(8, 4)
    user_ns = {"model": model, "opt": opt, "data": data, "frozen": frozen, "torch": torch}
    sent = [model, opt, data, frozen]
    got = kept_objects(["model", "opt", "gone"], user_ns, sent)
    assert got[:2] == [model, opt]
    buffers = [*model.buffers(), *frozen.buffers()]
    assert len(got) == 2 + len(buffers)
    assert all(a is b for a, b in zip(got[2:], buffers, strict=True))
    assert kept_objects(["*"], user_ns, sent) is sent


@pytest.mark.parametrize("skip_mapped", [False, True], ids=["worker-keeps-all", "notebook-keeps"])
@pytest.mark.parametrize("stepped_before", [False, True], ids=["no-state-yet", "with-state"])
def test_a_training_step_hidden_in_a_function_is_undone(
    stepped_before: bool, skip_mapped: bool
) -> None:
    """``skip_mapped`` (the notebook keeps the memory the worker maps): what the worker keeps
    itself, the Python-side state and CPU tensors here, is undone all the same."""
    ns: dict[str, Any] = {}
    exec(TRAINING, ns)
    if stepped_before:  # the optimizer has state (step, moments) the re-run must not advance
        ns["train_step"]()
    _table(ns)
    before = _state(ns)
    with preserved(ns, ["*"], skip_mapped=skip_mapped):
        ns["train_step"]()
        ns["train_step"]()
    _assert_same(before, _state(ns))
    # and the step after is the notebook's next one: as from an untouched copy
    twin: dict[str, Any] = {}
    exec(TRAINING, twin)
    if stepped_before:
        twin["train_step"]()
    assert ns["train_step"]() == twin["train_step"]()
    _assert_same(_state(twin), _state(ns), same_objects=False)


def test_the_run_the_notebook_asked_for_keeps_its_effects() -> None:
    """``active=False`` (the captured run of the notebook's own cell): nothing is put back."""
    ns: dict[str, Any] = {}
    exec(TRAINING, ns)
    _table(ns)
    with preserved(ns, None, active=False):
        ns["train_step"]()
    assert int(ns["counter"]) == 1 and len(ns["opt"].state) == 4


def test_a_reading_cell_keeps_state_and_buffers_but_copies_no_weights() -> None:
    """``names`` None (the text only reads, ``y = model(x)``): the received objects' Python
    state and CPU tensors still come back, and no CUDA weight is copied (the CPU here: the
    counter is a CPU tensor, kept like every CPU tensor)."""
    ns: dict[str, Any] = {}
    exec(TRAINING, ns)
    _table(ns)
    with preserved(ns, None):
        ns["train_step"]()
    assert int(ns["counter"]) == 0 and len(ns["opt"].state) == 0


def test_a_rebound_optimizer_state_and_module_attributes_come_back() -> None:
    """``load_state_dict`` rebinds ``opt.state`` and ``param_groups``; a re-run that replaces
    a parameter or flips a flag: the objects the notebook's names hold come back."""
    ns: dict[str, Any] = {}
    exec(TRAINING, ns)
    ns["train_step"]()
    _table(ns)
    opt, model = ns["opt"], ns["model"]
    state, groups, weight = opt.state, opt.param_groups, model[0].weight
    before = _state(ns)
    with preserved(ns, ["*"]):
        opt.load_state_dict(opt.state_dict())
        model[0].weight = torch.nn.Parameter(torch.zeros(16, 8))
        model.train()
    assert opt.state is state and opt.param_groups is groups and model[0].weight is weight
    _assert_same(before, _state(ns))


@pytest.fixture
def manager():  # type: ignore[no-untyped-def]
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def test_a_warmed_up_cell_trains_the_model_once(manager: SessionManager, tmp_path: Path) -> None:
    """``%%nsys --warmup 2`` of ``loss = train_step()`` (its text changes nothing visibly): the
    worker's model, optimizer and counter end one step on, bit for bit as one step run without
    the profiler (before: three steps, the warm-ups' too)."""
    ns: dict[str, Any] = {}
    manager.notebook = Notebook(user_ns=ns)
    setup = prepare_cell(TRAINING)
    assert manager.run_setup("train", setup, lambda: exec(setup.code, ns) is None)

    def profile(cell: str, warmup: int = 0) -> list[str]:
        out: list[str] = []
        request = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path),
                              warmup=warmup)  # fmt: skip
        result = manager.profile(request, BareBackend(), notebook=Notebook(user_ns=ns),
                                 callbacks=RunCallbacks(output=out.append))  # fmt: skip
        assert result.report["status"] == "ok", (result.report, out)
        return out

    profile("loss = train_step()", warmup=2)
    saved = tmp_path / "worker_state.pt"
    profile(
        f"torch.save({{'model': model.state_dict(), 'opt': opt.state_dict(), "
        f"'counter': counter}}, {str(saved)!r})"
    )
    got = torch.load(saved)
    ref: dict[str, Any] = {}  # the same one step, in a notebook of its own, without a profiler
    exec(setup.code, ref)
    ref["train_step"]()
    # the worker's state, the notebook's (the profiled run's results came back) and the
    # reference's: one step each
    assert int(got["counter"]) == int(ns["counter"]) == int(ref["counter"]) == 1
    assert all(torch.equal(p, q) for p, q in
               zip(ns["model"].parameters(), ref["model"].parameters(), strict=True))  # fmt: skip
    ns = ref
    want = ns["model"].state_dict()
    assert got["model"].keys() == want.keys()
    assert all(torch.equal(got["model"][k], want[k]) for k in want)
    want_opt = ns["opt"].state_dict()
    assert got["opt"]["param_groups"] == want_opt["param_groups"]
    assert got["opt"]["state"].keys() == want_opt["state"].keys()
    for i, entry in want_opt["state"].items():
        assert all(torch.equal(got["opt"]["state"][i][k], v) for k, v in entry.items())


def test_a_name_a_received_function_reads_is_found_in_its_own_globals() -> None:
    """cloudpickle sends a notebook function with the globals its code reads in a dict of its
    own, so ``loss = train_step()`` leaves ``counter`` unbound in the worker: the names a run
    may change (``repeat_changes.changed_names``) are found there, through the notebook functions it
    calls in turn (on the H200 a warm-up of ``train_step()`` stepped the counter twice when
    only the worker's namespace was looked at)."""
    import cloudpickle

    from nsight_magic.script.shared_objects import named_objects

    notebook: dict = {"__name__": "__main__"}
    exec(
        "import torch\ncounter = torch.zeros(())\nweights = [1.0]\n"
        "def helper():\n    weights.append(2.0)\n"
        "def train_step():\n    counter.add_(1)\n    helper()\n",
        notebook,
    )
    worker_fn = cloudpickle.loads(cloudpickle.dumps(notebook["train_step"]))
    assert worker_fn.__globals__ is not notebook and "counter" in worker_fn.__globals__
    ns = {"train_step": worker_fn, "other": 3}
    found = named_objects(ns, ["counter", "weights", "other", "absent"])
    helper_globals = worker_fn.__globals__["helper"].__globals__
    want = [ns["other"], worker_fn.__globals__["counter"], helper_globals["weights"]]
    assert sorted(map(id, found)) == sorted(map(id, want))  # "absent" is in no scope here
