"""Checks of the magics' options and how a cell that does not parse is shown: every mistake a
user can type is one line (an IPython ``UsageError`` for options, ``CellSyntaxError`` for cells),
never a traceback of our internals."""

from __future__ import annotations

import builtins
import keyword
import math
import re
from collections.abc import Collection, Sequence
from typing import Any

from IPython.core.error import UsageError

# names IPython puts in every namespace (user_ns_hidden holds them too, when there is a shell)
SHELL_NAMES = frozenset({"get_ipython", "In", "Out", "exit", "quit", "display"})
# names Python and IPython give meaning to in a namespace: dunders (``__builtins__``: replacing
# it breaks every later cell), IPython's output and input history (``_``, ``__``, ``_3``,
# ``_i``, ``_ii``, ``_i3``, ``_oh``, ``_ih``, ``_dh``)
_RESERVED = re.compile(r"__\w*__|_+|_\d+|_i+|_i\d+|_oh|_ih|_dh")
# a warm-up runs the whole cell once more before the capture; more than this is a typo
MAX_WARMUP = 1000


def split_extra(line: str) -> tuple[list[str], list[str]]:
    """Tokens before ``--`` are ours; after it they go to the profiler untouched."""
    from IPython.utils.process import arg_split

    try:
        line.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"the options hold a character that is not valid Unicode ({line[exc.start]!r}, a lone "
            "surrogate); remove it."
        ) from None
    try:
        tokens = arg_split(line, posix=True)
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(f"cannot read the options {line.strip()!r}: {exc}") from None
    if "--" in tokens:
        i = tokens.index("--")
        return tokens[:i], tokens[i + 1 :]
    return tokens, []


def check_common(
    timeout: float | None,
    env: Sequence[str],
    var: str | None,
    hidden: Collection[str],
    *,
    name: str | None = None,
    warmup: int = 0,
) -> None:
    """``--timeout`` finite and > 0, ``--env`` items KEY=VALUE without NUL, ``-o NAME`` a plain
    identifier that hides nothing IPython or Python needs (``-o get_ipython`` would break every
    later magic, ``-o __builtins__`` every later cell); ``hidden`` is the shell's
    ``user_ns_hidden``; ``--name`` without NUL; ``--warmup`` in 0..MAX_WARMUP."""
    if not 0 <= warmup <= MAX_WARMUP:
        raise UsageError(
            f"--warmup {warmup}: must be 0..{MAX_WARMUP} (each warm-up runs the whole cell "
            "before the capture)"
        )
    if name is not None and "\x00" in name:
        raise UsageError(f"--name {name!r}: holds a NUL character")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"--timeout {timeout}: must be a number of seconds > 0")
    for item in env:
        if "=" not in item or item.startswith("="):
            raise UsageError(f"--env {item!r}: expected KEY=VALUE")
        if "\x00" in item:
            raise UsageError(f"--env {item!r}: holds a NUL character")
    if var is None:
        return
    if not var.isidentifier() or keyword.iskeyword(var):
        raise UsageError(f"--var {var!r} is not a valid variable name")
    if var in hidden or hasattr(builtins, var) or var in SHELL_NAMES or _RESERVED.fullmatch(var):
        raise UsageError(
            f"--var {var!r} would hide a name IPython or Python itself uses; choose another"
        )


def show_syntax_error(shell: Any, etype: Any, value: Any, tb: Any, tb_offset: Any = None) -> Any:
    """IPython shows any SyntaxError with the whole stack of our internals: a cell that does
    not parse is one line, like every other typed error (the cell still fails). Registered
    for ``CellSyntaxError`` only (``magics.register``)."""
    stb = [f"nsight_magic: {value.one_line()}"]
    shell._showtraceback(etype, value, stb)  # how IPython itself shows (and a kernel sends) it
    return stb
