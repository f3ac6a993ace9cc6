"""``SweepRun`` (issue 44) on real reports: a sweep folder written around the bundled example runs
(``nsight_magic.examples``: naive fp32 attention and fused bf16 SDPA, both captured on an H200),
each copied into its own configuration folder as the session writes them, plus a configuration
that failed. The table, the kernel matrix, the charts, the static form and ``load_run`` of the
folder are checked against what each run says on its own. No GPU, no report is made up."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import nsight_magic
from nsight_magic import examples
from nsight_magic.analysis.sweep import axis_scale, is_power_of_two_series
from nsight_magic.errors import BadArgumentError, DamagedFolderError
from nsight_magic.results.comparison import Comparison
from nsight_magic.results.sweep_run import SweepRun
from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.run_folders.run_meta import RunMeta
from nsight_magic.run_folders.runs import list_runs
from nsight_magic.run_folders.sweep_record import ConfigRecord, SweepRecord
from nsight_magic.views import chart_specs
from nsight_magic.vocabulary.columns import COLUMNS

# (value of the swept variable, the example run that stands for that configuration)
CONFIGS = [("naive", "attention_naive"), ("sdpa", "attention_sdpa")]
FAILED = "The profiled cell raised OutOfMemoryError: CUDA out of memory."


def _config_folder(sweep: RunDir, index: int, label: str, example: str, cell_s: float) -> str:
    """A configuration's run folder as the session leaves it: meta.json and the report (the
    example's real SQLite export, copied: load_run refuses a linked report). The examples carry
    no status.json, so the cell body's time (``cell_s``) is a value this test writes into
    meta.json, to see it reach the table; every other number is the real report's."""
    folder = sweep.new_config(index, label)
    packed = examples.RUNS[example][0]
    source = examples._unpack(packed, examples._session_dir())
    shutil.copyfile(source, folder.path / RunDir.SQLITE_EXPORT)
    meta = RunMeta(name=f"sweep[{label}]", tool="nsys", status="ok",
                   report=RunDir.SQLITE_EXPORT, cell_status={"status": "ok", "cell_s": cell_s},
                   sweep={"index": index - 1, "label": label})  # fmt: skip
    folder.write_meta(meta)
    return folder.path.name


def write_sweep(root: Path, variable: str = "impl", values: Any = ("naive", "sdpa")) -> Path:
    """A sweep folder: the two example runs as configurations, then one that failed."""
    sweep = RunDir.create(root, "attention")
    record = SweepRecord(name="attention", variables=[variable])
    for i, ((_, example), value) in enumerate(zip(CONFIGS, values, strict=True)):
        label = f"{variable}={value}"
        folder = _config_folder(sweep, i + 1, label, example, cell_s=0.01 * (i + 1))
        record.configs.append(ConfigRecord(i, {variable: value}, folder, "ok", None, 3.5))
    bad = sweep.new_config(3, "failed")
    third = values[-1] * 2 if variable == "bs" else "flash"
    record.configs.append(ConfigRecord(2, {variable: third}, bad.path.name, "failed", FAILED, 1.0))
    sweep.write_sweep(record)
    return sweep.path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> SweepRun:
    run = nsight_magic.load_run(write_sweep(tmp_path_factory.mktemp("runs")))
    assert isinstance(run, SweepRun)
    return run


def test_load_run_of_a_sweep_folder_gives_each_configuration_its_run(sweep: SweepRun) -> None:
    assert sweep.variables == ["impl"]
    assert sweep.configs == [("naive",), ("sdpa",), ("flash",)]
    assert set(sweep.runs) == {("naive",), ("sdpa",)}  # the failed one has no report
    naive = sweep.run(impl="naive")
    assert naive is sweep.run("naive") is sweep.runs[("naive",)]
    assert naive.kernel_summary()["total_ns"].sum() > 0
    with pytest.raises(BadArgumentError, match="impl=flash has no run: it failed"):
        sweep.run("flash")
    with pytest.raises(BadArgumentError, match="no configuration"):
        sweep.run("triton")
    assert "2 ok, 1 failed" in repr(sweep)


