"""What each cell writes (script/effects.py), which ``session/state/repeat_changes`` reads to
know what a re-run may change of the shared GPU memory. Pure: cells are parsed as IPython
transforms them, nothing runs.
(Which history a worker replays is no longer sliced from the text: only setup cells whose names
cannot be sent are replayed, tests/test_session_replay.py.)"""

from __future__ import annotations

import pytest

from nsight_magic.script import prepare_cell

MODULES = frozenset({"torch", "np"})


def writes(cell: str) -> frozenset[str]:
    """What the cell binds, or changes in place (``effects.changed``, given the modules)."""
    prepared = prepare_cell(cell)
    return prepared.names_bound | prepared.effects.changed(MODULES)


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
