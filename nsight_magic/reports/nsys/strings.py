"""nsys's string table (StringIds): kernel, API and NVTX names are stored once, rows hold ids.

:class:`StringTable` resolves ids with work done once per distinct id (rows only get integer
positions and an Arrow ``take``: no per-row Python strings), and says which ids it could not
resolve, so a report whose string table was lost is caught instead of collapsing every name
into ""."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import CorruptReportError
from .columns import Spec, str_series
from .source import ExportSource

__all__ = ["StringTable", "load_string_ids", "load_string_table", "require_names"]

_STRING_IDS: Spec = {"id": "i", "value": "s"}


@dataclass(frozen=True)
class StringTable:
    """StringIds ready for vectorised lookups."""

    ids: np.ndarray  # sorted, unique
    values: pa.LargeStringArray  # values[i] is the text of ids[i]; one extra "" at the end
    _direct: np.ndarray | None = field(default=None, repr=False)  # id -> position (small ids)

    @classmethod
    def from_columns(cls, ids: np.ndarray, values: pa.Array) -> StringTable:
        ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        if len(ids) and np.any(order[1:] != order[:-1] + 1):
            ids, values = ids[order], values.take(pa.array(order))
        if len(ids) > 1 and np.any(ids[1:] == ids[:-1]):
            raise ValueError("StringIds has duplicate ids")
        n = len(ids)
        values = pa.concat_arrays(
            [values.cast(pa.large_string()), pa.array([""], pa.large_string())]
        )
        direct = None
        if n and ids[0] >= 0 and ids[-1] < max(4 * n + 1024, 1 << 16):
            direct = np.full(int(ids[-1]) + 1, n, dtype=np.int64)
            direct[ids] = np.arange(n)
        return cls(ids, values, direct)

    def __len__(self) -> int:
        return len(self.ids)

    def series(self) -> pd.Series:
        """id -> text, as :func:`load_string_ids` returns it."""
        return pd.Series(str_series(self.values[:-1]).to_numpy(), index=self.ids, dtype="str")

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Index into ``values`` per id; unknown or NULL (-1) ids point at the trailing ""."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(self.ids)
        if self._direct is not None:
            ok = (ids >= 0) & (ids < len(self._direct))
            return np.where(ok, self._direct[np.where(ok, ids, 0)], n)
        if n == 0:
            return np.full(len(ids), 0, dtype=np.int64)
        pos = np.searchsorted(self.ids, ids)
        hit = pos < n
        hit[hit] = self.ids[pos[hit]] == ids[hit]
        return np.where(hit, pos, n)

    def unresolved(self, ids: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
        """Mask of the ids (not NULL, i.e. >= 0) that have no text in the table; ``pos`` is
        :meth:`positions` of ``ids`` when the caller has it."""
        ids = np.asarray(ids, dtype=np.int64)
        pos = self.positions(ids) if pos is None else pos
        return (pos == len(self.ids)) & (ids >= 0)

    def blank(self, pos: np.ndarray) -> np.ndarray:
        """Mask of the positions whose text in the table is "" (the trailing "" that unknown
        ids point at is not counted: see :meth:`unresolved`)."""
        return self._blank[pos]

    @functools.cached_property
    def _blank(self) -> np.ndarray:
        blank = np.asarray(pc.equal(self.values, "").to_numpy(zero_copy_only=False), dtype=bool)
        blank[-1] = False  # the sentinel for unknown ids
        return blank

    def take(
        self,
        ids: np.ndarray,
        transform: Callable[[str], str] | None = None,
        pos: np.ndarray | None = None,
    ) -> pa.Array:
        """Texts of ``ids`` ("" when unknown) as an Arrow array; ``transform`` is applied once
        per distinct text; ``pos`` as in :meth:`unresolved`."""
        pos = self.positions(ids) if pos is None else pos
        if transform is None:
            return self.values.take(pa.array(pos))
        used = np.flatnonzero(np.bincount(pos, minlength=len(self.values)))
        texts = [transform(t) for t in self.values.take(pa.array(used)).to_pylist()]
        lut = np.zeros(len(self.values), dtype=np.int64)
        lut[used] = np.arange(len(used))
        return pa.array(texts, pa.large_string()).take(pa.array(lut[pos]))

    def categorical(self, ids: np.ndarray, pos: np.ndarray | None = None) -> pd.Categorical:
        """Texts of ``ids`` as a Categorical (sorted distinct texts): equal texts share a code,
        so grouping by it is grouping by the text, without one string object per row."""
        pos = self.positions(ids) if pos is None else pos
        used = np.flatnonzero(np.bincount(pos, minlength=len(self.values)))
        texts = self.values.take(pa.array(used)).to_pylist()
        cats = sorted(set(texts))
        code_of = {t: i for i, t in enumerate(cats)}
        lut = np.zeros(len(self.values), dtype=np.int64)
        lut[used] = [code_of[t] for t in texts]
        return pd.Categorical.from_codes(lut[pos], categories=pd.Index(cats, dtype="str"))


def load_string_table(src: ExportSource) -> StringTable:
    """StringIds: ``id INTEGER PRIMARY KEY, value TEXT NOT NULL`` as a :class:`StringTable`."""
    cols = src.read_columns("StringIds", _STRING_IDS)
    values = cols.texts["value"]
    # nsys stores each text once; numbers, or one text under many ids, mean the table was
    # overwritten, and every kernel (or range) would share one name in the summaries
    numbers = src.non_text_rows("StringIds", "value")
    # "" may repeat: a blank name is refused where it matters (require_names), allowed for
    # NVTX messages
    texts = values.filter(pc.not_equal(values, ""))
    repeated = len(texts) - pc.count_distinct(texts, mode="all").as_py()
    if numbers or repeated:
        what = (f"{numbers:,} values that are not text" if numbers
                else f"{repeated:,} texts stored under more than one id")  # fmt: skip
        raise CorruptReportError(
            f"{src.path}: its string table (StringIds) holds {what}; nsys stores each text "
            "once, so the names of kernels and ranges cannot be trusted: export the .nsys-rep "
            "again."
        )
    return StringTable.from_columns(cols.ints["id"], values)


def load_string_ids(src: ExportSource) -> pd.Series:
    """StringIds: ``id INTEGER PRIMARY KEY, value TEXT NOT NULL`` -> Series value indexed by id."""
    return load_string_table(src).series()


def require_names(
    src: ExportSource,
    strings: StringTable,
    ids: np.ndarray,
    column: str,
    blank_ok: bool = False,
) -> np.ndarray:
    """:meth:`StringTable.positions` of ``ids``, after checking that every id of ``column``
    (e.g. ``CUPTI_ACTIVITY_KIND_KERNEL.demangledName``) has a text in StringIds, and (unless
    ``blank_ok``, as for NVTX messages) not an empty one. Otherwise ``CorruptReportError``: the
    report lost (part of) its string table, and those rows would all be named ""."""
    ids = np.asarray(ids, dtype=np.int64)
    pos = strings.positions(ids)
    lost = strings.unresolved(ids, pos)
    if lost.any():
        where = "is empty" if len(strings) == 0 else "lacks {n:,} of the ids it refers to"
        if not src.has("StringIds"):
            where = "is missing"
    elif not blank_ok:
        lost = strings.blank(pos)
        where = "has an empty text for {n:,} of the ids it refers to"
    if not lost.any():
        return pos
    n = len(np.unique(ids[lost]))
    raise CorruptReportError(
        f"{src.path}: its string table (StringIds) {where.format(n=n)}, so "
        f"{int(lost.sum()):,} of {len(ids):,} {column} names cannot be read; export the "
        ".nsys-rep again."
    )
