"""Which NVTX range a user means: the text they copy from the NVTX tab or ``nsys stats``.

``nsys stats`` prints a range as ``DOMAIN:RANGE`` (``:RANGE`` for the default domain); people
also type the bare ``RANGE``. A spec is resolved against the ranges a report actually has, so a
typo or an ambiguous name fails with the list to choose from rather than filtering to nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from ..errors import AmbiguousNvtxRangeError, NvtxRangeNotFoundError

__all__ = ["NvtxRange", "resolve_nvtx_range"]

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