def test_the_table_has_one_row_per_configuration_with_each_runs_own_numbers(
    sweep: SweepRun,
) -> None:
    table = sweep.table()
    assert table["config"].tolist() == ["impl=naive", "impl=sdpa", "impl=flash"]
    assert table["impl"].tolist() == ["naive", "sdpa", "flash"]
    assert table["status"].tolist() == ["ok", "ok", "failed"]
    for key, row in zip(sweep.configs[:2], table.head(2).itertuples(), strict=True):
        run = sweep.runs[key]
        summary = run.kernel_summary()
        assert row.gpu_time_ns == summary["total_ns"].sum()
        assert row.gpu_busy_pct == pytest.approx(run.gpu_busy_pct())
        top = summary.sort_values("total_ns", ascending=False).iloc[0]
        assert row.top_kernel == top["name"]
        share = 100 * top["total_ns"] / summary["total_ns"].sum()
        assert row.top_kernel_pct == pytest.approx(share)
        assert pd.isna(row.peak_memory_bytes)  # captured without --memory
    assert table["cell_wall_ns"].tolist()[:2] == [10_000_000, 20_000_000]
    assert table["run_wall_ns"].tolist() == [3_500_000_000, 3_500_000_000, 1_000_000_000]
    failed = table.iloc[2]
    assert failed["error"] == FAILED and pd.isna(failed["gpu_time_ns"])
    # the fused kernel beats the naive chain, as compare() of the two examples says
    assert table["gpu_time_ns"].iloc[1] < table["gpu_time_ns"].iloc[0]


def test_every_sweep_column_is_registered_or_named_by_the_user(sweep: SweepRun) -> None:
    for frame in (sweep.table(), sweep.kernels(), sweep.frames.table()):
        user = set(frame.attrs["named_by_user"])
        assert [c for c in frame.columns if c not in COLUMNS and c not in user] == []
    assert set(sweep.table().attrs["named_by_user"]) == {"impl"}
    assert sweep.kernels().attrs["named_by_user"] == ["impl=naive", "impl=sdpa"]


def test_the_kernel_matrix_is_each_configurations_kernel_summary(sweep: SweepRun) -> None:
    matrix = sweep.kernels()
    for key, label in ((("naive",), "impl=naive"), (("sdpa",), "impl=sdpa")):
        summary = sweep.runs[key].kernel_summary().groupby("name")["total_ns"].sum()
        column = matrix.set_index("name")[label]
        assert column[column > 0].sort_index().equals(summary.sort_index().astype("int64"))
    assert (matrix["total_ns"] == matrix["impl=naive"] + matrix["impl=sdpa"]).all()
    assert matrix["total_ns"].is_monotonic_decreasing


def test_compare_takes_any_two_of_its_runs(sweep: SweepRun) -> None:
    cmp = sweep.compare("naive", "sdpa")
    assert isinstance(cmp, Comparison)
    assert (cmp.label_a, cmp.label_b) == ("impl=naive", "impl=sdpa")
    direct = nsight_magic.compare(sweep.run("naive"), sweep.run("sdpa"))
    assert cmp.kernels["delta_ns"].sum() == direct.kernels["delta_ns"].sum()


def test_mfu_per_configuration_and_phase_reuses_the_runs_own_mfu(sweep: SweepRun) -> None:
    # both example cells have the cell's own range; give it a FLOP count as a function of the
    # configuration, and the sweep's rows are each run's own mfu() rows
    target = "nsight_magic:cell"

    def flops(cfg: dict[str, Any]) -> dict[str, float]:
        return {target: 1e9 if cfg["impl"] == "naive" else 2e9}

    frame = sweep.mfu(flops)
    assert set(frame["config"]) == {"impl=naive", "impl=sdpa"}
    for value, given in (("naive", 1e9), ("sdpa", 2e9)):
        own = sweep.run(value).mfu({target: given})
        rows = frame[frame["impl"] == value].reset_index(drop=True)
        assert rows["mfu_frac"].tolist() == pytest.approx(own["mfu_frac"].tolist(), nan_ok=True)
    assert [c for c in frame.columns if c not in COLUMNS] == ["impl"]
    with pytest.raises(BadArgumentError, match="function of a configuration"):
        sweep.mfu({"x": 1.0})  # type: ignore[arg-type]


def test_axis_scale_is_log2_for_powers_of_two_only() -> None:
    assert is_power_of_two_series([1, 8, 32]) and axis_scale([1, 2, 4]) == "log2"
    assert axis_scale([1, 3, 32]) == "linear" and axis_scale([0.5, 1.0]) == "linear"
    assert axis_scale([8]) == "linear"  # one value: nothing to scale
    assert axis_scale(["naive", "sdpa"]) == "ordinal" and axis_scale([True, False]) == "ordinal"


