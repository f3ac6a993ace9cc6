"""Every differential case (diff_cases.py): its cells run plainly and through the magics
(bare backends: real workers, no profiler), compared after each cell (README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from diff_cases import CASES
from diff_harness import Case, Zygote, compare, run_case


def test_the_cases_are_many_and_named_once() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 80


@pytest.mark.parametrize("case", [case.param() for case in CASES])
def test_case(case: Case, zygote: Zygote, tmp_path: Path) -> None:
    dumps = run_case(zygote, list(case.cells), case.files, tmp_path)
    compare(list(case.cells), dumps, case.declared)


# a training step, a warm-up under no_grad, a scheduler (torch.ops reads as a module '_ops.py'):
# nothing of the process changed, so nothing is said (a line on every cell would be noise)
QUIET_TORCH = [
    "import torch\nm = torch.nn.Linear(2, 2)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
    "sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)",
    "%%nsys\nloss = m(torch.ones(2)).sum()\nloss.backward()\nopt.step()\nsched.step()",
    "%%nsys --warmup 1\nwith torch.no_grad():\n    y = torch.ops.aten.add(m(torch.ones(2)), 1)",
]


def test_a_training_step_changes_no_process_state(zygote: Zygote, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    dumps = run_case(zygote, QUIET_TORCH, {}, tmp_path)
    assert "y" in dumps["profiled"][-1]["names"]  # the cells ran
    said = [n for cell in dumps["profiled"] for n in cell.get("notices") or []]
    assert not [n for n in said if "process state" in n], said


# a notebook object of a module only the notebook has (made at run time, or whose folder the
# worker cannot see): the worker cannot make it
GHOST = ("import types, sys\nm = types.ModuleType('ghost')\n"
         "exec('class G:\\n    pass', m.__dict__)\n"
         "m.G.__module__ = 'ghost'\nsys.modules['ghost'] = m\ng = m.G()\nclass H:\n    pass\n"
         "g.h = H()\nholds = [m.G()]\nclass B:\n    pass\nb = B()\ng2 = m.G()\ng2.b = b\n"
         "b.parent = g2")  # fmt: skip


def test_a_name_the_worker_cannot_make_is_said_once_and_truly(zygote: Zygote, tmp_path: Path
                                                              ) -> None:  # fmt: skip
    """Said once per worker, with the real reason every time (the second message referred to
    an object the worker never made: "the other side referred to object 1, not here"), and
    again to a cell that reads it; the notebook's own value untouched."""
    cells = [GHOST, "%%nsys\ny = 1", "%%nsys\ny = 2", "%%ncu\ny = 3", "%%nsys\nprint(type(g))"]
    dumps = run_case(zygote, cells, {}, tmp_path)
    said = [[n for n in cell.get("notices") or [] if "could not take" in n]
            for cell in dumps["profiled"]]  # fmt: skip
    assert [len(s) for s in said] == [0, 1, 0, 1, 1], said
    assert all("No module named 'ghost'" in s[0] for s in said if s)
    # a list of one (its item not made) is not bound as an empty list without a word
    assert "holds:" in said[1][0] and "holds:" in said[3][0], said
    # nor one whose making made the other half of a cycle (b.parent is g2): b fails for g2
    assert "b: it could not be made here (ModuleNotFoundError" in said[1][0], said
    assert "referred to object" not in json.dumps(dumps["profiled"])
    compare(cells[:4], {side: dumps[side][:4] for side in dumps})


def test_a_name_the_worker_could_not_make_comes_whole_later(zygote: Zygote, tmp_path: Path) -> None:
    """What the name reaches through its object's own (``g.h``) was forgotten with it as the
    worker's: once the worker can import the module, ``g`` arrives with ``g.h``."""
    cells = [GHOST, "%%nsys\ny = 1",
             "open('ghost.py', 'w').write('class G:\\n    pass\\n')",
             "%%nsys\nprint(type(g.h).__name__, len(holds), b.parent.b is b)"]  # fmt: skip
    dumps = run_case(zygote, cells, {}, tmp_path)
    assert dumps["profiled"][-1]["stdout"] == "H 1 True\n"
    compare(cells, dumps)
