"""Short, readable kernel names that stay distinct.

Demangled CUDA kernel names run to hundreds of characters (``void at::native::elementwise_kernel<
(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<...>(...)::[lambda(int) (instance 1)]>
(int, T3)``). :func:`short_kernel_name` keeps what a reader scans for: the function's own name
and its numeric template arguments (``elementwise_kernel<128, 4>``), without return type,
namespaces, type arguments or parameters. Names without templates (cuBLAS/cuDNN/nvjet kernels,
mangled names) come back unchanged.

Different kernels can share that form (PyTorch's elementwise kernels differ only in the functor
they apply), so :func:`short_names` labels a whole column: where two distinct names meet on one
short form it appends the identifiers that tell them apart, taken from their template
arguments (``vectorized_elementwise_kernel<4> [cos_kernel_cuda]``), and a hash of the full name
as the last resort. The full name always stays in the frame's ``name`` column.
"""

from __future__ import annotations

import hashlib
import re

import pandas as pd

__all__ = ["short_kernel_name", "short_names"]

_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}
# Anonymous namespaces print with brackets that would read as a template or a call.
_ANONYMOUS = re.compile(r"<unnamed>|\(anonymous namespace\)")
_CAST = re.compile(r"^\((?:unsigned |signed )?(?:int|long|long long|short|char|bool|unsigned)\)")
_NUMBER = re.compile(r"^-?\d+[uUlL]*$")
_IDENT = re.compile(r"[A-Za-z_]\w*")
# Identifiers that tell nothing apart: language words, placeholders, PyTorch's generic
# kernel launchers and wrappers.
_NOISE = frozenset(
    {
        "void", "const", "operator", "lambda", "instance", "unsigned", "signed", "char",
        "array", "struct", "class", "anon", "gpu_kernel_impl", "gpu_kernel_impl_nocast",
        "func_wrapper_t", "TensorIteratorBase", "TensorIterator", "OpaqueType",
        "TrivialOffsetCalculator", "LoadWithoutCast", "StoreWithoutCast",
    }
)  # fmt: skip
# Data types: used to tell kernels apart only when functor names do not.
_DTYPES = frozenset(
    {
        "float", "double", "half", "int", "long", "short", "bool", "Half", "BFloat16",
        "__half", "__nv_bfloat16", "Float8_e4m3fn", "Float8_e5m2", "complex",
    }
)  # fmt: skip
_PLACEHOLDER = re.compile(r"^T\d+$")


def _split_head(name: str) -> tuple[str, str | None]:
    """(qualified function name, text inside its top-level template brackets or None)."""
    depth = 0
    start = 0
    for i, ch in enumerate(name):
        if ch in _OPEN:
            if depth == 0:
                head = name[start:i]
                if ch != "<":
                    return head, None
                end = _matching(name, i)
                return head, name[i + 1 : end] if end > i else None
            depth += 1
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
        elif ch == " " and depth == 0:
            start = i + 1  # a return type ("void ") before the name
    return name[start:], None


def _matching(text: str, i: int) -> int:
    """Index of the bracket closing the one at ``i`` (-1 when unbalanced)."""
    depth = 0
    for j in range(i, len(text)):
        ch = text[j]
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _top_level_args(args: str) -> list[str]:
    out, depth, start = [], 0, 0
    for i, ch in enumerate(args):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(args[start:i].strip())
            start = i + 1
    out.append(args[start:].strip())
    return [a for a in out if a]


def _numeric(arg: str) -> str | None:
    """``(int)128`` -> ``128``, ``(bool)1`` -> ``1``; None for anything that is not a number."""
    bare = _CAST.sub("", arg).strip()
    return bare if _NUMBER.match(bare) else None


