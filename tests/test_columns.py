"""The column registry (nsight_magic/vocabulary/columns.py) against what the code really returns:
every public frame method of the run objects, their reports and the frames the views read, called on
every real fixture in tests/data, returns only registered columns of the registered dtype; and
the views' tables take their headers and formats from the registry and fail loudly on a column
that is unknown or missing (a renamed column must fail a test, not vanish from a table)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import nsight_magic
from nsight_magic.errors import CorruptReportError
from nsight_magic.reports import open_report
from nsight_magic.results import NcuRun, NsysRun
from nsight_magic.results.comparison import compare
from nsight_magic.views import html, ncu_view, nsys_view, ops_view, ranks_view
from nsight_magic.views.common import STRICT_ENV, attempt, table_or_note
from nsight_magic.vocabulary.columns import _SUFFIXES, COLUMNS, UnknownColumnError, column

DATA = Path(__file__).parent / "data"
NSYS_FIXTURES = sorted(p.stem for p in DATA.glob("*.sqlite"))
# Methods that are not frame getters (they act, draw, or need an argument we cannot invent).
NOT_FRAMES = {
    "widget", "to_html", "profile_kernel", "profile_range", "profile_top", "chart", "nvtx_chart",
    "roofline_chart", "resolve_nvtx_range", "kernels_in_range", "instances", "open_in_gui",
    "gui_command",
}  # fmt: skip
ARGS = {"gaps": (nsys_view.MIN_GAP_NS,), "sections": (0,)}


def frames_of(obj: Any, where: str) -> Iterator[tuple[str, pd.DataFrame]]:
    """(``Class.method[key]``, frame) for every public method of ``obj`` that returns frames
    (a frame, a tuple or a dict of them) when called with no argument (or its ``ARGS``)."""
    for name in dir(obj):
        if name.startswith("_") or name in NOT_FRAMES:
            continue
        method = getattr(obj, name)
        if not callable(method) or inspect.isclass(method):
            continue
        params = inspect.signature(method).parameters.values()
        required = [p for p in params if p.default is p.empty and p.kind is not p.VAR_POSITIONAL]
        required = [p for p in required if p.kind is not p.VAR_KEYWORD]
        if required and name not in ARGS:
            continue
        value = method(*ARGS.get(name, ()))
        items = value.items() if isinstance(value, dict) else enumerate(value) if (
            isinstance(value, tuple)) else [("", value)]  # fmt: skip
        for key, frame in items:
            if isinstance(frame, pd.DataFrame):
                yield f"{where}.{name}" + (f"[{key}]" if key != "" else ""), frame


def dtype_ok(series: pd.Series, dtype: str) -> bool:
    if dtype == "object":
        return True
    if series.empty and series.dtype == object:  # an empty frame's column may be untyped
        return True
    kinds = {
        "int": pd.api.types.is_integer_dtype,
        "float": pd.api.types.is_float_dtype,
        "bool": pd.api.types.is_bool_dtype,
        "str": lambda s: pd.api.types.is_string_dtype(s) or s.dtype == object,
    }
    return bool(kinds[dtype](series))


def contract_errors(frames: Iterator[tuple[str, pd.DataFrame]]) -> list[str]:
    errors, seen = [], 0
    for where, frame in frames:
        seen += 1
        for name in frame.columns:
            if name not in COLUMNS:
                errors.append(f"{where}: column {name!r} is not registered")
            elif not dtype_ok(frame[name], COLUMNS[name].dtype):
                want = COLUMNS[name].dtype
                errors.append(f"{where}: {name!r} is {frame[name].dtype}, registered {want}")
    assert seen > 0, "no frame was read"
    return errors


# Columns every frame of a multi-rank run may carry (the class docstrings say so once).
MERGED_KEYS = {"report", "rank"}


def docstring_errors(frames: Iterator[tuple[str, pd.DataFrame]], obj: Any) -> list[str]:
    """The columns a public frame method returns but its docstring does not name: each method
    of the run objects states its columns (and their units), so a renamed column fails here
    too until its documentation follows."""
    errors = []
    for where, frame in frames:
        method = where.split(".")[1].split("[")[0]
        words = set(re.findall(r"\w+", inspect.getdoc(getattr(obj, method)) or ""))
        missing = [c for c in frame.columns if c not in words and c not in MERGED_KEYS]
        if missing:
            errors.append(f"{where}'s docstring does not name {missing}")
    return errors


def test_a_repeated_runs_frames_are_registered_and_documented() -> None:
    """A ``%%nsys --repeat 5`` run (tests/data/repeat_runs/small): its per-repeat columns and
    ``repeats()`` registered with their dtypes, and named by each method's docstring."""
    import nsight_magic

    run = nsight_magic.load_run(DATA / "repeat_runs" / "small")
    assert "repeat_mean_ns" in run.kernel_summary().columns
    assert contract_errors(frames_of(run, "NsysRun")) == []
    assert docstring_errors(frames_of(run, "NsysRun"), run) == []


