"""One conversation per worker (issue 58 item 1): every request the notebook makes of a worker
is built in ``worker/conversation.py`` and waits under one deadline. Here: that no other module
of the session builds one (read from the code), and how a request's wait is chosen (the
conversation's own logic, against a transport that records what it is handed; the requests
themselves are served by real workers in the session tests)."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

from nsight_magic.shared_state.project_code import project_paths
from nsight_magic.worker.conversation import BOUNDS, Conversation
from nsight_magic.worker.process import Reply

PACKAGE = Path(__file__).resolve().parent.parent / "nsight_magic"


def _requests_built(path: Path) -> set[int]:
    """The lines of ``path`` that call ``.request(...)`` or write a dict with an ``"op"`` key."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value == "op" for k in node.keys
        ):
            lines.add(node.lineno)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "request"):  # fmt: skip
            lines.add(node.lineno)
    return lines


def test_only_the_conversation_builds_a_request() -> None:
    """In the session and the worker package; the worker's own replies (``worker/serve.py``:
    its hello) and the transport's goodbye (``worker/process.py``: ``exit`` when a worker is
    stopped) aside."""
    builders = {
        path.relative_to(PACKAGE).as_posix(): lines
        for folder in ("session", "worker")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        if (lines := _requests_built(path))
    }
    assert set(builders) == {"worker/conversation.py", "worker/serve.py", "worker/process.py"}, (
        builders
    )
    assert len(builders["worker/process.py"]) == 1  # stop()'s exit


class _Transport:
    """What a ``WorkerProcess`` is handed: each message and how long it may wait."""

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], float | None, Any]] = []

    def request(self, message: dict[str, Any], *, timeout: float | None = None,
                cancel: Any = None, on_line: Any = None) -> Reply:  # fmt: skip
        self.sent.append((message, timeout, cancel))
        return Reply({"ok": True}, wall_s=0.25)


def _without_path(message: dict[str, Any]) -> dict[str, Any]:
    """The request without the notebook's project code (sys.path, modules' prints)."""
    return {k: v for k, v in message.items() if k not in ("sys_path", "project_modules")}


def test_each_request_waits_under_the_deadline_or_its_own_bound() -> None:
    transport = _Transport()
    cancel = threading.Event()
    answered: list[str] = []
    left = [5.0]
    talk = Conversation(transport, timeout=lambda: left[0], cancel=cancel,
                        on_reply=lambda op, reply: answered.append(op))  # fmt: skip
    talk.load("/run/script.py", cwd="/nb")
    talk.imports(["torch"], {})
    talk.send_back("/run/results.pkl", 7.5, 1000)  # its bound_s is the worker's, sent as a field
    left[0] = 400.0  # later in a long cell: the imports' own bound is the sooner
    talk.imports(["numpy"], {})
    # every request carries the notebook's project folders on sys.path (project_paths.py)
    assert all(m["sys_path"] == project_paths() for m, _, _ in transport.sent)
    # and before a cell (load, imports, receive) its project modules' code as loaded
    assert [m["op"] for m, _, _ in transport.sent if "project_modules" in m] == ["load", "imports",
                                                                         "imports"]  # fmt: skip
    messages = [(_without_path(m), t) for m, t, _ in transport.sent]
    assert messages == [
        ({"op": "load", "script": "/run/script.py", "cwd": "/nb"}, 5.0),
        ({"op": "imports", "modules": ["torch"], "attributes": {}}, 5.0),
        ({"op": "send_back", "path": "/run/results.pkl", "bound_s": 7.5, "max_bytes": 1000}, 5.0),
        ({"op": "imports", "modules": ["numpy"], "attributes": {}}, BOUNDS.imports_s),
    ]
    assert all(c is cancel for _, _, c in transport.sent) and answered == [
        "load", "imports", "send_back", "imports"]  # fmt: skip


def test_after_a_stop_the_conversation_is_bound_by_state_timeout_and_not_cancelled() -> None:
    transport = _Transport()
    talk = Conversation(transport, timeout=lambda: 0.0, cancel=threading.Event())
    after = talk.after_stop(60.0)
    after.agreed(None)
    message, timeout, cancel = transport.sent[-1]
    assert _without_path(message) == {"op": "agreed", "path": None}
    assert timeout == 60.0 + BOUNDS.after_stop_margin_s and cancel is None
    # a prewarm's conversation: no deadline but the requests' own
    idle = Conversation(transport)
    idle.status()
    idle.receive("/run/shared.pkl", ["b", "a"])
    assert [t for _, t, _ in transport.sent[-2:]] == [BOUNDS.status_s, None]
    assert _without_path(transport.sent[-1][0]) == {"op": "receive", "path": "/run/shared.pkl",
                                     "theirs": ["b", "a"]}  # fmt: skip
