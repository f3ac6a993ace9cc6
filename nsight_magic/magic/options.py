"""Checks of the magics' options and how a cell that does not parse is shown: every mistake a
user can type is one line (an IPython ``UsageError`` for options, ``CellSyntaxError`` for cells),
never a traceback of our internals."""

from __future__ import annotations

import argparse
import builtins
import difflib
import keyword
import math
import re
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from IPython.core.error import UsageError

from ..session.spec import MAX_REPEAT, MAX_WARMUP
from ..vocabulary.reserved_names import reserved_why


def split_extra(line: str) -> tuple[list[str], list[str]]:
    """Tokens before ``--`` are ours; after it they go to the profiler untouched."""
    from IPython.utils.process import arg_split

    try:
        line.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"the options hold a character that is not valid Unicode ({line[exc.start]!r}, a lone "
            "surrogate); remove it."
        ) from None
    try:
        tokens = arg_split(line, posix=True)
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(f"cannot read the options {line.strip()!r}: {exc}") from None
    if "--" in tokens:
        i = tokens.index("--")
        return tokens[:i], tokens[i + 1 :]
    return tokens, []


# ncu 2025.3.1's own `ncu --list-sets` / `--list-sections` (tests/data/ncu_lists; a test checks
# these against that output). Used only to catch a near miss before any profiler is looked for:
# a name far from all of them may be a set of a newer ncu or of a --section-folder, which the
# session checks against the ncu it finds.
NCU_SETS = ("basic", "detailed", "full", "nvlink", "pmsampling", "roofline")
NCU_SECTIONS = (
    "C2CLink", "ComputeWorkloadAnalysis", "InstructionStats", "LaunchStats",
    "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Chart", "MemoryWorkloadAnalysis_Tables",
    "NumaAffinity", "Nvlink", "Nvlink_Tables", "Nvlink_Topology", "Occupancy", "PmSampling",
    "PmSampling_WarpStates", "SchedulerStats", "SourceCounters", "SpeedOfLight",
    "SpeedOfLight_HierarchicalDoubleRooflineChart", "SpeedOfLight_HierarchicalHalfRooflineChart",
    "SpeedOfLight_HierarchicalSingleRooflineChart", "SpeedOfLight_HierarchicalTensorRooflineChart",
    "SpeedOfLight_RooflineChart", "WarpStateStats", "WorkloadDistribution",
)  # fmt: skip