def short_kernel_name(name: str) -> str:
    """``void ns::kernel<(int)128, (int)4, SomeType<...>>(args)`` -> ``kernel<128, 4>``: the
    function's last name component and its numeric template arguments. Names that are not
    demangled C++ templates (``nvjet_sm90_tst_...``, ``_Z...``) come back unchanged."""
    text = _ANONYMOUS.sub("anon", str(name).strip())
    head, args = _split_head(text)
    base = head.rsplit("::", 1)[-1].strip()
    if not base:
        return str(name)
    if args is None:
        return base
    numbers = [n for n in (_numeric(a) for a in _top_level_args(args)) if n is not None]
    return f"{base}<{', '.join(numbers)}>" if numbers else base


def _tokens(name: str) -> list[str]:
    """Identifiers of a name's template arguments, in order, once each: namespace qualifiers
    (an identifier followed by ``::``), casts and noise left out."""
    text = _ANONYMOUS.sub("anon", str(name))
    _, args = _split_head(text)
    if not args:
        return []
    seen: dict[str, None] = {}
    for m in _IDENT.finditer(args):
        word = m.group(0)
        after = args[m.end() : m.end() + 2]
        before = args[max(m.start() - 1, 0) : m.start()]
        if after == "::" or (before == "(" and args[m.end() : m.end() + 1] == ")"):
            continue  # a namespace, or a cast such as "(int)"
        if word in _NOISE or _PLACEHOLDER.match(word):
            continue
        seen.setdefault(word, None)
    return list(seen)


def _tags(names: list[str]) -> dict[str, str]:
    """For names that share one short form: the fewest identifiers telling each apart
    (functor/function names first, then data types), "" when a name needs none."""
    tokens = {n: _tokens(n) for n in names}
    shared = set.intersection(*(set(t) for t in tokens.values()))
    own = {
        n: [w for w in t if w not in shared and w not in _DTYPES]
        + [w for w in t if w not in shared and w in _DTYPES]
        for n, t in tokens.items()
    }
    width = max((len(t) for t in own.values()), default=0)
    tags = {n: "" for n in names}
    for k in range(1, width + 1):
        tags = {n: ", ".join(own[n][:k]) for n in names}
        if len(set(tags.values())) == len(names):
            return tags
    return tags


def _hash(name: str, size: int = 2) -> str:
    return hashlib.blake2s(name.encode(), digest_size=size).hexdigest()


def _make_unique(label: dict[str, str]) -> None:
    """Suffix ``#hash`` of the full name to every label that two distinct names share (also
    across short forms, e.g. a literal name equal to another's tagged form), longer hashes
    until none clash."""
    base = dict(label)
    for size in (2, 4, 8, 32):
        counts: dict[str, int] = {}
        for text in label.values():
            counts[text] = counts.get(text, 0) + 1
        clashing = [full for full, text in label.items() if counts[text] > 1]
        if not clashing:
            return
        for full in clashing:
            label[full] = f"{base[full]} #{_hash(full, size)}"


def short_names(names: pd.Series) -> pd.Series:
    """:func:`short_kernel_name` of each value, made unique per distinct name: colliding short
    forms get ``" [tag]"`` (identifiers from the template arguments that differ) and, if still
    equal, ``" #hhhh"`` (a hash of the full name, stable across reports). Same index as
    ``names``; computed once per distinct name, so a 1M-row column costs its distinct names."""
    values = names.astype(str)
    distinct = pd.unique(values.to_numpy())
    short = {n: short_kernel_name(n) for n in distinct}
    groups: dict[str, list[str]] = {}
    for full, s in short.items():
        groups.setdefault(s, []).append(full)
    label = dict(short)
    for s, members in groups.items():
        if len(members) < 2:
            continue
        tags = _tags(members)
        for full in members:
            label[full] = f"{s} [{tags[full]}]" if tags[full] else s
    _make_unique(label)
    # the names' own string dtype even when empty (pandas 3.0 maps an empty str column to float64)
    return pd.Series(values.map(label).to_numpy(), index=names.index, name="short_name",
                     dtype=values.dtype)  # fmt: skip
