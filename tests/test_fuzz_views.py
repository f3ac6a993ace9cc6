"""Views never raise: runs built from damaged copies of REAL fixtures that still open, shown every
way a notebook shows them (mimebundle in and out of a kernel, static HTML, widget).

nsys: a copy of a real report edited with 1-3 SQL damages (tables dropped or emptied, half the
rows cut, columns set to NULL, negative durations, far-off timestamps, names that are empty,
huge or HTML): ``nsys_small`` and the reports whose views have more tabs (``nsys_ops``: Ops;
``nsys_2rank``: Ranks and Processes; ``nsys_graphs_graph``: graph launches), and per-rank reports
merged by ``load_runs``. ncu: the plain data a real ``.ncu-rep`` was read into, edited the same way
(metrics removed such as ``gpu__time_duration.sum``, values set to NaN/None/text, launches or
sections dropped). A damage that makes the report refuse to open (a ``ReportError``) is fine;
anything else raised by a view fails. ``derandomize`` keeps CI repeatable; NSIGHT_MAGIC_FUZZ_SCALE
(``make fuzz``: 4) runs more (each example ~1 s: a view is built every way)."""

from __future__ import annotations

import contextlib
import copy
import math
import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nsight_magic
from nsight_magic import open_report
from nsight_magic.errors import ReportError
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.results import NcuRun, NsysRun
from nsight_magic.results import base as results_base
from nsight_magic.views.common import STRICT_ENV
from nsight_magic.views.nsys_view import NsysView

