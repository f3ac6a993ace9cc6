"""NVTX range specs as the NVTX tab and `nsys stats` print them, resolved on real reports."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from nsight_magic.analysis.range_spec import (
    NvtxRange,
    matches_spec,
    resolve_nvtx_range,
    target_hint,
    target_notes,
)
from nsight_magic.errors import AmbiguousNvtxRangeError, NvtxRangeError, NvtxRangeNotFoundError
from nsight_magic.reports.nsys.report import NsysReport


@pytest.fixture(scope="module")
def small(data_dir: Path) -> pd.DataFrame:
    return NsysReport.open(data_dir / "nsys_small.sqlite").nvtx()


@pytest.fixture(scope="module")
def llm(data_dir: Path) -> pd.DataFrame:
    return NsysReport.open(data_dir / "nsys_llm.sqlite").nvtx()


def test_labels_as_nsys_stats_prints_them(small, llm, data_dir):
    assert resolve_nvtx_range(small, ":decode") == ("", "decode", "PushPop")
    assert resolve_nvtx_range(small, "nsight_magic:cell") == ("nsight_magic", "cell", "PushPop")
    # a range *named* "LLM@prefill" in domain LLM, as nvtx_gpu_proj_sum prints it
    found = resolve_nvtx_range(llm, "LLM:LLM@prefill")
    assert found == NvtxRange("LLM", "LLM@prefill", "PushPop") and found.label == "LLM:LLM@prefill"
    # every label of nsys's own projection resolves to itself
    ref = pd.read_csv(data_dir / "nsys_stats" / "nsys_llm_nvtx_gpu_proj_sum.csv")
    for label, style in zip(ref["Range"], ref["Style"], strict=True):
        found = resolve_nvtx_range(llm, label)
        assert (found.label, found.style) == (label, style)


def test_bare_names_in_any_domain(small, llm):
    assert resolve_nvtx_range(small, "LLM@prefill") == ("", "LLM@prefill", "PushPop")
    assert resolve_nvtx_range(llm, "LLM@prefill") == ("LLM", "LLM@prefill", "PushPop")
    assert resolve_nvtx_range(llm, "generate") == ("LLM", "generate", "StartEnd")
    # a range whose own text holds ":" is still found by its bare name
    statement = "L3: for step in range(3): ..."
    assert resolve_nvtx_range(small, statement).domain == "nsight_magic"


def test_ambiguous_names_list_the_choices(small, llm):
    both = pd.concat([small, llm], ignore_index=True)  # "decode" in the default domain and LLM
    with pytest.raises(AmbiguousNvtxRangeError) as info:
        resolve_nvtx_range(both, "decode")
    assert info.value.matches == [":decode", "LLM:decode"]
    assert "':decode', 'LLM:decode'" in str(info.value)
    assert resolve_nvtx_range(both, "LLM:decode").domain == "LLM"
    # one name in both styles: the labels carry the style, and the listed label resolves
    styles = pd.concat([small, small.assign(style="StartEnd")], ignore_index=True)
    with pytest.raises(AmbiguousNvtxRangeError) as info:
        resolve_nvtx_range(styles, ":decode")
    assert info.value.matches == [":decode (PushPop)", ":decode (StartEnd)"]
    assert resolve_nvtx_range(styles, ":decode (StartEnd)").style == "StartEnd"


def test_not_found_lists_what_the_report_has(small):
    with pytest.raises(NvtxRangeNotFoundError) as info:
        resolve_nvtx_range(small, "prefil")
    message = str(info.value)
    assert "No NVTX range 'prefil'" in message and "':LLM@prefill'" in message
    assert "'nsight_magic:cell'" in message and len(info.value.matches) == 11  # distinct
    assert isinstance(info.value, LookupError) and isinstance(info.value, NvtxRangeError)
    with pytest.raises(NvtxRangeNotFoundError, match="it has none"):
        resolve_nvtx_range(small.iloc[:0], "cell")


# %%ncu --nvtx: the cell script compares the user's text with each range as it opens
# (matches_spec); these are the rules it must share with resolve_nvtx_range.


def _ranges(frame: pd.DataFrame) -> list[NvtxRange]:
    distinct = frame[["domain", "range", "style"]].drop_duplicates()
    return [NvtxRange(*map(str, row)) for row in distinct.itertuples(index=False)]


def test_the_scripts_rule_agrees_with_the_resolver(small, llm):
    """Every spelling of every range of two real reports: where the resolver names one range,
    the script's rule matches it (and the resolver's unique answer is the rule's only match
    unless a name is also another range's label)."""
    for frame in (small, llm):
        ranges = _ranges(frame)
        for r in ranges:
            for spec in (r.label, f"{r.label} ({r.style})", r.range):
                matched = [o for o in ranges if matches_spec(spec, o)]
                try:
                    found = resolve_nvtx_range(frame, spec)
                except AmbiguousNvtxRangeError as exc:
                    assert len(matched) >= 2 and len(exc.matches) >= 2
                    continue
                assert found in matched
                assert len(matched) == 1 or spec == r.range  # a bare name may name more


