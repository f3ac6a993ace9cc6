"""Run folders: unique creation under concurrency, records, list_runs, load_run offline on the
real fixture reports, and profile_* refusing early (no folder) when it cannot run."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from nsight_magic.errors import (
    CellSyntaxError,
    NsightMagicError,
    ReportNotFoundError,
    ToolNotFoundError,
    UnpicklableVariableError,
)
from nsight_magic.results import load_run
from nsight_magic.run_folders import run_dir, runs
from nsight_magic.run_folders.run_dir import RunDir, write_json
from nsight_magic.session.backends import NcuBackend, NsysBackend
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.spec import CellRequest, Notebook


def test_run_dirs_are_unique_under_concurrency(tmp_path: Path) -> None:
    made: list[Path] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def make() -> None:
        barrier.wait()  # all start in the same instant, as a double-clicked button would
        for _ in range(5):
            d = runs.new_run_dir(tmp_path, "same name")
            with lock:
                made.append(d)

    threads = [threading.Thread(target=make) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 80 and len(set(made)) == 80
    assert all(d.is_dir() and d.parent == tmp_path and "-same_name" in d.name for d in made)


def test_same_stamp_gets_a_suffix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_dir, "utc_stamp", lambda now=None: "20260101T000000.000000Z")
    a, b, c = (runs.new_run_dir(tmp_path, "x") for _ in range(3))
    assert [p.name for p in (a, b, c)] == [
        "20260101T000000.000000Z-x",
        "20260101T000000.000000Z-x-2",
        "20260101T000000.000000Z-x-3",
    ]


def test_child_dir_inside_parent_and_slugged(tmp_path: Path) -> None:
    parent = runs.new_run_dir(tmp_path, "cell")
    child = RunDir(parent).new_child("void f<(int)4>(float *)").path
    assert child.parent == parent / "ncu" and child.name.endswith("void_f_int_4_float")


def test_concurrent_child_records_are_all_kept(tmp_path: Path) -> None:
    parent = runs.new_run_dir(tmp_path, "cell")
    write_json(parent / RunDir.META, {"name": "cell", "children": []})
    threads = [
        threading.Thread(target=RunDir(parent).add_child, args=({"kernel": f"k{i}"},))
        for i in range(20)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    meta = runs.read_json(parent / RunDir.META)
    assert sorted(c["kernel"] for c in meta["children"]) == sorted(f"k{i}" for i in range(20))


def _fake_nsys_run(root: Path, data_dir: Path, name: str = "small") -> Path:
    """A run folder as profile_nsys leaves it, with the real captured export in it."""
    d = runs.new_run_dir(root, name)
    shutil.copy(data_dir / "nsys_small.sqlite", d / "report.sqlite")
    write_json(
        d / RunDir.META,
        {"name": name, "tool": "nsys", "status": "ok", "report": "report.sqlite",
         "started_utc": "2026-11-22T02:30:48+00:00", "timings": {"total_s": 12.5}},
    )  # fmt: skip
    return d


def test_load_run_rebuilds_nsys_run_offline(tmp_path: Path, data_dir: Path) -> None:
    d = _fake_nsys_run(tmp_path, data_dir)
    run = load_run(d)
    assert type(run).__name__ == "NsysRun" and run.run_dir == d
    assert run.meta["status"] == "ok"
    kernels = run.kernels()
    assert len(kernels) > 0 and {"name", "duration_ns"} <= set(kernels.columns)
    assert load_run(d / RunDir.META).run_dir == d  # meta.json path works too


def test_load_run_ncu_child(tmp_path: Path, data_dir: Path, ncu_reports: dict[str, Path]) -> None:
    parent = _fake_nsys_run(tmp_path, data_dir)
    child = RunDir(parent).new_child("sm80_xmma_gemm").path
    shutil.copy(ncu_reports["ncu_gemm_metrics"], child / "report.ncu-rep")
    write_json(child / RunDir.META, {"tool": "ncu", "status": "ok", "parent_run": str(parent)})
    run = load_run(child)
    assert type(run).__name__ == "NcuRun" and len(run.kernels()) == 2


def test_load_run_without_report_says_so(tmp_path: Path) -> None:
    d = runs.new_run_dir(tmp_path, "broken")
    write_json(d / RunDir.META, {"tool": "nsys", "status": "timeout"})
    with pytest.raises(ReportNotFoundError, match="timeout"):
        load_run(d)
    with pytest.raises(ReportNotFoundError):
        load_run(tmp_path / "missing")


def test_list_runs(tmp_path: Path, data_dir: Path) -> None:
    a = _fake_nsys_run(tmp_path, data_dir, "first")
    RunDir(a).add_child({"kernel": "k"})
    RunDir(a).update_meta(started_utc="2026-11-22T02:30:48+00:00")
    b = _fake_nsys_run(tmp_path, data_dir, "second")
    RunDir(b).update_meta(started_utc="2026-11-23T00:00:00+00:00")
    df = runs.list_runs(tmp_path)
    assert list(df["name"]) == ["second", "first"]
    assert list(df["children"]) == [0, 1] and set(df["tool"]) == {"nsys"}
    # a mistyped folder is said, not listed as empty (the default folder before any run is)
    with pytest.raises(ReportNotFoundError, match="is no folder: no runs to list"):
        runs.list_runs(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    assert runs.list_runs(tmp_path / "empty").empty


# --- profile_* refuse before creating anything -----------------------------------------
@pytest.fixture
def no_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    for var in ("NSIGHT_MAGIC_NSYS", "NSIGHT_MAGIC_NCU"):
        monkeypatch.delenv(var, raising=False)


def test_profile_refuses_early_and_leaves_no_folder(tmp_path: Path, no_tools: None) -> None:
    manager = SessionManager(setup=SetupRegistry())
    root = tmp_path / "runs"

    def profile(cell: str, backend, **kw):
        return manager.profile(CellRequest(cell=cell, runs_root=root, **kw), backend,
                               notebook=Notebook(user_ns={"h": threading.Lock()}))  # fmt: skip

    with pytest.raises(CellSyntaxError):
        profile("x = (", NsysBackend())
    with pytest.raises(UnpicklableVariableError):
        profile("x = 1", NcuBackend(), vars=("h",))
    with pytest.raises(ToolNotFoundError, match="nsys_path"):
        profile("x = 1", NsysBackend())
    with pytest.raises(ToolNotFoundError, match="ncu_path"):
        profile("x = 1", NcuBackend(), fresh=True)
    assert not root.exists() and manager.status() == []


def test_profile_kernel_needs_the_parent_script(tmp_path: Path, data_dir: Path) -> None:
    d = _fake_nsys_run(tmp_path, data_dir)
    run = load_run(d, drill_runner=SessionManager(setup=SetupRegistry()).drills)
    with pytest.raises(NsightMagicError, match=r"no saved cell"):
        run.profile_kernel("some_kernel")


def test_profile_kernel_on_a_run_opened_from_a_file_says_why(data_dir: Path) -> None:
    """The quickstart's picker: a run with no run folder gets one clear sentence, not a
    TypeError (seen in the JupyterLab browser test)."""
    from nsight_magic.reports import open_report
    from nsight_magic.results import NsysRun

    run = NsysRun(open_report(data_dir / "nsys_small.sqlite"), drill_runner=SessionManager().drills)
    with pytest.raises(NsightMagicError, match="opened from a report file"):
        run.profile_kernel(run.kernel_summary()["name"].iloc[0])
