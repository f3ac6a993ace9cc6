"""Strings built per row, the same on every pandas this package supports.

Why not ``"x" + series``: pandas' string arithmetic depends on the string dtype. On pandas 3.0.x
(the GPU image's 3.0.6 with pyarrow 25) an empty object column is typed arrow ``null`` and
``"x" + frame["op"] + other.astype(str)`` raises ``TypeError: operation 'radd' not supported
for dtype 'str' with dtype 'object'``; pandas 2 keeps object strings and pandas 3.1 coerces.
Building each string in Python gives one result on all of them, empty frames included."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

__all__ = ["join_text", "text_of"]


def text_of(value: Any) -> str:
    """``str(value)``, with a missing value (None, NaN, ``pd.NA``) as ""."""
    if value is None:
        return ""
    try:
        if pd.isna(value):
            return ""
    except (TypeError, ValueError):  # a list or array: not a scalar, so not missing
        pass
    return str(value)


def join_text(*parts: pd.Series | str, index: Iterable[Any] | None = None) -> pd.Series:
    """Per row, the pieces concatenated: each part is a Series (aligned by position, all of
    the same length) or a constant string. The result has the first Series' index (or
    ``index``) and object dtype, empty when the Series are; missing values read as "".

    >>> join_text("GPU ", pd.Series([0, 1]), " / stream ", pd.Series([7, 7])).tolist()
    ['GPU 0 / stream 7', 'GPU 1 / stream 7']
    """
    series = [p for p in parts if isinstance(p, pd.Series)]
    if not series and index is None:
        raise ValueError("join_text needs a Series among its parts, or index=")
    rows = pd.Index(series[0].index if series else index)
    columns = [
        [text_of(v) for v in p.tolist()] if isinstance(p, pd.Series) else [p] * len(rows)
        for p in parts
    ]
    if any(len(c) != len(rows) for c in columns):
        raise ValueError("join_text: the Series differ in length")
    values = ["".join(row) for row in zip(*columns, strict=True)] if columns else []
    return pd.Series(values, index=rows, dtype=object)
