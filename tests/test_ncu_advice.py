"""NcuReport.advice() against ncu's own rule output for the same reports: every rule ncu printed
on its details page (tests/data/ncu_rules/, trimmed from `ncu --import X --page details
--print-rule-details yes`, ncu 2025.3.1) appears in ours with the same section, kind, message,
estimated speedup (to the digits ncu prints) and key performance indicators."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.reports.ncu.advice import ADVICE_COLUMNS, advice_frame, plain_text
from nsight_magic.reports.ncu.report import NcuReport

NAMES = ["ncu_small_roofline", "ncu_small_full", "ncu_gemm_metrics", "ncu_gemm_roofline"]
# The tag ncu's text output puts before a rule message, per our severity.
TAG = {"info": "INF", "optimization": "OPT", "warning": "WRN", "error": "ERR"}
RULE_LINE = re.compile(r"^    (OPT|INF|WRN|ERR)   (?:Est\. (Local )?Speedup: ([0-9.]+)%)?(.*)$")
INDENT = 10  # message lines and KPI tables sit 10 columns in


@dataclass
class PrintedRule:
    kernel: int
    section: str
    tag: str
    speedup: str | None  # as printed, e.g. "8.721"
    local: bool
    message: str
    kpis: list[tuple[str, str]] = field(default_factory=list)  # (metric, value as printed)


def squash(text: str) -> str:
    """Text without whitespace: ncu wraps messages at ~110 columns, long URLs mid-token."""
    return "".join(text.split())


def parse_rules(path: Path) -> tuple[list[str], list[PrintedRule]]:
    """Kernel header lines and the rules printed under them (see tools/fixtures/trim_ncu_rules.py
    for what the trimmed file keeps)."""
    kernels: list[str] = []
    rules: list[PrintedRule] = []
    section, in_kpis = "", False
    for line in path.read_text().splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            kernels.append(line.strip())
        elif line.startswith("    Section: "):
            section = line[len("    Section: ") :].strip()
        elif m := RULE_LINE.match(line):
            tag, local, speedup, text = m.groups()
            rules.append(PrintedRule(len(kernels) - 1, section, tag, speedup, bool(local), text))
            in_kpis = False
        elif line.strip().startswith("> Key Performance Indicators"):
            in_kpis = True
        elif in_kpis and line.startswith(" " * INDENT) and not line.strip().startswith("---"):
            name, value = line[INDENT:45].strip(), line[45:69].strip()
            if name == "Metric Name":
                continue
            if value:
                rules[-1].kpis.append((name, value))
            elif name:  # a long metric name wraps onto the next line
                last, printed = rules[-1].kpis[-1]
                rules[-1].kpis[-1] = (last + name, printed)
        elif rules and not in_kpis and line.startswith(" " * INDENT):
            rules[-1].message += " " + line.strip()
    for rule in rules:
        rule.message = squash(rule.message)
    return kernels, rules


@pytest.fixture(scope="module")
def reports(ncu_reports: dict[str, Path]) -> dict[str, NcuReport]:
    return {name: NcuReport.open(ncu_reports[name]) for name in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_every_rule_ncu_printed_is_in_advice(reports, data_dir, name):
    report = reports[name]
    kernels, printed = parse_rules(data_dir / "ncu_rules" / f"{name}.rules.txt")
    ours = report.advice()
    assert list(ours.columns) == ADVICE_COLUMNS
    # ncu's details page lists the launches in report order.
    assert len(kernels) == len(report)
    for launch, header in enumerate(kernels):
        assert report.kernels().at[launch, "name"] in header
    assert len(ours) == len(printed)  # nothing printed is missing, nothing extra
    unmatched = ours.assign(message=ours["message"].map(squash))
    for rule in printed:
        candidates = unmatched[
            (unmatched["launch"] == rule.kernel)
            & (unmatched["section_name"] == rule.section)
            & (unmatched["severity"].map(TAG) == rule.tag)
            & (unmatched["message"] == rule.message)
        ]
        assert len(candidates) >= 1, (rule.kernel, rule.section, rule.message[:80])
        row = candidates.iloc[0]
        if rule.speedup is None:
            assert np.isnan(row["speedup_pct"]) and row["speedup_type"] == ""
        else:
            assert f"{row['speedup_pct']:.4g}" == rule.speedup
            assert row["speedup_type"] == ("local" if rule.local else "global")
        focus = [(metric, f"{value:.6f}") for metric, value, _ in row["focus_metrics"]]
        assert focus == rule.kpis
        unmatched = unmatched.drop(index=candidates.index[0])
    assert unmatched.empty


def test_advice_ranks_by_estimated_speedup(reports):
    advice = reports["ncu_small_full"].advice()
    estimated = advice["speedup_pct"].notna()
    assert estimated.sum() == 31 and not estimated.iloc[: estimated.sum()].eq(False).any()
    assert advice.loc[estimated, "speedup_pct"].is_monotonic_decreasing
    top = advice.iloc[0]
    assert (top["launch"], top["rule"], top["section"]) == (
        2,
        "HighPipeUtilization",
        "ComputeWorkloadAnalysis",
    )
    assert top["speedup_type"] == "local" and top["title"] == "Low Utilization"
    assert set(advice["severity"]) == {"info", "optimization", "warning"}
    # Link markup is rewritten as ncu prints it, in every message and title.
    assert not advice["message"].str.contains("@section:|@url:", regex=True).any()
    assert advice["message"].str.contains("Launch Statistics").any()


def test_metrics_only_report_has_no_advice_and_says_why(reports):
    report = reports["ncu_gemm_metrics"]
    advice = report.advice()
    assert advice.empty and list(advice.columns) == ADVICE_COLUMNS
    assert "--metrics" in report.advice_note()
    assert reports["ncu_small_roofline"].advice_note() == ""


def test_message_markup_becomes_text():
    text = (
        "Look at @section:LaunchStats:Launch Statistics@ and the @url:Profiling Guide:"
        "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#roofline@, line "
        "@source:kernel.cu:42:kernel.cu:42@ at @sass:0x1f0:IMAD@."
    )
    assert plain_text(text) == (
        "Look at Launch Statistics and the Profiling Guide "
        "(https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#roofline), line "
        "kernel.cu:42 at IMAD."
    )


def test_rules_without_a_message_are_left_out():
    """ncu's UncoalescedSharedAccess rule can end with message type NONE and no text (seen on
    launch 1 of ncu_small_full): ncu prints nothing for it, so neither do we."""
    silent = {
        "rule": "UncoalescedSharedAccess",
        "name": "Uncoalesced Shared Accesses",
        "section": "SourceCounters",
        "section_name": "Source Counters",
        "title": "",
        "message": "",
        "type": 0,
        "speedup": None,
        "speedup_type": 0,
        "focus": [],
    }
    frame = advice_frame(["k"], [[silent]])
    assert frame.empty and list(frame.columns) == ADVICE_COLUMNS
    assert frame["launch"].dtype == np.int64 and frame["speedup_pct"].dtype == np.float64


def test_advice_rows_are_plain_values(reports):
    row = reports["ncu_small_roofline"].advice().iloc[0]
    assert isinstance(row["focus_metrics"], tuple)
    assert all(isinstance(v, float) for _, v, _ in row["focus_metrics"])
    assert isinstance(pd.Series(row).to_dict()["message"], str)