def nearest(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice spelled most like ``word`` (difflib's ratio, case-insensitive), or None."""
    by_folded = {c.casefold(): c for c in choices}
    found = difflib.get_close_matches(word.casefold(), list(by_folded), n=1, cutoff=cutoff)
    return by_folded[found[0]] if found else None


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    match = nearest(word, choices)
    return f"did you mean {match}?" if match else ""


def check_flags(parser: argparse.ArgumentParser, tokens: Sequence[str], magic: str) -> None:
    """Before argparse reads ``tokens``: an option the magic does not have, or a value outside
    an option's choices, is one UsageError with the nearest spelling (``--warmpu`` -> did you
    mean --warmup?). argparse would say only "unrecognized arguments"; an abbreviation it
    accepts (a unique prefix) is left to it. ``magic`` is the name the user typed."""
    actions = parser._option_string_actions  # argparse's own table: option string -> action
    flags = [f for f in actions if f.startswith("--")]
    expects_value: argparse.Action | None = None
    for token in tokens:
        if expects_value is not None:
            _check_choice(expects_value, token, magic)
            expects_value = None
            continue
        if not token.startswith("-") or token == "-" or re.fullmatch(r"-\d[\d.e+-]*", token):
            continue
        name, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        if not name.startswith("--") and name[:2] in actions and len(name) > 2:
            name, eq, value = name[:2], "=", name[2:]  # -oNAME: a short option's value attached
        action = actions.get(name)
        if action is None:
            if any(f.startswith(name) for f in flags) and name.startswith("--"):
                continue  # an abbreviation: argparse takes a unique one, names an ambiguous one
            hint = _did_you_mean(name, flags)
            raise UsageError(
                f"{magic} has no option {name}"
                + (f"; {hint}" if hint else "")
                + f" ({magic}? lists them; profiler arguments go after --)"
            )
        if action.nargs == 0:
            continue
        if eq:
            _check_choice(action, value, magic)
        else:
            expects_value = action


def _check_choice(action: argparse.Action, value: str, magic: str) -> None:
    if action.choices is None or value in action.choices:
        return
    flag = max(action.option_strings, key=len)
    choices = [str(c) for c in action.choices]
    hint = _did_you_mean(value, choices)
    raise UsageError(
        f"{magic} {flag} {value!r}: "
        + (f"{hint} " if hint else "")
        + f"({flag} takes {', '.join(choices)})"
    )


def check_ncu_values(
    set_name: str | None,
    sections: Sequence[str],
    kernel_regex: str | None,
    magic: str,
    extra: Sequence[str] = (),
) -> None:
    """``%%ncu``'s values that ncu alone would reject, checked before ncu is looked for: a set
    or section one typo away from ncu's own (``--set fulll`` -> did you mean full?), and a
    ``--kernel`` regex that does not compile (ncu reads it as an ECMAScript regex; Python's
    ``re`` refuses the same broken ones: unbalanced brackets and parentheses, a bad repeat).
    With ``-- --section-folder DIR`` in ``extra`` the sets and sections are that folder's:
    only ncu can say which it has."""
    own_sections = any(t.startswith("--section-folder") for t in extra)  # -recursive too
    for flag, value, known in (
        ("--set", set_name, NCU_SETS),
        *(("--section", section, NCU_SECTIONS) for section in sections),
    ):
        if own_sections:
            break
        if not value or value == "none" or value in known:
            continue
        match = nearest(value, known, cutoff=0.75)
        if match:
            raise UsageError(f"{magic} {flag} {value!r}: did you mean {match}?")
    if kernel_regex:
        try:
            re.compile(kernel_regex)
        except re.error as exc:
            raise UsageError(
                f"{magic} --kernel {kernel_regex!r} is not a valid regex: {exc}. Escape regex "
                "characters such as ( [ * with a backslash, or pick the kernel by its exact "
                "name in the view's picker."
            ) from None


def typed_flag(tokens: Sequence[str], spellings: Sequence[str]) -> str:
    """Which of an option's ``spellings`` the user typed (``-o`` or ``--var``), for messages;
    the first spelling when none is found."""
    for token in tokens:
        name = token.partition("=")[0]
        if name in spellings:
            return name
        if not name.startswith("--") and name[:2] in spellings:
            return name[:2]  # -oNAME
    return spellings[0]


def check_common(
    timeout: float | None,
    env: Sequence[str],
    var: str | None,
    hidden: Collection[str],
    *,
    var_flag: str = "--var",
    name: str | None = None,
    warmup: int = 0,
    repeat: int = 1,
    settle: float | None = None,
) -> None:
    """``--timeout`` finite and > 0, ``--env`` items KEY=VALUE without NUL, ``-o NAME`` a plain
    identifier that hides nothing IPython or Python needs (``-o get_ipython`` would break every
    later magic, ``-o __builtins__`` every later cell); ``hidden`` is the shell's
    ``user_ns_hidden``; ``var_flag`` the spelling the user typed (``-o`` or ``--var``), which
    the messages name; ``--name`` without NUL; ``--warmup`` in 0..MAX_WARMUP; ``--repeat``
    in 1..MAX_REPEAT; ``--settle`` a temperature in (0, 120) °C."""
    if not 0 <= warmup <= MAX_WARMUP:
        raise UsageError(
            f"--warmup {warmup}: must be 0..{MAX_WARMUP} (each warm-up runs the whole cell "
            "before the capture)"
        )
    if settle is not None and not (math.isfinite(settle) and 0 < settle < 120):
        raise UsageError(f"--settle {settle}: give a temperature in °C, above 0 and below 120")
    if not 1 <= repeat <= MAX_REPEAT:
        raise UsageError(
            f"--repeat {repeat}: must be 1..{MAX_REPEAT} (each repeat runs the whole cell "
            "inside the capture)"
        )
    if name is not None and "\x00" in name:
        raise UsageError(f"--name {name!r}: holds a NUL character")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"--timeout {timeout}: must be a number of seconds > 0")
    for item in env:
        if "=" not in item or item.startswith("="):
            raise UsageError(f"--env {item!r}: expected KEY=VALUE")
        if "\x00" in item:
            raise UsageError(f"--env {item!r}: holds a NUL character")
    if var is None:
        return
    if not var.isidentifier() or keyword.iskeyword(var):
        # -o stores the result; --vars (one letter apart) sends variables to the worker
        hint = f" (to send variables to the worker: --vars {var})" if "," in var else ""
        raise UsageError(
            f"{var_flag} {var!r} is not a valid variable name: {var_flag} NAME stores the "
            f"result in notebook variable NAME{hint}"
        )
    if hasattr(builtins, var) or reserved_why(var, hidden) is not None:
        raise UsageError(
            f"{var_flag} {var!r} would hide a name IPython or Python itself uses; choose another"
        )


def show_syntax_error(shell: Any, etype: Any, value: Any, tb: Any, tb_offset: Any = None) -> Any:
    """IPython shows any SyntaxError with the whole stack of our internals: a cell that does
    not parse is one line, like every other typed error (the cell still fails). Registered
    for ``CellSyntaxError`` only (``magics.register``)."""
    stb = [f"nsight_magic: {value.one_line()}"]
    shell._showtraceback(etype, value, stb)  # how IPython itself shows (and a kernel sends) it
    return stb
