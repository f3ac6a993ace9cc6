"""Where a result's static copy is built under ``NsightMagic.static_view = "auto"`` (the default):
after its widget in a notebook editor, which names the cell in its execute requests (JupyterLab
and Notebook 7 send ``cellId``), so the cell ends as soon as the widget is up; before the cell
ends for a headless runner (nbclient, papermill), which sends no such metadata and keeps no
output update that comes later. A real ipykernel, sent requests as each frontend sends them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel

CODE = (
    "from nsight_magic.results.display import static_later\n"
    "print(*(static_later(m) for m in ('auto', 'inline', 'background')))"
)


@pytest.fixture(scope="module")
def kernel() -> Iterator[Any]:
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def printed(client: Any, metadata: dict[str, Any]) -> str:
    """What ``CODE`` prints when an execute request carries ``metadata``."""
    content = {"code": CODE, "silent": False, "store_history": False, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}  # fmt: skip
    request = client.session.msg("execute_request", content, metadata=metadata)
    client.shell_channel.send(request)
    out = []
    while True:
        msg = client.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != request["header"]["msg_id"]:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            raise AssertionError("\n".join(msg["content"]["traceback"]))
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(out).strip()


def test_a_notebook_editor_gets_the_widget_first(kernel: Any) -> None:
    # what JupyterLab 4 sends with each cell (CodeCell.execute)
    lab = {
        "deletedCells": [],
        "recordTiming": False,
        "cellId": "5a1e6d5e-0b0b-4c5e-9e4f-1d2c3b4a5f6e",
    }
    assert printed(kernel, lab) == "True False True"


def test_a_headless_runner_gets_the_static_copy_before_the_cell_ends(kernel: Any) -> None:
    assert printed(kernel, {}) == "False False True"  # nbclient and papermill send none