@pytest.mark.parametrize("fixture", NSYS_FIXTURES)
def test_every_nsys_frame_column_is_registered_with_its_dtype(fixture: str, tmp_path: Path) -> None:
    run = NsysRun(open_report(DATA / f"{fixture}.sqlite"), tmp_path, {"name": fixture})

    def frames() -> Iterator[tuple[str, pd.DataFrame]]:
        yield from frames_of(run, "NsysRun")
        yield from frames_of(run.report, "NsysReport")
        yield from frames_of(run.frames, "NsysFrames")
        ranks = run.frames.ranks()
        if ranks is not None:
            yield from frames_of(ranks, "RankFrames")

    assert contract_errors(frames()) == []
    assert docstring_errors(frames_of(run, "NsysRun"), run) == []


def test_merged_ranks_and_compare_frames_are_registered() -> None:
    merged = nsight_magic.load_runs([DATA / "nsys_2rank_r0.sqlite", DATA / "nsys_2rank_r1.sqlite"])
    ranks = merged.frames.ranks()
    assert ranks is not None
    cmp = compare(DATA / "nsys_small.sqlite", DATA / "nsys_gemm.sqlite")

    def frames() -> Iterator[tuple[str, pd.DataFrame]]:
        yield from frames_of(merged.report, "RankedReport")
        yield from frames_of(ranks, "RankFrames")
        yield from [("Comparison.kernels", cmp.kernels), ("Comparison.nvtx", cmp.nvtx)]

    assert contract_errors(frames()) == []


def test_every_ncu_frame_column_is_registered_with_its_dtype(
    ncu_reports: dict[str, Path],
) -> None:
    def frames() -> Iterator[tuple[str, pd.DataFrame]]:
        for name, path in ncu_reports.items():
            run = NcuRun(open_report(path), meta={"name": name})
            yield from frames_of(run, "NcuRun")
            yield from frames_of(run.report, "NcuReport")
            yield from frames_of(run.frames, "NcuFrames")

    assert contract_errors(frames()) == []
    for name, path in ncu_reports.items():
        run = NcuRun(open_report(path), meta={"name": name})
        assert docstring_errors(frames_of(run, "NcuRun"), run) == []


def test_registry_agrees_with_the_suffixes_and_the_formatters() -> None:
    for name, spec in COLUMNS.items():
        assert spec.name == name
        assert spec.format == "text" or spec.format in html.FORMATTERS, name
        suffix = max((s for s in _SUFFIXES if name.endswith(s)), key=len, default=None)
        if suffix == "_per_s":  # a rate of something: FLOP/s, B/s
            assert spec.unit.endswith("/s"), name
        elif suffix is not None:  # a suffix is a promise: its unit (a float average is fine)
            assert spec.unit == _SUFFIXES[suffix][1], name
    with pytest.raises(UnknownColumnError, match="median_ns"):
        column("median_ns")


# A roofline ceiling's ``peak`` is FLOP/s or B/s (its ``unit`` column says which).
RATES_WITHOUT_SUFFIX = {"peak"}


