"""The NVTX ranges nsight_magic puts around a profiled cell, named in one place.

A profiled cell runs inside the range ``cell`` of the domain ``nsight_magic``, each top-level
statement inside its own range ``L<line>: <source>``, and warm-up runs inside ``warmup``. On a
multi-rank run each rank first opens and closes an empty range ``rank <RANK>`` (a sibling before
``cell``): the report then says which process is which rank. Under ncu the cell also runs
inside the start/end range ``capture``, which ncu's default filter selects (any thread). The
script generator writes these names; the analysis reads them back (statement order, the cell's
own ranges versus the user's), and ncu's filters select them. Stdlib only: a leaf module.
"""

from __future__ import annotations

import re
from typing import Any

NVTX_DOMAIN = "nsight_magic"
CELL_RANGE = "cell"
WARMUP_RANGE = "warmup"
# ``%%ncu --nvtx NAME``: the script opens this start/end range of NVTX_DOMAIN around every range
# the cell opens that NAME names (in any domain), and ncu's filter selects it
TARGET_RANGE = "nvtx-target"  # no space or escape character: nothing for ncu to parse
# under ncu the cell also runs inside this start/end range of NVTX_DOMAIN, which ncu's default
# filter selects: a start/end range holds the kernels any thread launches while it is open
# (autograd's backward thread), where the push/pop ``cell`` holds only the main thread's
CAPTURE_RANGE = "capture"
# under ncu the script mirrors the innermost user range open in the process (any thread) as one
# start/end range of this domain named "DOMAIN:RANGE": ncu's NVTX state of every launch then
# says its phase, where the push/pop ranges it records are the launching thread's only
PHASE_DOMAIN = "nsight_magic.phase"
LABEL_WIDTH = 60  # a statement label keeps its head: what a reader scans for

_STATEMENT = re.compile(r"^L(\d+): ")
_RANK = re.compile(r"^rank (\d+)$")


def shorten_label(text: str, width: int = LABEL_WIDTH) -> str:
    """One line, at most ``width`` characters, with "..." when cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3].rstrip() + "..."


def statement_label(lineno: int, source: str) -> str:
    """``L{line}: {first line of the statement}`` (" ..." marks a compound statement)."""
    lines = source.splitlines() or [""]
    first = lines[0] + (" ..." if len(lines) > 1 else "")
    return f"L{lineno}: {shorten_label(first)}"


def statement_texts(labels: Any) -> Any:
    """The statements' text of a pandas Series of labels (``L12: x = f(x)`` -> ``x = f(x)``);
    other labels as they are."""
    return labels.str.replace(_STATEMENT.pattern, "", regex=True)


def statement_line(label: str) -> int | None:
    """The cell line a statement label names, or None when ``label`` is not one."""
    m = _STATEMENT.match(label)
    return int(m.group(1)) if m else None


def rank_label(rank: int) -> str:
    """``rank <rank>``: the marker range a rank's cell script emits (and its thread name)."""
    return f"rank {int(rank)}"


def label_rank(label: str) -> int | None:
    """The rank a ``rank <n>`` marker names, or None when ``label`` is not one."""
    m = _RANK.match(label)
    return int(m.group(1)) if m else None
