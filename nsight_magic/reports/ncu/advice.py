"""ncu's own advice: the rule results Nsight Compute stored with each profiled launch, as a frame.

Rules run when ncu profiles with sections (``--set``, ``--section``): each writes a message
(info, optimization hint, warning), often an estimated speedup and the metrics it looked at.
Nothing is recomputed here; values are ncu's. Messages link to sections and pages with markup
(``@section:LaunchStats:Launch Statistics@``, ``@url:Profiling Guide:https://...@``); they are
rewritten the way ncu's own text output prints them ("Launch Statistics",
"Profiling Guide (https://...)").
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["ADVICE_COLUMNS", "advice_frame", "advice_note", "plain_text"]

ADVICE_COLUMNS = [
    "launch",
    "name",
    "rule",
    "section",
    "title",
    "message",
    "speedup_pct",
    "speedup_type",
    "severity",
    "section_name",
    "focus_metrics",
]

# ncu_report.MsgType: NONE=0 (no message: ncu prints nothing), OK=1 (printed "INF"),
# OPTIMIZATION=2 ("OPT"), WARNING=3 ("WRN"), ERR=4 ("ERR").
SEVERITY = {1: "info", 2: "optimization", 3: "warning", 4: "error"}
# ncu_report.SpeedupType: UNKNOWN=0, LOCAL=1 (printed "Est. Local Speedup": gain of the unit the
# rule looks at), GLOBAL=2 ("Est. Speedup": less run time of the whole kernel).
SPEEDUP_TYPE = {1: "local", 2: "global"}

# Link markup in rule messages (ncu_report's rule_results_as_dicts docstring lists these four).
_MARKUP = [
    (re.compile(r"@url:([^:@]*):([^@]*)@"), r"\1 (\2)"),
    (re.compile(r"@section:[^:@]*:([^@]*)@"), r"\1"),
    (re.compile(r"@sass:[^:@]*:([^@]*)@"), r"\1"),
    (re.compile(r"@source:[^:@]*:[^:@]*:([^@]*)@"), r"\1"),
]


def plain_text(text: str) -> str:
    """ncu's link markup rewritten as its text output prints it."""
    for pattern, repl in _MARKUP:
        text = pattern.sub(repl, text)
    return text


def advice_frame(names: Sequence[str], rules: Sequence[Sequence[dict[str, Any]]]) -> pd.DataFrame:
    """One row per rule result per launch (``rules[launch]``, as ``extract`` saves them; launch
    ``i`` is named ``names[i]``): ``launch, name, rule, section, title, message, speedup_pct,
    speedup_type, severity, section_name, focus_metrics``.

    ``rule``/``section`` are ncu's identifiers (``IssueSlotUtilization``, ``SchedulerStats``),
    ``section_name`` the section's display name; ``speedup_pct`` ncu's estimate (NaN when the
    rule gives none), ``speedup_type`` "global" (whole kernel) / "local" (the unit the rule
    looks at) / ""; ``severity`` "info" / "optimization" / "warning" / "error";
    ``focus_metrics`` a tuple of ``(metric, value, guidance)``. Rules that produced no message
    (ncu prints nothing for them) are left out. Ranked by estimated speedup, largest first;
    rows without an estimate last, in report order."""
    rows = []
    for launch, launch_rules in enumerate(rules):
        for rule in launch_rules:
            severity = SEVERITY.get(int(rule["type"]))
            if severity is None or not rule["message"]:
                continue
            speedup = rule["speedup"]
            rows.append(
                {
                    "launch": launch,
                    "name": names[launch],
                    "rule": rule["rule"],
                    "section": rule["section"],
                    "title": plain_text(rule["title"]),
                    "message": plain_text(rule["message"]),
                    "speedup_pct": math.nan if speedup is None else float(speedup),
                    "speedup_type": SPEEDUP_TYPE.get(int(rule["speedup_type"]), "")
                    if speedup is not None
                    else "",
                    "severity": severity,
                    "section_name": rule["section_name"],
                    "focus_metrics": tuple(
                        (str(m), float(v), plain_text(str(g))) for m, v, g in rule["focus"]
                    ),
                }
            )
    frame = pd.DataFrame(rows, columns=ADVICE_COLUMNS)
    frame = frame.astype({"launch": np.int64, "speedup_pct": np.float64})
    frame = frame.sort_values("speedup_pct", ascending=False, na_position="last", kind="stable")
    return frame.reset_index(drop=True)


def advice_note(
    advice: pd.DataFrame, rules_supported: bool, sections: Sequence[Sequence[str]]
) -> str:
    """Why :func:`advice_frame` is empty ("" when it is not): the ncu_report module cannot read
    rules, or the report was collected without sections (``sections[launch]`` = the section
    names of that launch), so ncu ran no rules."""
    if len(advice):
        return ""
    if not rules_supported:
        return (
            "The installed ncu_report module cannot read rule results (it has no "
            "IAction.rule_results_as_dicts); update it with `pip install -U ncu-report`."
        )
    metrics_only = all(set(names) <= {"Command line profiler metrics"} for names in sections)
    if metrics_only:
        return (
            "ncu ran no rules for this report: it was collected with --metrics only, and rules "
            "run with sections; profile with --set basic|full (or --section) to get advice."
        )
    return "ncu's rules found nothing to report for these launches."
