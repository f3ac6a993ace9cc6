"""--vars shipping: values reach a real child script with type, dtype and contents kept.

torch is optional: the tests that ship tensors skip without it (``pytest.importorskip`` inside
them); this module imports the package's own modules directly, so an import error still fails."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from session_support import script_for as build_script

from nsight_magic.errors import NsightMagicError, UnpicklableVariableError
from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.session import variables as shipping

torch = pytest.importorskip("torch")  # the dependency-matrix venvs have no torch


def notebook_ns() -> dict:
    """A namespace like a notebook's: classes and functions defined in ``__main__``."""
    ns: dict = {"__name__": "__main__"}
    exec(
        "import torch\n"
        "class Scale(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.w = torch.nn.Parameter(torch.full((3,), 2.0))\n"
        "    def forward(self, x):\n"
        "        return x * self.w\n"
        "def square(v):\n"
        "    return v * v\n"
        "model = Scale()\n"
        "t16 = torch.arange(6, dtype=torch.float16).reshape(2, 3)\n"
        "cfg = {'steps': 3, 'fn': square, 'lam': lambda q: q + 1}\n",
        ns,
    )
    return ns


def test_vars_reach_the_script_with_dtypes_and_classes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    ns = notebook_ns()
    blob = shipping.pack_vars(shipping.parse_names("model, t16,cfg"), ns)
    RunDir(tmp_path).write_vars(blob)
    cell = (
        "print(type(model).__name__, t16.dtype, t16.device, tuple(t16.shape))\n"
        "print(model(torch.ones(3)).tolist())\n"
        "print(cfg['steps'], cfg['fn'](4), cfg['lam'](1))\n"
    )
    script = tmp_path / "script.py"
    script.write_text(build_script(cell, setup_cells=["import torch"]))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd="/"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "Scale torch.float16 cpu (2, 3)",
        "[2.0, 2.0, 2.0]",
        "3 16 2",
    ]


def test_load_vars_keeps_tensor_values(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    ns = {"x": torch.tensor([1.5, -2.0], dtype=torch.float64), "n": 7}
    path = RunDir(tmp_path).write_vars(shipping.pack_vars(["x", "n"], ns))
    back = shipping.load_vars(path)
    assert back["x"].dtype == torch.float64 and back["x"].tolist() == [1.5, -2.0]
    assert back["n"] == 7
    assert shipping.serialize("x", ns["x"])[0] == "torch"
    assert shipping.serialize("n", 7)[0] == "pickle"


@pytest.mark.parametrize("value", [threading.Lock(), (i for i in range(3))])
def test_unpicklable_names_the_variable_and_suggests_setup(value: object) -> None:
    with pytest.raises(UnpicklableVariableError) as info:
        shipping.pack_vars(["handle"], {"handle": value})
    msg = str(info.value)
    assert "'handle'" in msg and "%%nsight_setup" in msg


def test_unknown_or_bad_names() -> None:
    with pytest.raises(NsightMagicError, match="not defined"):
        shipping.pack_vars(["missing"], {})
    with pytest.raises(NsightMagicError, match="not a variable name"):
        shipping.parse_names("a, 1b")
    assert shipping.parse_names(" a,b ,a,") == ["a", "b"]
