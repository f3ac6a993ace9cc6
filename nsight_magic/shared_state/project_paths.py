"""The notebook's own ``sys.path`` entries (``sys.path.append('..')``, ``sys.path.insert(0,
'src')``: a project's folders) in every worker, so a notebook that imports its project's
modules that way profiles as it runs: the worker unpickles the notebook's ``helper`` from
``mylib`` and the cell's ``import mylib`` finds it. Without them the worker could not make the
notebook's functions and classes of those modules (``NameError`` in the cell).

Only the entries the notebook added travel: not its interpreter's own (the standard library,
site-packages, a user site), which a worker of another Python (``--python``) must not take, and
not ``''`` (each process's current directory, the same folder). They go with every request
(``worker/conversation.py``); the worker adds the ones it lacks (``follow``), where the
notebook has them: before its interpreter's entries, or after. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import site
import sys
from collections.abc import Sequence


def _interpreters_own() -> tuple[str, ...]:
    """The folders under which ``sys.path`` entries are this interpreter's, not a project's."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    with contextlib.suppress(AttributeError):  # a virtualenv's old site.py
        roots.update(site.getsitepackages())
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if isinstance(user, str):
        roots.add(user)
    return tuple(os.path.join(os.path.abspath(r), "") for r in roots if r)


def project_paths(path: Sequence[str] | None = None) -> list[tuple[str, bool]]:
    """The entries of ``path`` (``sys.path``) the notebook added, each with whether it comes
    before the interpreter's own entries (``insert(0, ...)``) or after (``append``)."""
    path = list(sys.path if path is None else path)
    own = _interpreters_own()

    def is_own(entry: str) -> bool:
        return os.path.join(os.path.abspath(entry), "").startswith(own)

    first_own = next((i for i, entry in enumerate(path) if entry and is_own(entry)), len(path))
    # (an entry that is no file or folder, an editable install's path hook, is no project's)
    return [(entry, i < first_own) for i, entry in enumerate(path)
            if isinstance(entry, str) and entry and not is_own(entry)
            and os.path.exists(entry)]  # fmt: skip


def follow(entries: Sequence[Sequence[object]] | None) -> None:
    """Add the notebook's ``entries`` (``project_paths``) this process's ``sys.path`` lacks:
    the front ones at the front, in the notebook's order, the others at the end."""
    if not entries:
        return
    front = 0
    for item in entries:
        if len(item) != 2 or not isinstance(item[0], str):
            continue
        entry, before = item[0], bool(item[1])
        if entry in sys.path:
            if before:
                front = max(front, sys.path.index(entry) + 1)
            continue
        if before:
            sys.path.insert(front, entry)
            front += 1
        else:
            sys.path.append(entry)
