"""Which NVTX range a user means: the text they copy from the NVTX tab or ``nsys stats``.

``nsys stats`` prints a range as ``DOMAIN:RANGE`` (``:RANGE`` for the default domain); people
also type the bare ``RANGE``. A spec is resolved against the ranges a report actually has, so a
typo or an ambiguous name fails with the list to choose from rather than filtering to nothing.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, NamedTuple

import pandas as pd

from ..errors import AmbiguousNvtxRangeError, NvtxRangeNotFoundError

__all__ = [
    "NvtxRange",
    "matches_spec",
    "opened_ranges",
    "resolve_nvtx_range",
    "target_hint",
    "target_notes",
]

MAX_LISTED = 40  # ranges named in an error message; a report can have thousands (op ranges)


class NvtxRange(NamedTuple):
    """One NVTX range: ``domain`` ("" for the default domain), ``range`` text, ``style``
    ("PushPop" or "StartEnd")."""

    domain: str
    range: str
    style: str

    @property
    def label(self) -> str:
        """``domain:range`` as ``nsys stats`` prints it."""
        return f"{self.domain}:{self.range}"


def _listed(ranges: list[NvtxRange], styles: bool) -> list[str]:
    return [f"{r.label} ({r.style})" if styles else r.label for r in ranges]


def _summary(labels: list[str]) -> str:
    shown = ", ".join(repr(label) for label in labels[:MAX_LISTED])
    more = len(labels) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def resolve_nvtx_range(nvtx: pd.DataFrame, spec: str) -> NvtxRange:
    """The one range ``spec`` names in ``nvtx`` (any frame with ``domain, range, style``:
    ``nvtx()``, ``nvtx_gpu_projection()``, ncu ``nvtx_ranges()``).

    ``spec`` is ``DOMAIN:RANGE`` as ``nsys stats`` prints it (``:RANGE`` = default domain), or
    a bare ``RANGE`` in any domain; an exact ``DOMAIN:RANGE`` match wins over a range whose own
    text contains ":", and ``DOMAIN:RANGE (STYLE)`` picks one of a name used in both styles.
    Raises AmbiguousNvtxRangeError when several ranges match (the same name
    in several domains, or in both styles), listing them; NvtxRangeNotFoundError when none
    does, listing the ranges the frame has."""
    distinct = nvtx[["domain", "range", "style"]].drop_duplicates()
    ranges = [NvtxRange(str(d), str(r), str(s)) for d, r, s in distinct.itertuples(index=False)]
    matches = (
        [r for r in ranges if f"{r.label} ({r.style})" == spec]
        or [r for r in ranges if r.label == spec]
        or [r for r in ranges if r.range == spec]
    )
    if len(matches) == 1:
        return matches[0]
    if matches:
        labels = _listed(sorted(matches), styles=len({r[:2] for r in matches}) < len(matches))
        raise AmbiguousNvtxRangeError(
            f"NVTX range {spec!r} matches {len(matches)} ranges: {_summary(labels)}; "
            "name one as listed (':RANGE' is the default domain).",
            labels,
        )
    labels = sorted({r.label for r in ranges})
    have = _summary(labels) if labels else "none"
    raise NvtxRangeNotFoundError(f"No NVTX range {spec!r} in this report; it has {have}.", labels)


def matches_spec(spec: str, r: NvtxRange) -> bool:
    """Whether ``spec`` names ``r`` in one of the spellings ``resolve_nvtx_range`` accepts
    ("DOMAIN:RANGE (STYLE)", "DOMAIN:RANGE", bare "RANGE"), compared as plain text. The cell
    script applies this same rule to each range as it opens (``script/range_recorder.py``), so
    ``%%ncu --nvtx`` needs no earlier run to know the range's domain."""
    return spec in (f"{r.label} ({r.style})", r.label, r.range)


def spelling(r: NvtxRange, ranges: Sequence[NvtxRange]) -> str:
    """The ``--nvtx`` text that names ``r`` and nothing else among ``ranges``."""
    same_label = [o for o in ranges if o.label == r.label]
    return f"{r.label} ({r.style})" if len(same_label) > 1 else r.label


def opened_ranges(ranges: Sequence[NvtxRange]) -> str:
    """The ranges a cell opened as "DOMAIN:RANGE (STYLE)": each one a spelling ``--nvtx``
    takes as written."""
    return _summary([f"{r.label} ({r.style})" for r in ranges])


def target_hint(spec: str, ranges: Sequence[NvtxRange], matched: Sequence[Any], opened: int) -> str:
    """Why ``%%ncu --nvtx spec`` profiled nothing, in one or two sentences: the range never
    opened (then the ranges the cell did open and the spelling closest to ``spec``), or it
    opened but no kernel launched inside it passed the other filters."""
    if matched:
        names = _summary([NvtxRange(*map(str, m)).label for m in matched])
        return (
            f"--nvtx {spec!r} named {names}, opened {opened} time(s), but ncu profiled no "
            "kernel inside: the range launched none, or --kernel / --launch-skip left none."
        )
    if not ranges:
        return (
            "The cell opened no NVTX range (through nvtx or torch.cuda.nvtx), so none is "
            f"named {spec!r}."
        )
    text = f"The cell opened no range named {spec!r}; it opened {opened_ranges(ranges)}."
    words = {spelling(r, ranges): r for r in ranges}
    close = difflib.get_close_matches(
        spec, list(words), n=1, cutoff=0.5
    ) or difflib.get_close_matches(spec, [r.range for r in ranges], n=1, cutoff=0.5)
    if close:
        best = words.get(close[0]) or next(r for r in ranges if r.range == close[0])
        text += f" Use --nvtx {spelling(best, ranges)!r}."
    return text


def target_notes(target: Any) -> list[str]:
    """One line when ``%%ncu --nvtx`` named ranges in more than one domain or style (the
    status the cell script wrote): all were profiled; say how to pick one."""
    if not isinstance(target, dict):
        return []
    matched = [NvtxRange(*map(str, m)) for m in target.get("matched") or [] if len(m) == 3]
    if len(matched) < 2:
        return []
    spelled = [repr(spelling(r, matched)) for r in matched]
    return [
        f"--nvtx {target.get('spec')!r} named {len(matched)} ranges ({', '.join(spelled)}); "
        "kernels inside any of them were profiled. Name one as --nvtx DOMAIN:RANGE to pick it."
    ]
