"""argv for ``ncu`` over a generated cell script, with kernel names and NVTX ranges escaped.

Kernel filter: ``--kernel-name regex:^...$`` with only the regex syntax characters escaped
(``\\^$.|?*+()[]{}``): Python's ``re`` and ncu's ECMAScript-style engine then read the pattern
the same way, whereas ``re.escape`` also escapes spaces etc., which some engines reject.

NVTX filter grammar (ncu docs, "NVTX Filtering"): ``[domain@]range`` where ``@`` separates
the domain, push/pop ranges end with ``/`` (and ``/`` separates nested push/pop ranges), a
trailing ``]`` means top of stack. A literal ``@``, ``/`` or ``\\`` inside a name is escaped
with a backslash.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..nvtx_names import CELL_RANGE, NVTX_DOMAIN

CELL_FILTER = f"{NVTX_DOMAIN}@{CELL_RANGE}/"
REGEX_SPECIAL = frozenset("\\^$.|?*+()[]{}")
NVTX_SPECIAL = frozenset("\\@/")


def regex_escape(text: str) -> str:
    """Backslash the regex syntax characters only (see module doc)."""
    return "".join("\\" + c if c in REGEX_SPECIAL else c for c in text)


def exact_kernel_regex(name: str) -> str:
    """An anchored regex matching exactly ``name`` (nothing longer, nothing similar)."""
    return f"^{regex_escape(name)}$"


def kernel_name_base(name: str) -> str:
    """Which name ncu should compare: ``mangled`` for ``_Z...``, ``demangled`` for a full
    signature (has ``(`` or template ``<``/``::``), else the bare ``function`` name."""
    if name.startswith("_Z"):
        return "mangled"
    if any(tok in name for tok in ("(", "<", "::")):
        return "demangled"
    return "function"


def kernel_filter_args(name: str) -> list[str]:
    """``--kernel-name-base B --kernel-name regex:^name$`` for one exact kernel name."""
    return [
        "--kernel-name-base",
        kernel_name_base(name),
        "--kernel-name",
        "regex:" + exact_kernel_regex(name),
    ]


def escape_nvtx_name(name: str) -> str:
    """Escape ``\\``, ``@`` and ``/`` so ncu reads ``name`` as one literal range/domain name."""
    return "".join("\\" + c if c in NVTX_SPECIAL else c for c in name)


def nvtx_filter(
    ranges: str | Sequence[str], *, domain: str | None = None, push_pop: bool = True
) -> str:
    """Filter for a range (or nested push/pop ranges, outermost first) in ``domain`` (None =
    the default domain). Push/pop ranges get the trailing ``/``; start/end ranges do not."""
    parts = [ranges] if isinstance(ranges, str) else list(ranges)
    if not parts or any(p == "" for p in parts):
        raise ValueError("NVTX range names must be non-empty")
    if not push_pop and len(parts) > 1:
        raise ValueError("only push/pop ranges nest")
    body = "/".join(escape_nvtx_name(p) for p in parts) + ("/" if push_pop else "")
    return (escape_nvtx_name(domain) + "@" if domain else "") + body


def parse_nvtx_filter(text: str) -> tuple[str | None, list[str], bool]:
    """Inverse of ``nvtx_filter``: ``(domain, ranges, push_pop)``; used to check escaping."""
    tokens: list[str] = []
    seps: list[str] = []
    cur, i = "", 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur += text[i + 1]
            i += 2
            continue
        if c in "@/":
            tokens.append(cur)
            seps.append(c)
            cur = ""
        else:
            cur += c
        i += 1
    tokens.append(cur)
    domain = None
    if seps and seps[0] == "@":
        domain = tokens.pop(0)
        seps.pop(0)
    push_pop = bool(seps) and tokens[-1] == ""
    if push_pop:
        tokens.pop()
    return domain, tokens, push_pop


def profile_argv(
    ncu: str | os.PathLike[str],
    report_base: str | os.PathLike[str],
    script: str | os.PathLike[str],
    *,
    python: str = sys.executable,
    set: str | None = "roofline",
    sections: Sequence[str] = (),
    metrics: Sequence[str] = (),
    kernel_regex: str | None = None,
    kernel_exact: str | None = None,
    launch_skip: int | None = None,
    launch_count: int | None = None,
    nvtx_include: str | None = CELL_FILTER,
    extra_args: Sequence[str] = (),
    script_args: Sequence[str] = (),
) -> list[str]:
    """``ncu --target-processes all [--nvtx --nvtx-include F] [--set S] ... -f -o REPORT
    [extra] python script``. ``kernel_exact`` is a name (escaped and anchored here);
    ``kernel_regex`` is the user's own regex, passed as is."""
    if kernel_regex and kernel_exact:
        raise ValueError("give kernel_regex or kernel_exact, not both")
    argv = [os.fspath(ncu), "--target-processes", "all"]
    if nvtx_include:
        argv += ["--nvtx", "--nvtx-include", nvtx_include]
    if set:
        argv += ["--set", set]
    for section in sections:
        argv += ["--section", section]
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    if kernel_exact:
        argv += kernel_filter_args(kernel_exact)
    elif kernel_regex:
        argv += ["--kernel-name", "regex:" + kernel_regex]
    for flag, value in (("--launch-skip", launch_skip), ("--launch-count", launch_count)):
        if value is not None:
            if int(value) < 0:
                raise ValueError(f"{flag} must be >= 0")
            argv += [flag, str(int(value))]
    argv += [
        "-f",
        "-o",
        os.fspath(report_base),
        *extra_args,
        python,
        os.fspath(script),
        *script_args,
    ]
    return argv
