"""Names a profiled cell's namespace gives meaning to, which the magics and a sweep must never
bind: ``-o NAME`` (the result's variable) and ``--sweep NAME=...`` / ``nsight_magic.sweep``'s
swept names are checked against them before anything runs.

- IPython's own (``user_ns_hidden`` holds them too, when there is a shell): ``In``, ``Out``,
  ``get_ipython``, ``exit``, ``quit``, ``display``, the output and input history (``_``,
  ``__``, ``_3``, ``_i``, ``_ii``, ``_i3``, ``_oh``, ``_ih``, ``_dh``);
- Python's: any dunder (``__name__``, ``__builtins__``: replacing it breaks every later cell)
  and the keywords (``True``, ``None``, ``for``);
- the package's own in a worker's namespace: ``_exit_code`` (a ``!command``'s status), and the
  dunders it keeps there (``__nsight_magic_shared__``, ``__event_loop__``)."""

from __future__ import annotations

import keyword
import re
from collections.abc import Collection

SHELL_NAMES = frozenset({"get_ipython", "In", "Out", "exit", "quit", "display"})
# dunders, IPython's output and input history
RESERVED_PATTERN = re.compile(r"__\w*__|_+|_\d+|_i+|_i\d+|_oh|_ih|_dh")
# what the cell script itself binds in the cell's namespace (script/runtime.py)
# (``SHOWN``: the cell's trailing expression's value, on its way to the notebook's ``Out``)
SHOWN = "_nsight_magic_shown"
PACKAGE_NAMES = frozenset({"_exit_code", SHOWN})


def reserved_why(name: str, hidden: Collection[str] = ()) -> str | None:
    """Why ``name`` must not be bound by us in a notebook's namespace (one phrase), or None
    when it may be. ``hidden``: the shell's ``user_ns_hidden``."""
    if keyword.iskeyword(name):
        return "it is a Python keyword"
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        return "Python gives dunder names their meaning (__name__, __builtins__)"
    if name in SHELL_NAMES or name in hidden or RESERVED_PATTERN.fullmatch(name):
        return "IPython uses it (In, Out, _, _i, get_ipython ...)"
    if name in PACKAGE_NAMES:
        return "nsight_magic's cell script binds it"
    return None


__all__ = ["PACKAGE_NAMES", "RESERVED_PATTERN", "SHELL_NAMES", "SHOWN", "reserved_why"]
