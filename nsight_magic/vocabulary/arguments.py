"""Checks of a public function's arguments: a wrong type or an impossible value is one
``BadArgumentError`` naming the function, the argument and what to pass, raised before the
value reaches code that would fail on it with ``'int' object has no attribute 'lower'``."""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ..errors import BadArgumentError

__all__ = [
    "count_arg",
    "dtype_arg",
    "flops_arg",
    "frame_arg",
    "mapping_arg",
    "number_arg",
    "range_args",
    "text_arg",
    "texts_arg",
]


def _bad(where: str, name: str, value: Any, wanted: str) -> BadArgumentError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return BadArgumentError(f"{where}: {name} is {shown}; pass {wanted}.")


def text_arg(value: Any, name: str, where: str, *, choices: Collection[str] = ()) -> str:
    """A non-empty string without NUL (one of ``choices`` when given)."""
    wanted = " or ".join(repr(c) for c in choices) if choices else "a non-empty string"
    if not isinstance(value, str) or not value or "\x00" in value:
        raise _bad(where, name, value, wanted)
    if choices and value not in choices:
        raise _bad(where, name, value, wanted)
    return value


def dtype_arg(value: Any, where: str) -> str | None:
    """A data type name for a peak lookup, or None (each launch's own)."""
    if value is None:
        return None
    from .precisions import PEAK_DTYPES

    return text_arg(value, "dtype", where, choices=PEAK_DTYPES)


def mapping_arg(value: Any, name: str, where: str) -> Mapping[Any, Any] | None:
    """A mapping (``{range or launch: number}``) or None."""
    if value is not None and not isinstance(value, Mapping):
        raise _bad(where, name, value, "a dict {range or launch: number}, or None")
    return value


def texts_arg(value: Any, name: str, where: str) -> list[str]:
    """Strings: one string is one item; any other iterable must hold only strings."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Iterable) or isinstance(value, (bytes, dict)):
        raise _bad(where, name, value, "a string or a list of strings")
    items = list(value)
    if not all(isinstance(v, str) for v in items):
        raise _bad(where, name, value, "a string or a list of strings")
    return items


def number_arg(value: Any, name: str, where: str, *, positive: bool = True) -> float:
    """A finite real number (> 0 when ``positive``); a bool is no number here."""
    wanted = "a finite number > 0" if positive else "a finite number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(where, name, value, wanted)
    try:
        number = float(value)
    except OverflowError:
        raise _bad(where, name, value, wanted) from None
    if not math.isfinite(number) or (positive and number <= 0):
        raise _bad(where, name, value, wanted)
    return number


def count_arg(value: Any, name: str, where: str, *, minimum: int = 0) -> int:
    """A whole number >= ``minimum`` (numpy integers too; a bool is no count)."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise _bad(where, name, value, f"a whole number >= {minimum}")
    return int(value)


def frame_arg(value: Any, name: str, where: str, *, made_by: str) -> Any:
    """A pandas DataFrame (``made_by`` says which method gives the one wanted)."""
    import pandas as pd

    if not isinstance(value, pd.DataFrame):
        raise _bad(where, name, value, f"the DataFrame of {made_by}")
    return value


def flops_arg(value: Any, name: str, where: str, unit: str = "FLOPs") -> dict[Any, float] | None:
    """``{range or launch: FLOPs}`` or None, each count a finite real number >= 0 as a float:
    a string, None, a complex number, one too large for a float (``10**400``) or a bool (True
    is not 1 FLOP) is one ``BadArgumentError`` naming its key, not a float() error later."""
    if mapping_arg(value, name, where) is None:
        return None
    wanted = f"a finite number of {unit} >= 0 (an int or float; True/False are not counts)"
    out: dict[Any, float] = {}
    for key, count in value.items():
        if isinstance(count, bool) or not isinstance(count, numbers.Real):
            raise _bad(where, f"{name}[{key!r}]", count, wanted)
        try:
            number = float(count)
        except (OverflowError, ValueError, TypeError):
            raise _bad(where, f"{name}[{key!r}]", count, wanted) from None
        if not math.isfinite(number) or number < 0:
            raise _bad(where, f"{name}[{key!r}]", count, wanted)
        out[key] = number
    return out


def range_args(domain: object, name: object, where: str) -> None:
    """An NVTX range named by ``domain`` ("" for the default domain) and ``name``."""
    if not isinstance(domain, str) or "\x00" in domain:
        raise BadArgumentError(
            f"{where}: domain is {domain!r}; pass the range's domain as a string ('' for the "
            "default domain)."
        )
    text_arg(name, "name", where)
