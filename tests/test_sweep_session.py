"""A sweep (issue 44) through the real session on the CPU: the real worker with no profiler
(``session_support.BareBackend``), so every configuration is an ordinary warm run of the cell.
Each configuration gets its values bound before the cell, starts from the notebook's state and
leaves it as it was (a training step swept 3 times trains the notebook's model 0 times), a
configuration that raises is a row with its error while the next one runs, and Cancel stops the
sweep after the configuration that runs."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from session_support import BareBackend

from nsight_magic.errors import CellFailedError
from nsight_magic.processes.progress import Progress
from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.script import prepare_cell
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.runs.sweep import SweepSpec, parse_sweep_option
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks


@pytest.fixture
def manager():  # type: ignore[no-untyped-def]
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def _sweep(manager: SessionManager, tmp_path: Path, ns: dict[str, Any], cell: str,
           spec: SweepSpec, **callbacks: Any) -> tuple[Any, list[str]]:  # fmt: skip
    out: list[str] = []
    request = CellRequest(cell=cell, name="sw", runs_root=tmp_path / "runs", cwd=str(tmp_path))
    run = manager.sweep(request, BareBackend(), spec, notebook=Notebook(user_ns=ns),
                        callbacks=RunCallbacks(output=out.append, **callbacks))  # fmt: skip
    return run, out


def _cell(manager: SessionManager, tmp_path: Path, ns: dict[str, Any], cell: str) -> list[str]:
    out: list[str] = []
    request = CellRequest(cell=cell, runs_root=tmp_path / "runs", cwd=str(tmp_path))
    manager.profile(request, BareBackend(), notebook=Notebook(user_ns=ns),
                    callbacks=RunCallbacks(output=out.append))  # fmt: skip
    return out


def test_the_option_reads_values_and_python_literal_lists_never_code() -> None:
    assert parse_sweep_option("bs=1,8,32") == ("bs", (1, 8, 32))
    assert parse_sweep_option("bs=[1, 8, 32]") == ("bs", (1, 8, 32))
    assert parse_sweep_option("act=relu,'gelu',0.5,True") == ("act", ("relu", "gelu", 0.5, True))
    with pytest.raises(ValueError, match="not a Python literal list"):
        parse_sweep_option("bs=[__import__('os').getpid()]")
    for bad in ("bs", "=1,2", "2x=1", "bs=", "bs=3"):
        if bad == "bs=3":
            assert parse_sweep_option(bad) == ("bs", (3,))
            continue
        with pytest.raises(ValueError):
            parse_sweep_option(bad)
    spec = SweepSpec((parse_sweep_option("bs=1,8"), parse_sweep_option("seq=[512, 2048]")))
    assert spec.configs() == [{"bs": 1, "seq": 512}, {"bs": 1, "seq": 2048},
                              {"bs": 8, "seq": 512}, {"bs": 8, "seq": 2048}]  # fmt: skip
    with pytest.raises(ValueError, match="swept twice"):
        SweepSpec((("bs", (1,)), ("bs", (2,))))


def test_each_configuration_gets_its_value_and_the_notebooks_state_is_kept(
    manager: SessionManager, tmp_path: Path
) -> None:
    ns: dict[str, Any] = {"counter": [0], "hits": [], "bs": 4}
    cell = "counter[0] += 1\nhits.append(bs)\nprint('ran', bs, counter[0], len(hits))\nout = bs"
    states: list[str] = []
    sweep, out = _sweep(manager, tmp_path, ns, cell, SweepSpec((("bs", (1, 8, 32)),)),
                        progress=lambda p: states.append(p.describe()))  # fmt: skip
    # each configuration saw its own value and the notebook's state as it was before the sweep
    assert [line for line in out if line.startswith("ran")] == ["ran 1 1 1", "ran 8 1 1",
                                                                "ran 32 1 1"]  # fmt: skip
    assert ns == {"counter": [0], "hits": [], "bs": 4}  # nothing came back
    assert "nsight_magic: config 2 of 3: bs=8" in out
    assert any("config 3 of 3: bs=32" in state for state in states)
    assert [c.status for c in sweep.record.configs] == ["ok", "ok", "ok"]
    assert list(sweep.runs) == [(1,), (8,), (32,)]
    assert sweep.runs[(8,)].bound_values == {"bs": 8}
    # no configuration joined the notebook's history
    assert [e for e in manager.history.entries() if e.kind == "cell"] == []
    # one folder per configuration inside the sweep's, each an ordinary run folder
    record = json.loads((sweep.run_dir / RunDir.SWEEP).read_text())
    assert [c["folder"] for c in record["configs"]] == ["01-bs_1", "02-bs_8", "03-bs_32"]
    for config in record["configs"]:
        meta = RunDir(sweep.run_dir / config["folder"]).read_meta()
        assert meta.status == "ok" and meta.sweep is not None
        assert meta.brought_back is None
    # the next ordinary cell reads the notebook's bs and state, not the sweep's last
    after = _cell(manager, tmp_path, ns, "print('after', bs, counter[0], len(hits))")
    assert "after 4 0 0" in after


def test_a_configuration_that_raises_is_a_row_and_the_next_still_runs(
    manager: SessionManager, tmp_path: Path
) -> None:
    ns: dict[str, Any] = {}
    cell = "if bs == 8:\n    raise MemoryError('bs 8 does not fit')\nprint('ok', bs)"
    sweep, out = _sweep(manager, tmp_path, ns, cell, SweepSpec((("bs", (1, 8, 32)),)))
    assert [c.status for c in sweep.record.configs] == ["ok", "failed", "ok"]
    error = sweep.record.configs[1].error
    assert error is not None and "MemoryError: bs 8 does not fit" in error
    assert "ok 32" in out and list(sweep.runs) == [(1,), (32,)]
    table_record = json.loads((sweep.run_dir / RunDir.SWEEP).read_text())
    assert table_record["configs"][1]["status"] == "failed"
    assert "bs 8 does not fit" in table_record["configs"][1]["error"]
    # the notebook has no bs: the worker does not keep the sweep's for later cells
    with pytest.raises(CellFailedError, match="NameError"):
        _cell(manager, tmp_path, ns, "print(bs)")


def test_cancel_stops_after_the_configuration_that_runs(
    manager: SessionManager, tmp_path: Path
) -> None:
    cancel = threading.Event()
    ns: dict[str, Any] = {}

    def progress(state: Progress) -> None:
        if "config 1 of 3" in state.detail:
            cancel.set()  # the user presses Cancel while the first one runs

    sweep, out = _sweep(manager, tmp_path, ns, "print('ran', bs)",
                        SweepSpec((("bs", (1, 2, 3)),)), cancel=cancel,
                        progress=progress)  # fmt: skip
    assert [c.status for c in sweep.record.configs] == ["ok", "cancelled", "cancelled"]
    assert "ran 1" in out and "ran 2" not in out


torch = pytest.importorskip("torch")

SETUP = """\
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps = torch.zeros((), dtype=torch.int64)
x = torch.randn(16, 8)

