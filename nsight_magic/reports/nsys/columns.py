"""Typed columns of an nsys exporter table, whatever the export format.

A :class:`Spec` names the columns to read and their kind: ``"i"`` int64 with ``-1`` for NULL,
``"f"`` float64 with NaN, ``"s"`` Arrow ``large_string`` with ``""`` for NULL. :class:`Columns`
holds one read with the kinds kept apart, so callers get numpy ints and Arrow texts without
casts; :func:`to_frame` makes the DataFrame (texts as pandas ``str`` columns)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["Columns", "Kind", "Spec", "null_column", "split_global_id", "str_series", "to_frame"]

Kind = Literal["i", "s", "f"]
Spec = Mapping[str, Kind]  # column -> int64 (NULL -> -1) / str (NULL -> "") / float64 (NaN)


def split_global_id(global_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) from nsys's serialized GlobalId (pid in bits 24..47, tid in bits 0..23)."""
    g = np.asarray(global_id, dtype=np.int64)
    return (g >> 24) & 0xFFFFFF, g & 0xFFFFFF


# --- typed columns ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Columns:
    """The columns of one read, by kind, all of the same length; ``names`` keeps the spec's
    order (the order :func:`to_frame` gives them)."""

    names: tuple[str, ...]
    ints: dict[str, np.ndarray]
    floats: dict[str, np.ndarray]
    texts: dict[str, pa.Array]

    @classmethod
    def empty(cls, spec: Spec) -> Columns:
        return cls.nulls(spec, 0)

    @classmethod
    def nulls(cls, spec: Spec, n: int) -> Columns:
        return cls.build(spec, {c: null_column(k, n) for c, k in spec.items()})

    @classmethod
    def build(cls, spec: Spec, data: Mapping[str, np.ndarray | pa.Array]) -> Columns:
        ints: dict[str, np.ndarray] = {}
        floats: dict[str, np.ndarray] = {}
        texts: dict[str, pa.Array] = {}
        for col, kind in spec.items():
            value = data[col]
            if isinstance(value, np.ndarray):
                (ints if kind == "i" else floats)[col] = value
            else:
                texts[col] = value
        return cls(tuple(spec), ints, floats, texts)

    def __len__(self) -> int:
        for group in (self.ints, self.floats, self.texts):
            for value in group.values():
                return len(value)
        return 0

    def items(self) -> list[tuple[str, np.ndarray | pa.Array]]:
        groups: list[Mapping[str, np.ndarray | pa.Array]] = [self.ints, self.floats, self.texts]
        found = {c: g[c] for g in groups for c in g}
        return [(c, found[c]) for c in self.names]

    def take(self, rows: np.ndarray) -> Columns:
        idx = pa.array(rows)
        return Columns(
            self.names,
            {c: v[rows] for c, v in self.ints.items()},
            {c: v[rows] for c, v in self.floats.items()},
            {c: v.take(idx) for c, v in self.texts.items()},
        )

    def filter(self, mask: np.ndarray) -> Columns:
        return self.take(np.flatnonzero(mask))

    @classmethod
    def concat(cls, parts: list[Columns], spec: Spec) -> Columns:
        if not parts:
            return cls.empty(spec)
        data: dict[str, np.ndarray | pa.Array] = {}
        for col, kind in spec.items():
            if kind == "s":
                data[col] = pa.concat_arrays([p.texts[col] for p in parts])
            else:
                group = [p.ints[col] if kind == "i" else p.floats[col] for p in parts]
                data[col] = np.concatenate(group)
        return cls.build(spec, data)


def null_column(kind: Kind, n: int) -> np.ndarray | pa.Array:
    if kind == "s":
        return pa.array([""] * n, pa.large_string())
    if kind == "f":
        return np.full(n, np.nan, dtype=np.float64)
    return np.full(n, -1, dtype=np.int64)


_STR_DTYPE = pd.Series([""], dtype=object).astype("str").dtype


def str_series(values: pa.Array | np.ndarray) -> pd.Series:
    """A ``str`` column (pandas' string dtype; Arrow-backed without a copy where pandas has it)."""
    if isinstance(values, np.ndarray):
        return pd.Series(values, dtype=object).astype("str")
    if isinstance(_STR_DTYPE, np.dtype):  # pragma: no cover - pandas < 3 without the str dtype
        return pd.Series(values.to_pylist(), dtype=object).astype("str")
    return pd.Series(pd.array(values, dtype=_STR_DTYPE))


def to_frame(columns: Mapping[str, np.ndarray | pa.Array | pd.Series] | Columns) -> pd.DataFrame:
    """A DataFrame of the columns, texts as ``str`` columns, in the given order."""
    pairs = columns.items() if isinstance(columns, Columns) else list(columns.items())
    data: dict[str, np.ndarray | pd.Series] = {}
    for col, arr in pairs:
        if isinstance(arr, pa.Array) or (isinstance(arr, np.ndarray) and arr.dtype == object):
            data[col] = str_series(arr)
        else:
            data[col] = arr
    return pd.DataFrame(data)
