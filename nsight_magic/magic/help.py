"""The help of ``%%nsight_nsys`` / ``%%nsight_ncu`` (what ``%%ncu?`` prints): the magic's
summary, ONE usage block and the options list, both generated from its parser (so from the
option declarations in ``profilers/``), its example and notes. IPython's ``magic_arguments``
would put its own usage above the docstring; this replaces that text whole."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from typing import Any

from IPython.utils.text import dedent


def magic_help(func: Any, *, extra: str, notes: Sequence[str]) -> str:
    """``func``'s help: its docstring's first paragraph, "Usage::" with the parser's usage and
    ``extra`` (the ``--`` arguments) on its last line, the rest of the docstring, the options, then
    ``notes`` (wrapped). Sets the parser's name to the cell magic's (``%%name``)."""
    parser: argparse.ArgumentParser = func.parser
    doc = parser.description or ""  # the docstring, which magic_arguments replaced
    name = parser.prog.lstrip("%")
    parser.prog = f"%{name}"  # MagicHelpFormatter writes "%" + prog
    usage = parser.format_usage().rstrip() + f"\n      [-- {extra}]"
    parser.description, parser.usage = None, argparse.SUPPRESS
    # argparse's group title ("options:"; "optional arguments:" before Python 3.10) is dropped
    options = parser.format_help().strip().split("\n", 1)[1]
    summary, _, rest = dedent(doc).strip().partition("\n\n")
    parts = [summary, "Usage" + usage, rest.strip(), "Options::\n\n" + options]
    return "\n\n".join([p for p in parts if p] + [textwrap.fill(n) for n in notes]) + "\n"