FUZZ = settings(
    derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
SCALE = float(os.environ.get("NSIGHT_MAGIC_FUZZ_SCALE", "1"))

KERNEL, NVTX = "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS"
MEMCPY, RUNTIME = "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME"
GRAPHS = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
TABLES = [KERNEL, NVTX, MEMCPY, RUNTIME, "CUPTI_ACTIVITY_KIND_MEMSET", "TARGET_INFO_GPU", GRAPHS]
NSYS_BASES = ["nsys_small", "nsys_ops", "nsys_2rank", "nsys_graphs_graph"]
NULLABLE = {
    KERNEL: ["end", "shortName", "demangledName", "gridX", "registersPerThread", "streamId"],
    NVTX: ["end", "text", "textId", "domainId", "endGlobalTid"],
    MEMCPY: ["bytes", "end", "copyKind"],
    RUNTIME: ["correlationId", "nameId"],
    "TARGET_INFO_GPU": ["name", "smCount", "memoryBandwidth", "clockRate"],
    GRAPHS: ["end", "graphId", "streamId"],
}
NAMES = ["''", "'<script>alert(1)</script> & \"q\"'", "printf('%.5000c', 'x')", "'∑ kernel ✓'"]

SQL_DAMAGES = (
    [f"DROP TABLE {t}" for t in TABLES]
    + [f"DELETE FROM {t}" for t in TABLES]
    + [f"DELETE FROM {t} WHERE rowid % 2 = 0" for t in TABLES]
    + [f"UPDATE {t} SET {c} = NULL" for t, cols in NULLABLE.items() for c in cols]
    + [f"UPDATE StringIds SET value = {v} WHERE id % 3 = 0" for v in NAMES]
    + [
        f"UPDATE {KERNEL} SET end = start - 1000",  # negative durations
        f"UPDATE {KERNEL} SET start = start + 1000000000000000 WHERE rowid % 5 = 0",
        f"UPDATE {NVTX} SET end = start - 5",
        f"UPDATE {MEMCPY} SET bytes = -1",
        f"UPDATE {KERNEL} SET gridX = 0, blockX = 0",
    ]
)


def show_everything(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way a notebook shows a run: static bundle, in-kernel bundle, HTML, widget(s)."""
    bundle = run._repr_mimebundle_()
    assert "text/html" in bundle and "text/plain" in bundle
    with monkeypatch.context() as m:
        m.setattr(results_base, "in_kernel", lambda: True)
        assert "text/html" in run._repr_mimebundle_()
    assert run.to_html()
    view = run.widget()
    assert view is not None
    for title in view.tabs.titles if isinstance(view, NsysView) else ():
        assert view.page(title).children  # each page opened, as a user clicking through


@pytest.fixture(scope="module", autouse=True)
def as_users_see_it() -> Iterator[None]:
    """Views as a user runs them: the strict mode every other test runs in (a non-ReportError
    re-raised, views/common.attempt) is off here, since what is tested is that a damaged report
    never makes a view raise."""
    with pytest.MonkeyPatch.context() as m:
        m.delenv(STRICT_ENV, raising=False)
        yield


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_views")


def damaged_copy(src: Path, dst: Path, damages: list[str]) -> Path:
    shutil.copy(src, dst)
    with sqlite3.connect(dst) as db:
        for damage in damages:
            # A constraint (or a table this report lacks) may say no: the copy then stays as
            # it was for that damage.
            with contextlib.suppress(sqlite3.Error):
                db.execute(damage)
    return dst


@settings(FUZZ, max_examples=round(24 * SCALE))
@given(
    base=st.sampled_from(NSYS_BASES),
    damages=st.lists(st.sampled_from(SQL_DAMAGES), min_size=1, max_size=3),
    n=st.integers(),
)
def test_views_survive_damaged_nsys_reports(
    base: str,
    damages: list[str],
    n: int,
    data_dir: Path,
    scratch: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = damaged_copy(
        data_dir / f"{base}.sqlite", scratch / f"damaged_{abs(n) % 1000}.sqlite", damages
    )
    try:
        report = open_report(path)
    except ReportError:
        return  # refused to open, with a typed error: not a view's concern
    show_everything(NsysRun(report, meta={"name": "damaged"}), monkeypatch)
    path.unlink()


@settings(FUZZ, max_examples=round(5 * SCALE))
@given(damages=st.lists(st.sampled_from(SQL_DAMAGES), min_size=1, max_size=2))
def test_views_survive_damaged_per_rank_reports(
    damages: list[str], data_dir: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nsight_magic.load_runs over a whole rank-0 report and a damaged rank-1 one."""
    rank1 = damaged_copy(data_dir / "nsys_2rank_r1.sqlite", scratch / "rank1.sqlite", damages)
    try:
        run = nsight_magic.load_runs([data_dir / "nsys_2rank_r0.sqlite", rank1])
    except (ReportError, ValueError):
        return  # refused with a typed error, or two processes claiming one rank
    show_everything(run, monkeypatch)


# --- ncu: damage the data a real report was read into ----------------------------------------
CUT_METRICS = [
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "sm__cycles_elapsed.avg.per_second",
    "launch__grid_size",
]


@pytest.fixture(scope="module")
def ncu_data(ncu_reports: dict[str, Path]) -> dict[str, Any]:
    report = NcuReport.open(ncu_reports["ncu_small_full"])
    return {"launches": report._launches, "units": report._units, "path": report.path}


def _damage_ncu(data: dict[str, Any], damage: tuple[str, int]) -> None:
    kind, index = damage
    launches = data["launches"]
    if not launches:
        return
    launch = launches[index % len(launches)]
    metrics = launch["metrics"]
    if kind == "cut":  # e.g. a report without gpu__time_duration
        for name in list(metrics):
            if name.startswith(CUT_METRICS[index % len(CUT_METRICS)].split(".")[0]):
                del metrics[name]
    elif kind == "nan":
        for name in list(metrics)[index % 7 :: 7]:
            metrics[name] = math.nan
    elif kind == "none":
        for name in list(metrics)[index % 5 :: 5]:
            metrics[name] = None
    elif kind == "text":
        for name in list(metrics)[index % 11 :: 11]:
            metrics[name] = "<b>n/a</b>"
    elif kind == "sections":
        launch["sections"] = []
    elif kind == "drop_launch" and len(launches) > 1:
        launches.pop(index % len(launches))


@settings(FUZZ, max_examples=round(15 * SCALE))
@given(
    damages=st.lists(
        st.tuples(
            st.sampled_from(["cut", "nan", "none", "text", "sections", "drop_launch"]),
            st.integers(0, 50),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_views_survive_damaged_ncu_reports(
    damages: list[tuple[str, int]], ncu_data: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = copy.deepcopy({"launches": ncu_data["launches"], "units": ncu_data["units"]})
    for damage in damages:
        _damage_ncu(data, damage)
    report = NcuReport(ncu_data["path"], data)
    show_everything(NcuRun(report, meta={"name": "damaged"}), monkeypatch)


def test_ncu_without_duration_says_so_in_one_line(ncu_data: dict[str, Any]) -> None:
    """The brief's case: no gpu__time_duration anywhere. The view opens; the launches table
    leaves duration blank and the roofline tab says in one line what is missing."""
    data = copy.deepcopy({"launches": ncu_data["launches"], "units": ncu_data["units"]})
    for launch in data["launches"]:
        for name in [n for n in launch["metrics"] if n.startswith("gpu__time_duration")]:
            del launch["metrics"][name]
    run = NcuRun(NcuReport(ncu_data["path"], data), meta={"name": "no duration"})
    page = run.to_html()
    assert "gpu__time_duration" in page  # the roofline's one line names what is missing
    roofline = run.widget().children[1].children[3]
    assert "gpu__time_duration" in roofline.value


def test_damaged_nsys_run_shows_what_it_could_not_as_one_line(
    data_dir: Path, scratch: Path
) -> None:
    """No copies table, names that are HTML, kernels ending before they start: the run opens,
    each tab shows what it has, and the damaged parts are one line each, escaped."""
    path = scratch / "named.sqlite"
    shutil.copy(data_dir / "nsys_small.sqlite", path)
    with sqlite3.connect(path) as db:
        db.execute(f"DROP TABLE {MEMCPY}")
        # one HTML name per id (one text under many ids is refused since issue 35: it would
        # collapse the kernels into one row)
        db.execute(f"UPDATE StringIds SET value = {NAMES[1]} || id WHERE id % 3 = 0")
        db.execute(f"UPDATE {KERNEL} SET end = start - 1000 WHERE rowid % 4 = 0")
    run = NsysRun(open_report(path), meta={"name": "damaged"})
    page = run.to_html()
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
    memory = page[page.index(">Memory copies<") :]
    assert memory.split("</div>")[0].count("\n") == 0  # one line, whatever it says
    view = run.widget()
    assert [t for t in view.children[1].titles][:3] == ["Kernels", "NVTX", "Timeline"]