def test_a_columns_name_says_its_unit() -> None:
    """The naming rule (vocabulary/columns.py's docstring): a percent ends in ``_pct``, a fraction
    in ``_frac``, a rate in ``_per_s`` (GB/s: ``_gb_per_s``, never the gigabit-looking ``gbps``)."""
    for name, spec in COLUMNS.items():
        if spec.unit == "%":
            assert name.endswith("_pct") or name == "pct", name
        if spec.unit == "fraction" or spec.format == "fraction":
            assert name.endswith("_frac"), name
        if spec.unit.endswith("/s") and name not in RATES_WITHOUT_SUFFIX:
            assert name.endswith("_per_s"), name
        assert "gbps" not in name, name
    old_names = ("hfu", "mfu", "achieved_flops_per_s", "bandwidth_gbps", "peak_flops",
                 "pct_of_ceiling", "before", "after", "before_short", "after_short", "flops_fp32",
                 "peak_fp32", "flops_tensor", "peak_tensor", "flops_total")  # fmt: skip
    assert not set(old_names) & set(COLUMNS)


def test_every_column_a_view_shows_is_registered() -> None:
    tables: list[tuple[str, ...]] = [
        nsys_view.KERNEL_COLUMNS, nsys_view.GRAPH_COLUMNS, nsys_view.PROCESS_COLUMNS,
        nsys_view.NVTX_COLUMNS, nsys_view.MEMORY_COLUMNS, nsys_view.GAP_COLUMNS,
        (nsys_view.GRAPH_NODE_COLUMN,), ncu_view.LAUNCH_COLUMNS, ncu_view.VERDICT_COLUMNS,
        *ncu_view.MFU_COLUMNS.values(), ncu_view.SECTION_COLUMNS, ops_view.OP_COLUMNS,
        ranks_view.BUSY_COLUMNS, ranks_view.KERNEL_COLUMNS, ranks_view.COLLECTIVE_COLUMNS,
        ranks_view.NCCL_KERNEL_COLUMNS, ranks_view.SKEW_COLUMNS,
    ]  # fmt: skip
    for table in tables:
        for name in table:
            column(name)


@pytest.fixture(scope="module")
def kernel_table(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    run = NsysRun(open_report(DATA / "nsys_small.sqlite"), tmp_path_factory.mktemp("run"), {})
    return run.frames.kernel_table()


def test_a_table_takes_headers_and_formats_from_the_registry(kernel_table: pd.DataFrame) -> None:
    out = html.frame_html(kernel_table, ("short_name", "med_ns", "time_pct"), max_rows=1)
    assert ">kernel</th>" in out and ">median</th>" in out and ">time %</th>" in out
    first = kernel_table.iloc[0]
    assert html.fmt_ns(first["med_ns"]) in out and html.fmt_pct(first["time_pct"]) in out
    renamed = html.frame_html(kernel_table, ("med_ns",), headers={"med_ns": "p50"})
    assert ">p50</th>" in renamed


def test_an_unknown_or_missing_column_raises_and_optional_is_left_out(
    kernel_table: pd.DataFrame,
) -> None:
    with pytest.raises(UnknownColumnError, match="median_ns"):
        html.frame_html(kernel_table, ("short_name", "median_ns"))
    with pytest.raises(html.MissingColumnError, match="'rank'"):
        html.frame_html(kernel_table, ("rank", "short_name"))
    out = html.frame_html(kernel_table, ("rank", "short_name"), optional=("rank",))
    assert ">rank</th>" not in out and ">kernel</th>" in out


def test_attempt_reraises_all_but_report_errors_in_strict_mode(
    kernel_table: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    def bad_table() -> str:
        return html.frame_html(kernel_table, ("median_ns",))

    def damaged() -> Any:
        raise CorruptReportError("table KERNEL is damaged")

    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(UnknownColumnError):
        table_or_note(bad_table)
    assert attempt(damaged) == (None, "CorruptReportError: table KERNEL is damaged")
    # What a user sees (no strict mode): one line where the table would be, every other tab kept.
    monkeypatch.delenv(STRICT_ENV)
    assert "is not in nsight_magic/vocabulary/columns.py" in table_or_note(bad_table)