def test_time_chart_has_a_log2_axis_for_powers_of_two(tmp_path: Path) -> None:
    run = nsight_magic.load_run(write_sweep(tmp_path, "bs", (1, 8)))
    spec = chart_specs.chart_spec(run.time_chart())
    assert spec["encoding"]["x"]["scale"] == {"type": "log", "base": 2}
    assert spec["encoding"]["x"]["field"] == "bs"
    ordinal = chart_specs.chart_spec(
        nsight_magic.load_run(write_sweep(tmp_path / "o")).time_chart()
    )
    assert ordinal["encoding"]["x"]["type"] == "ordinal"
    with pytest.raises(BadArgumentError, match="not swept"):
        run.time_chart("seq")


def test_the_static_form_shows_every_configuration_and_the_failed_ones_error(
    sweep: SweepRun,
) -> None:
    page = sweep.to_html()
    for text in ("Sweep: attention", "impl=naive", "impl=sdpa", "impl=flash", "CUDA out of memory",
                 "Kernels x configurations", "<img"):  # fmt: skip
        assert text in page, text
    bundle = sweep._repr_mimebundle_()
    assert bundle["text/html"] == page and "SweepRun" in bundle["text/plain"]


def test_a_sweep_record_with_a_folder_outside_is_refused(tmp_path: Path) -> None:
    folder = write_sweep(tmp_path)
    record = RunDir(folder).read_sweep()
    assert record is not None
    record.configs[0].folder = "../../elsewhere"
    RunDir(folder).write_sweep(record)
    with pytest.raises(nsight_magic.errors.ReportError, match="outside the sweep folder"):
        nsight_magic.load_run(folder)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# how a damaged or received sweep.json may name a configuration's folder: the folder around the
# sweep, one beside it, an absolute path, a step out of a configuration, a path inside one (a
# separator), a link out of the sweep folder
OUTSIDE = ["..", "../elsewhere", "/etc", "03-failed/..", "02-impl_sdpa/ncu", "link-out"]


@pytest.mark.parametrize("named", OUTSIDE)
def test_a_configuration_folder_outside_the_sweep_is_refused_before_share_writes(
    tmp_path: Path, named: str
) -> None:
    """sweep.json naming a configuration folder that is not one name inside the sweep folder
    (issue 57): ``share()`` and ``load_run`` refuse it with one ``DamagedFolderError``, the same
    check, and ``share()`` writes nothing. Before, ``share()`` of ``..`` copied the run folder
    around the sweep into the folder around the destination, over its meta.json and cell.py."""
    around = RunDir.create(tmp_path / "received", "bundle")  # a run folder holding the sweep
    around.write_meta(RunMeta(name="bundle", tool="nsys", status="ok"))
    around.write_cell("print('the bundle')\n")
    source = write_sweep(around.path)
    (tmp_path / "elsewhere").mkdir()
    (source / "link-out").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    record = RunDir(source).read_sweep()
    assert record is not None
    record.configs[0].folder = named
    RunDir(source).write_sweep(record)
    mine = RunDir.create(tmp_path / "mine", "mine")  # the folder the copy is to go into
    mine.write_meta(RunMeta(name="mine", tool="nsys", status="ok"))
    mine.write_cell("print('mine')\n")
    before = _files(mine.path)
    with pytest.raises(DamagedFolderError, match=re.escape(repr(named))):
        nsight_magic.share(source, mine.path / "copy")
    assert _files(mine.path) == before  # nothing overwritten, nothing added
    assert sorted(p.name for p in mine.path.iterdir()) == ["cell.py", "meta.json"]
    with pytest.raises(DamagedFolderError, match=re.escape(repr(named))):
        nsight_magic.load_run(source)


