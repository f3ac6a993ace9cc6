"""Every frame of a notebook cell names that cell and line (issue 42, item 3): functions and
classes the notebook sends a worker by value keep their cell (cloudpickle would name their
file ``<dynamic-code>``): ``setup 'gpt' L3 forward`` for a setup cell's, ``In [k] L2 helper``
for an ordinary cell's, in the worker's tracebacks (a real worker, on the CPU, with cells run
by a real IPython shell) and in the Python samples and idle causes of a real report."""

from __future__ import annotations

from pathlib import Path

import pytest
from session_support import BareBackend

from nsight_magic.errors import CellFailedError
from nsight_magic.magic.magics import _code_files
from nsight_magic.script import prepare_cell
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks
from nsight_magic.vocabulary.code_files import frame_label

DATA = Path(__file__).parent / "data"

HELPER = """\
def helper(x):
    return x.missing_attribute
"""
SETUP = """\
class Model:
    def forward(self, x):
        return helper(x) + 1

model = Model()
"""


def test_a_frame_names_its_cell_line_and_function() -> None:
    assert frame_label("<nsight_magic setup 3: gpt>", 15, "forward") == "setup 'gpt' L15 forward"
    assert frame_label("<nsight_magic In [7]>", 2, "helper") == "In [7] L2 helper"
    assert frame_label("<nsight_magic In [7]>", 2, "<module>") == "In [7] L2"
    assert frame_label("<nsight_magic cell>", 4, "<module>") == "cell L4"
    assert frame_label("<nsight_magic cell>", 4, "step") == "cell L4 step"
    # a run saved before file names were kept: which cell is lost, never a file of that name
    assert frame_label("<dynamic-code>", 15, "forward") == "notebook cell L15 forward"
    assert frame_label("/x/site-packages/torch/nn/module.py", 9, "f") == "module.py:9 f"


def test_the_worker_traceback_names_the_setup_cell_and_the_ordinary_cell(
    ip, manager: SessionManager, tmp_path: Path
) -> None:
    count = ip.execution_count
    assert ip.run_cell(HELPER, store_history=True).success  # an ordinary cell: In [count]
    notebook = Notebook(user_ns=ip.user_ns, code_files=_code_files(ip))
    # as %%nsight_setup runs it: recorded, then run by the shell inside the magic's cell
    manager.notebook = notebook
    assert manager.run_setup(
        "gpt", prepare_cell(SETUP), lambda: ip.run_cell(SETUP, store_history=False).success
    )
    request = CellRequest(cell="y = 1\nmodel.forward(2)", runs_root=tmp_path / "runs",
                          cwd=str(tmp_path))  # fmt: skip
    with pytest.raises(CellFailedError) as failed:
        manager.profile(request, BareBackend(), notebook=notebook,
                        callbacks=RunCallbacks(output=lambda _: None))  # fmt: skip
    text = str(failed.value)
    assert 'File "<nsight_magic cell>", line 2, in <module>' in text
    setup_file = next(e.filename for e in manager.history.entries() if e.kind == "setup")
    assert setup_file.endswith(": gpt>")
    assert f'File "{setup_file}", line 3, in forward' in text
    assert "return helper(x) + 1" in text  # the setup cell's line, from the notebook
    assert f'File "<nsight_magic In [{count}]>", line 2, in helper' in text
    assert "return x.missing_attribute" in text
    assert "<dynamic-code>" not in text


def test_a_sample_through_sent_code_names_cells_and_the_loader_fixture_keeps_cell_lines() -> None:
    """A Python sample's payload as nsys 2025.3 writes it (reports/nsys/host.py: Function and
    File as string ids, innermost first) through a setup cell's method and an ordinary cell's
    function; and the real loader report's frames of the profiled cell."""
    import json

    from nsight_magic.reports import open_report
    from nsight_magic.reports.nsys.host import frames_of

    strings = {1: "helper", 2: "<nsight_magic In [4]>", 3: "forward", 5: "<module>",
               4: "<nsight_magic setup 2: gpt>", 6: "<nsight_magic cell>"}  # fmt: skip
    payload = {"Python Periodic Sampling": {"Frames count": 3, "Frames": [
        {"Function": 1, "File": 2, "Line": 2}, {"Function": 3, "File": 4, "Line": 15},
        {"Function": 5, "File": 6, "Line": 3}]}}  # fmt: skip
    user, back = frames_of(json.dumps(payload), lambda v: strings.get(v, str(v)))  # type: ignore[call-overload]
    assert user == "In [4] L2 helper"
    assert back == "In [4] L2 helper < setup 'gpt' L15 forward < cell L3"
    frames = open_report(DATA / "nsys_train_loader.sqlite").python_samples()["frame"]
    assert frames.str.fullmatch(r"cell L\d+").any()
    assert not frames.str.contains("<nsight_magic|<dynamic-code>").any()