def train_step(scale):
    loss = (model(x) * scale).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    steps.add_(1)
    return loss.detach()
"""


def test_a_swept_training_step_does_not_train_the_notebooks_model(
    manager: SessionManager, tmp_path: Path
) -> None:
    """``loss = train_step(scale)`` swept over 3 scales: each configuration trains from the
    notebook's weights (its loss is the loss of one step from them), and afterwards the
    notebook's model, optimizer and step counter are as before the sweep."""
    ns: dict[str, Any] = {}
    manager.notebook = Notebook(user_ns=ns)
    setup = prepare_cell(SETUP)
    assert manager.run_setup("train", setup, lambda: exec(setup.code, ns) is None)
    weights = [p.detach().clone() for p in ns["model"].parameters()]
    cell = "loss = train_step(scale)\nprint('loss', scale, round(float(loss), 6), int(steps))"
    sweep, out = _sweep(manager, tmp_path, ns, cell, SweepSpec((("scale", (1.0, 2.0, 3.0)),)))
    assert [c.status for c in sweep.record.configs] == ["ok", "ok", "ok"]
    reference = {}
    for scale in (1.0, 2.0, 3.0):
        fresh: dict[str, Any] = {}
        exec(SETUP, fresh)
        reference[scale] = round(float(fresh["train_step"](scale)), 6)
    assert [line for line in out if line.startswith("loss")] == [
        f"loss {s} {reference[s]} 1" for s in (1.0, 2.0, 3.0)
    ]
    assert int(ns["steps"]) == 0 and "loss" not in ns
    for before, now in zip(weights, ns["model"].parameters(), strict=True):
        assert torch.equal(before, now)


def test_the_magic_reads_repeated_sweeps_and_applies_its_options_to_each(
    ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.error import UsageError

    from nsight_magic.session import manager as manager_module

    seen: list[Any] = []

    def sweep(request: Any, backend: Any, spec: Any, **kwargs: Any) -> None:
        seen.append((request, backend.options, spec))

    monkeypatch.setattr(manager_module.MANAGER, "sweep", sweep)
    ip.run_cell_magic("nsight_nsys", '--sweep bs=1,8 --sweep "seq=[512, 2048]" --warmup 1 '
                      "--memory --pytorch shapes", "y = bs * seq")  # fmt: skip
    ((request, options, spec),) = seen
    assert spec.names == ("bs", "seq") and len(spec.configs()) == 4
    assert request.warmup == 1 and options.memory and options.pytorch == "autograd-shapes-nvtx"
    with pytest.raises(UsageError, match="not a Python literal list"):
        ip.run_cell_magic("nsight_nsys", '--sweep "bs=[open(1)]"', "y = bs")
    assert len(seen) == 1


def test_the_python_function_takes_values_and_nsys_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import nsight_magic
    from nsight_magic.errors import BadArgumentError
    from nsight_magic.session import manager as manager_module

    seen: list[Any] = []

    def sweep(request: Any, backend: Any, spec: Any, **kwargs: Any) -> None:
        seen.append((request, backend, spec))

    monkeypatch.setattr(manager_module.MANAGER, "sweep", sweep)
    nsight_magic.sweep("y = bs", {"bs": [1, 8, 32]}, warmup=1, memory=True, name="gemm")
    ((request, backend, spec),) = seen
    assert spec.configs() == [{"bs": 1}, {"bs": 8}, {"bs": 32}]
    assert request.warmup == 1 and request.name == "gemm" and backend.options.memory
    with pytest.raises(BadArgumentError, match="as a list"):
        nsight_magic.sweep("y = bs", {"bs": 8})
    with pytest.raises(BadArgumentError, match="memroy"):
        nsight_magic.sweep("y = bs", {"bs": [8]}, memroy=True)