def test_a_shared_sweep_is_its_runs_copies_and_one_page(tmp_path: Path) -> None:
    """``nsight_magic.share`` of a sweep folder: each configuration's run copied as a run is
    (its own share.json), sweep.json with the failed configuration's error rewritten, and
    ``index.html``: the table, the charts and each configuration's top kernels, no script; the
    copy loads as the same sweep, and neither the page nor the record names the original."""
    source = write_sweep(tmp_path / "runs")
    record = RunDir(source).read_sweep()
    assert record is not None
    record.configs[2].error = f"{FAILED} (run folder: {source}/03-failed)"
    RunDir(source).write_sweep(record)
    dest = nsight_magic.share(source, tmp_path / "to_send" / "attention")
    original = nsight_magic.load_run(source)
    copy = nsight_magic.load_run(dest)
    assert isinstance(copy, SweepRun) and isinstance(original, SweepRun)
    assert copy.configs == original.configs and set(copy.runs) == set(original.runs)
    ours, theirs = copy.table(), original.table()
    pd.testing.assert_series_equal(ours["gpu_time_ns"], theirs["gpu_time_ns"])
    for key in copy.runs:
        assert (dest / copy.runs[key].run_dir.name / "share.json").is_file()
    page = (dest / RunDir.SWEEP_PAGE).read_text()
    shared = RunDir(dest).read_sweep()
    assert shared is not None and str(source) not in (shared.configs[2].error or "")
    assert "(run folder: ./03-failed)" in (shared.configs[2].error or "")
    assert str(tmp_path) not in page and "<script" not in page.lower()
    assert "impl=naive" in page and "impl=sdpa" in page
    tops = copy.frames.top_kernels(3)
    assert set(tops["config"]) == {"impl=naive", "impl=sdpa"}
    for label, rows in tops.groupby("config"):
        run = copy.runs[(label.split("=", 1)[1],)]
        summary = run.kernel_summary().head(3)
        assert list(rows["name"]) == list(summary["name"])  # its own top kernels, in order
        assert list(rows["time_pct"]) == list(summary["time_pct"])
        assert html_escape(rows["short_name"].iloc[0])[:20] in page
    # the manifest says what went and what did not
    manifest = (dest / "share.json").read_text()
    assert "03-failed" in manifest  # a failed configuration has no run to copy


def test_a_swept_secret_is_dropped_from_the_shared_sweep_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``nsight_magic.sweep(cell, {"tok": [os.environ["HF_TOKEN"]]})`` (issue 57): the value is
    this machine's secret, so the copy drops it as ``share()`` drops it from a run, from
    sweep.json, share.json, index.html and the configuration's folder name, which held it cut
    to 40 characters; a value that is no secret stays, and the copy loads with its numbers."""
    token = "hf_" + "Qz7rT9uYvLmNpKs4aB2cD8eF0gHjWx5yZ1a"  # 37 characters, as HF's are
    monkeypatch.setenv("HF_TOKEN", token)
    source = write_sweep(tmp_path / "runs", "tok", (token, "sdpa"))
    assert any(token[:30] in p.name for p in source.iterdir())  # the leak is real
    dest = nsight_magic.share(source, tmp_path / "to_send")
    part = token[:12]  # any part long enough to tell it by
    for path in dest.rglob("*"):
        assert part not in str(path.relative_to(dest)), path
        assert not path.is_file() or part.encode() not in path.read_bytes(), path
    copy, original = nsight_magic.load_run(dest), nsight_magic.load_run(source)
    assert isinstance(copy, SweepRun) and isinstance(original, SweepRun)
    assert copy.configs == [("<dropped>",), ("sdpa",), ("flash",)]
    pd.testing.assert_series_equal(copy.table()["gpu_time_ns"], original.table()["gpu_time_ns"])
    assert "tok=&lt;dropped&gt;" in (dest / RunDir.SWEEP_PAGE).read_text()


def test_a_secret_inside_a_list_value_is_dropped_from_the_shared_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sweep.json keeps a list value as a list (``sweep_record.json_value``): a secret inside
    one (``{"auth": [["user", os.environ["HF_TOKEN"]]]}``) is dropped as a string value is."""
    token = "hf_" + "Lm4nPq7rSt9uVw2xYz5aBc8dEf1gHi3jKl6"
    monkeypatch.setenv("HF_TOKEN", token)
    source = write_sweep(tmp_path / "runs", "auth", (["user", token], ["user", "none"]))
    record = json.loads((source / RunDir.SWEEP).read_text())
    assert record["configs"][0]["values"] == {"auth": ["user", token]}  # a list, as it was
    dest = nsight_magic.share(source, tmp_path / "to_send")
    for path in dest.rglob("*"):
        assert token[:12] not in str(path.relative_to(dest)), path
        assert not path.is_file() or token[:12].encode() not in path.read_bytes(), path
    shared = json.loads((dest / RunDir.SWEEP).read_text())
    assert shared["configs"][0]["values"] == {"auth": ["user", "<dropped>"]}
    assert shared["configs"][1]["values"] == {"auth": ["user", "none"]}


def html_escape(text: str) -> str:
    import html

    return html.escape(text)


def test_list_runs_lists_a_sweep_folder_with_how_its_configurations_ended(
    tmp_path: Path,
) -> None:
    root = tmp_path / "runs"
    folder = write_sweep(root)
    runs = list_runs(root)
    row = runs[runs["run_dir"] == str(folder)].iloc[0]
    assert row["name"] == "attention" and row["tool"] == "nsys sweep"
    assert row["status"] == "2 ok, 1 failed" and row["children"] == 3
    assert row["wall_s"] == pytest.approx(3.5 + 3.5 + 1.0)
