"""The setup-cell registry and its replay by the generated script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from session_support import script_for as build_script

from nsight_magic.session.history import SetupRegistry


def test_registry_order_replace_and_clear() -> None:
    reg = SetupRegistry()
    assert "No setup cells" in reg.describe()
    reg.add("import math")
    reg.add("x = 1", name="data")
    reg.add("import math")  # same cell re-run: not duplicated
    reg.add("x = 2", name="data")  # same name: replaced in place
    assert reg.sources() == ["import math", "x = 2"]
    text = reg.describe()
    assert "[1]" in text and "[2] (data)" in text and "x = 2" in text
    assert reg.clear() == 2 and len(reg) == 0


def test_setup_cells_replay_in_order_before_the_cell(tmp_path: Path) -> None:
    reg = SetupRegistry()
    reg.add("order = ['a']")
    reg.add("order.append('b')\nimport math")
    script = tmp_path / "s.py"
    script.write_text(
        build_script("order.append('cell')\nprint(order, math.pi > 3)", setup_cells=reg.sources())
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['a', 'b', 'cell'] True"


def test_setup_cell_error_points_at_the_setup_cell(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(build_script("x = 1", setup_cells=["ok = 1", "y = 1\nundefined_name"]))
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "st.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    status = json.loads((tmp_path / "st.json").read_text())
    assert status["phase"] == "setup" and status["exc_type"] == "NameError"
    assert 'File "<nsight_magic setup cell 2>", line 2' in status["traceback"]