def test_names_with_at_colon_and_regex_characters_match_as_plain_text():
    odd = [
        NvtxRange("LLM", "LLM@prefill", "PushPop"),
        NvtxRange("", "a:b", "PushPop"),  # a default-domain range whose text holds ':'
        NvtxRange("a", "b", "StartEnd"),
        NvtxRange("x.y", "step[0]*(1+2)?^$|\\", "PushPop"),
        NvtxRange("", "LLM@prefill", "StartEnd"),
    ]

    def names(spec: str) -> list[str]:
        return [f"{r.label} ({r.style})" for r in odd if matches_spec(spec, r)]

    assert names("LLM:LLM@prefill") == ["LLM:LLM@prefill (PushPop)"]
    assert names("LLM@prefill") == ["LLM:LLM@prefill (PushPop)", ":LLM@prefill (StartEnd)"]
    assert names(":LLM@prefill") == [":LLM@prefill (StartEnd)"]
    assert names(":a:b") == [":a:b (PushPop)"]
    assert names("a:b") == [":a:b (PushPop)", "a:b (StartEnd)"]  # label and bare name
    assert names("a:b (StartEnd)") == ["a:b (StartEnd)"]
    assert names("step[0]*(1+2)?^$|\\") == ["x.y:step[0]*(1+2)?^$|\\ (PushPop)"]
    assert names("x.y:step[0]*(1+2)?^$|\\") == names("step[0]*(1+2)?^$|\\")
    assert names("step.0.") == [] and names("LLM") == [] and names("prefill") == []


def test_what_nvtx_says_when_its_range_never_opened(llm):
    ranges = _ranges(llm)
    hint = target_hint("prefill", ranges, [], 0)
    assert hint.startswith("The cell opened no range named 'prefill'; it opened ")
    assert "'LLM:LLM@prefill (PushPop)'" in hint and "'LLM:generate (StartEnd)'" in hint
    assert hint.endswith("Use --nvtx 'LLM:LLM@prefill'.")
    assert "no kernel inside" in target_hint("LLM@prefill", ranges, [["LLM", "LLM@prefill",
                                                                      "PushPop"]], 3)  # fmt: skip
    assert "opened 3 time(s)" in target_hint("x", ranges, [["LLM", "x", "PushPop"]], 3)
    assert "opened no NVTX range" in target_hint("x", [], [], 0)


def test_a_name_in_two_domains_is_profiled_in_both_and_said_once():
    target = {"spec": "decode", "matched": [["", "decode", "PushPop"],
                                            ["LLM", "decode", "PushPop"]], "opened": 4}  # fmt: skip
    (note,) = target_notes(target)
    assert note.startswith("--nvtx 'decode' named 2 ranges (':decode', 'LLM:decode')")
    assert "DOMAIN:RANGE" in note
    assert target_notes({"spec": "x", "matched": [["", "x", "PushPop"]], "opened": 1}) == []
    assert target_notes(None) == []


def test_a_name_in_both_styles_is_listed_and_suggested_with_its_style():
    both = [NvtxRange("D", "x", "PushPop"), NvtxRange("D", "x", "StartEnd")]
    hint = target_hint("x (PushPop)", both, [], 0)  # the domain left out
    assert "'D:x (PushPop)', 'D:x (StartEnd)'" in hint and "(PushPop) (PushPop)" not in hint
    assert hint.endswith("Use --nvtx 'D:x (PushPop)'.")
