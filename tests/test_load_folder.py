"""``load_run`` on a folder that is not one run: a folder of runs lists them, newest first, with
the call that opens one; a run folder without a report says how its profile ended (meta.json's
status, in words) instead of a bare "status: ?". On copies of the saved GPU runs in
notebooks/runs (real run folders)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import nsight_magic
from nsight_magic.errors import ReportNotFoundError
from nsight_magic.results import loading

SAVED = Path(__file__).resolve().parents[1] / "notebooks" / "runs"
COMPARE = sorted((SAVED / "03_compare").iterdir())  # 4 runs: two before/after pairs


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    root = tmp_path / "nsight-runs"
    for run in COMPARE:
        shutil.copytree(run, root / run.name)
    return root


def _message(path: Path) -> str:
    with pytest.raises(ReportNotFoundError) as info:
        nsight_magic.load_run(path)
    return str(info.value)


def test_a_folder_of_runs_lists_them_newest_first(runs_root: Path) -> None:
    message = _message(runs_root)
    assert message.startswith(f"{runs_root} is a folder of 4 runs, not a run; newest first:")
    listed = [line.strip() for line in message.splitlines()[1:5]]
    assert listed == sorted((run.name for run in COMPARE), reverse=True)
    assert "status" not in message
    # the call it offers opens the newest run
    call = message.splitlines()[-1]
    assert call.startswith("Open one: nsight_magic.load_run(")
    newest = runs_root / listed[0]
    assert call.endswith(f"({newest.as_posix()!r})")
    run = nsight_magic.load_run(newest)
    assert len(run.kernel_summary()) > 0


def test_runs_one_level_deeper_are_listed_with_their_path(tmp_path: Path) -> None:
    shutil.copytree(SAVED / "03_compare", tmp_path / "runs" / "03_compare")
    shutil.copytree(SAVED / "04_multi_gpu", tmp_path / "runs" / "04_multi_gpu")
    message = _message(tmp_path / "runs")
    assert "a folder of 5 runs" in message
    assert "\n  03_compare/20261123T152938.593342Z-after\n" in message  # the newest
    assert message.splitlines()[5].strip() == "04_multi_gpu/20261123T091536.238281Z-tp_step"


def test_a_long_list_is_cut(runs_root: Path) -> None:
    for i in range(loading.LISTED_RUNS):
        shutil.copytree(COMPARE[0], runs_root / f"20251231T0000{i:02d}.000000Z-old")
    message = _message(runs_root)
    assert f"a folder of {4 + loading.LISTED_RUNS} runs" in message
    assert "... and 4 older" in message


def test_a_folder_with_no_run_says_what_a_run_folder_is(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    message = _message(tmp_path / "empty")
    assert "is not a run folder: it has no meta.json and no run folder inside" in message


def test_a_run_without_report_says_how_its_profile_ended(runs_root: Path) -> None:
    run = runs_root / COMPARE[0].name
    meta = json.loads((run / "meta.json").read_text())
    meta.update(status="failed", error="ProfilerError: nsys export failed")
    (run / "meta.json").write_text(json.dumps(meta))
    for report in ("report.nsys-rep", "report_pq"):
        target = run / report
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    message = _message(run)
    assert message.startswith(f"{run} holds no report (looked for ")
    assert message.endswith("The profile ended 'failed': ProfilerError: nsys export failed.")
    assert "status: ?" not in message


def test_a_missing_report_names_each_file_looked_for_once(tmp_path: Path) -> None:
    """meta.json names its report (report_pq), which is also one of the names every nsys
    folder is searched for: the message said 'report_pq, report.sqlite, report_pq,
    report.nsys-rep' (and 'report.ncu-rep, report.ncu-rep' for a picker run)."""
    prefill = next((SAVED / "02_llm_drilldown").glob("*-prefill"))
    run = tmp_path / "prefill"
    shutil.copytree(prefill, run)
    (child,) = (run / "ncu").iterdir()
    shutil.rmtree(run / "report_pq")
    (run / "report.nsys-rep").unlink()
    (child / "report.ncu-rep").unlink()
    for folder, names in ((run, ["report_pq", "report.sqlite", "report.nsys-rep"]),
                          (child, ["report.ncu-rep"])):  # fmt: skip
        message = _message(folder)
        looked = message.split("(looked for ", 1)[1].split(")", 1)[0].split(", ")
        assert sorted(looked) == sorted(names), message


def test_a_folder_holding_one_sweep_opens_the_sweep(tmp_path: Path) -> None:
    """Notebook 06's folder holds one sweep of 7 configurations: ``load_run`` of it is the
    sweep (it listed the 7 configurations as runs before)."""
    shutil.copytree(SAVED / "06_sweep", tmp_path / "06_sweep")
    sweep = nsight_magic.load_run(tmp_path / "06_sweep")
    assert isinstance(sweep, nsight_magic.SweepRun)
    assert len(sweep.table()) == 7


def test_a_sweep_among_runs_is_listed_once(runs_root: Path) -> None:
    shutil.copytree(SAVED / "06_sweep", runs_root, dirs_exist_ok=True)
    message = _message(runs_root)
    assert message.startswith(f"{runs_root} is a folder of 5 runs, not a run; newest first:")
    sweep = next((SAVED / "06_sweep").iterdir()).name
    assert f"\n  {sweep}\n" in message and "bs_1" not in message


def test_a_folder_of_one_run_opens_it(tmp_path: Path) -> None:
    shutil.copytree(COMPARE[0], tmp_path / "only" / COMPARE[0].name)
    run = nsight_magic.load_run(tmp_path / "only")
    assert run.run_dir == tmp_path / "only" / COMPARE[0].name
