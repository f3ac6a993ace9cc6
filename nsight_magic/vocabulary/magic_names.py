"""Which names the profiling cell magics answer to in this kernel.

``%%nsight_nsys`` / ``%%nsight_ncu`` are always ours. The short ``%%nsys`` / ``%%ncu`` are taken
only when no other extension holds ``nsys`` / ``ncu`` (NVIDIA's jupyterlab-nvidia-nsight 1.0.1
registers ``%nsys``, ``%ncu``, ``%%nsys`` and ``%%ncu`` in every kernel; whichever extension
loaded last used to win, silently), or when the user asks for them
(``%config NsightMagic.claim_short_names = True``), and given back when they stop asking.

A leaf: no IPython import (the shell is duck-typed), so messages anywhere can name the magic
the user actually has (:func:`cell_magic`).
"""

from __future__ import annotations

import types
from typing import Any

PACKAGE = __name__.split(".")[0]
LONG_NAMES = {"nsys": "nsight_nsys", "ncu": "nsight_ncu"}  # short name -> the name always ours

# short name -> the package that holds it, while another extension does
_held_elsewhere: dict[str, str] = {}
# short name -> the other extension's cell magic we replaced (claim_short_names), to give back
_displaced: dict[str, Any] = {}
_shell: list[Any] = []  # the shell our magics are registered in (none before %load_ext)


def cell_magic(tool: str) -> str:
    """How the user spells the cell magic of ``tool`` ("nsys" or "ncu") in this kernel:
    ``%%nsys`` while it is ours (also before any registration: plain Python), else
    ``%%nsight_nsys``. Read live: an extension loaded after ours may have taken the name."""
    if not _shell:
        return "%%" + tool
    holder = _shell[0].magics_manager.magics["cell"].get(tool)
    return "%%" + (tool if holder is not None and owner(holder) == PACKAGE else LONG_NAMES[tool])


def held_elsewhere() -> dict[str, str]:
    """Short names another extension holds now: name -> its package."""
    return dict(_held_elsewhere)


def owner(magic: Any) -> str:
    """The top-level package a registered magic comes from (a bound method's class module,
    else the function's module)."""
    bound_to = getattr(magic, "__self__", None)
    module = type(bound_to).__module__ if bound_to is not None else ""
    module = module or getattr(magic, "__module__", "") or ""
    return module.split(".")[0] or "another extension"


def assign_short_names(shell: Any, claim: bool) -> dict[str, str]:
    """Point ``%%nsys`` / ``%%ncu`` at our magics where free (or everywhere with ``claim``),
    give back what an earlier claim displaced when ``claim`` is off; returns the short names
    another extension keeps (name -> package). Our long names must be registered already."""
    table = shell.magics_manager.magics
    _shell[:] = [shell]
    for short, long in LONG_NAMES.items():
        ours = table["cell"][long]
        cell, line = table["cell"].get(short), table["line"].get(short)
        theirs_cell = _displaced.get(short) if cell is None or owner(cell) == PACKAGE else cell
        theirs_line = line if line is not None and owner(line) != PACKAGE else None
        theirs = theirs_cell or theirs_line
        if claim or theirs is None:
            if theirs_cell is not None:
                _displaced[short] = theirs_cell
            table["cell"][short] = _under_short_name(ours, short, long)
            _held_elsewhere.pop(short, None)
        else:
            if short in _displaced:
                table["cell"][short] = _displaced.pop(short)
            _held_elsewhere[short] = owner(theirs)
    return held_elsewhere()


def renamed(doc: str, long: str, short: str) -> str:
    """``doc``, the help of ``%%long``, for someone who typed ``%%short`` (``%%nsys?`` shows
    ``%%nsys``): every ``%%long`` respelled, and the usage's wrapped lines, which argparse
    aligned after the long name, moved left by the difference. Only the usage's: the options'
    text keeps its own column (it has nothing to do with the name's length)."""
    old, new = f"%%{long}", f"%%{short}"
    aligned = " " * (2 + len(old) + 1)  # "  %%nsight_nsys " in the usage block
    lines, in_usage = [], False
    for line in doc.replace(old, new).splitlines():
        if line.startswith(f"  {new} "):  # the usage's first line
            in_usage = True
        elif in_usage and line.startswith(aligned):
            line = line[len(old) - len(new) :]
        else:
            in_usage = False
        lines.append(line)
    return "\n".join(lines) + ("\n" if doc.endswith("\n") else "")


def _under_short_name(magic: Any, short: str, long: str) -> Any:
    """``magic`` (a bound method) as ``%%short`` answers: the same code bound to the same
    instance, with a help that names ``%%short`` (IPython's ``%%nsys?`` shows the registered
    callable's docstring); its attributes (the argument parser) are the original's."""
    func, instance = getattr(magic, "__func__", None), getattr(magic, "__self__", None)
    if func is None or instance is None:
        return magic
    twin = types.FunctionType(
        func.__code__, func.__globals__, short, func.__defaults__, func.__closure__
    )
    twin.__kwdefaults__ = func.__kwdefaults__
    twin.__dict__.update(func.__dict__)
    twin.__qualname__ = func.__qualname__
    twin.__doc__ = renamed(func.__doc__ or "", long, short)
    return types.MethodType(twin, instance)


CLAIM_HELP = (
    "Take %%nsys / %%ncu even when another extension (e.g. NVIDIA's jupyterlab-nvidia-nsight) "
    "holds them; False gives them back. %%nsight_nsys / %%nsight_ncu always work."
)
SHORT_NOTE = (
    "%%{short} is the same magic where no other extension holds that name (NVIDIA's "
    "jupyterlab-nvidia-nsight does); `%config NsightMagic.claim_short_names = True` takes it."
)


def assign_and_tell(shell: Any, claim: Any, always: bool = False) -> str:
    """:func:`assign_short_names`, then the one message for the user: which names another
    extension keeps ("" when none, unless ``always``: then that the short names are ours)."""
    held = assign_short_names(shell, claim=bool(claim))
    if held or not always:
        return notice(held)
    return "nsight_magic: %%nsys and %%ncu are nsight_magic's (%%nsight_nsys / %%nsight_ncu too)."


def notice(held: dict[str, str]) -> str:
    """One message: which short names another extension holds, and the names to use."""
    if not held:
        return ""
    owners = " and ".join(sorted(set(held.values())))
    shorts = " and ".join(f"%%{name}" for name in held)
    longs = " and ".join(f"%%{LONG_NAMES[name]}" for name in held)
    return (
        f"nsight_magic: {shorts} belong to {owners} in this kernel, so nsight_magic's are "
        f"{longs} (same options). `%config NsightMagic.claim_short_names = True` gives "
        f"{shorts} to nsight_magic instead."
    )


__all__ = [
    "CLAIM_HELP",
    "LONG_NAMES",
    "SHORT_NOTE",
    "assign_and_tell",
    "assign_short_names",
    "cell_magic",
    "held_elsewhere",
    "notice",
    "owner",
]
