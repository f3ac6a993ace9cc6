"""Statement order and range scopes on the real reports' NVTX projections."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from nsight_magic.analysis.statements import nvtx_scope, ordered_projection, statement_lines
from nsight_magic.reports.nsys.report import NsysReport


def test_cell_first_then_statements_by_line_then_user_ranges_by_gpu_time(data_dir: Path):
    projection = NsysReport.open(data_dir / "nsys_small.sqlite").nvtx_gpu_projection()
    ordered = ordered_projection(projection)
    assert ordered["range"].tolist() == [
        "cell",
        "L2: x = h.to(dev, non_blocking=True)",
        "L3: for step in range(3): ...",
        "L4: side stream",
        "L5: out = y.cpu()",
        # the user's ranges by GPU-projected time (decode and decode/step tie: by label)
        "LLM@prefill", "decode", "decode/step", "side-work", "cub::DeviceScan::InclusiveScan",
    ]  # fmt: skip
    assert ordered["scope"].tolist() == ["cell"] + ["statement"] * 4 + ["user"] * 5
    assert ordered["line"].tolist()[:5] == [pd.NA, 2, 3, 4, 5]
    assert ordered["line"].iloc[5:].isna().all()
    # same rows and columns as the projection, plus scope and line
    assert sorted(ordered["proj_total_ns"]) == sorted(projection["proj_total_ns"])
    assert list(ordered.columns) == [*projection.columns, "scope", "line"]


def test_scopes_by_domain_not_by_name(data_dir: Path):
    nvtx = NsysReport.open(data_dir / "nsys_llm.sqlite").nvtx()
    scope = nvtx_scope(nvtx)
    # "LLM@prefill" in domain LLM looks like nothing of ours; "cell" is only ours in our domain
    assert set(scope[nvtx["domain"] == "LLM"]) == {"user"}
    assert (scope[nvtx["domain"] == "nsight_magic"] != "user").all()
    fake = pd.DataFrame({"domain": ["", "nsight_magic", "nsight_magic"],
                         "range": ["cell", "warmup", "L7: y = f(x)"]})  # fmt: skip
    assert nvtx_scope(fake).tolist() == ["user", "warmup", "statement"]
    assert statement_lines(fake).tolist() == [pd.NA, pd.NA, 7]
    assert ordered_projection(fake.iloc[:0].assign(proj_total_ns=[])).empty
