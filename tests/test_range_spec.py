"""NVTX range specs as the NVTX tab and `nsys stats` print them, resolved on real reports."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from nsight_magic.analysis.range_spec import NvtxRange, resolve_nvtx_range
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
