"""A real sweep and a real top-N, captured on the lent GPU (issue 44): ``%%nsys --sweep bs=1,4
--warmup 1 --memory`` of a 2-layer Llama prefill through the magics, and ``profile_top(5)`` of its
bs=4 configuration (one ncu run). ``tools/fixtures/capture_sweep.sh`` made the files; tests/data/
README.md ("Sweeps and top-N") says what they hold. The sweep's numbers are checked against
``nsys stats`` of each configuration's report, the top-N's against ncu's own raw page.

The capture ran on an H100 on 2026-11-27 (tests/data/README.md); its files are committed
(``sweep_prefill/``, ``ncu_sweep_top.ncu-rep.xz``, ``ncu_raw/ncu_sweep_top.raw.csv``,
``nsys_stats/sweep_prefill_bs_{1,4}_cuda_gpu_kern_sum.csv``). A test whose file is missing
(a checkout without them) skips, naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import nsight_magic
from nsight_magic.analysis.top_kernels import top_kernel_names
from nsight_magic.errors import DamagedFolderError
from nsight_magic.profilers.ncu import first_launches_args, kernel_id_regex
from nsight_magic.reports import open_report
from nsight_magic.results import NcuRun
from nsight_magic.results.sweep_run import SweepRun
from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.run_folders.runs import list_runs
from nsight_magic.views import chart_specs

DATA = Path(__file__).parent / "data"
SWEEP = DATA / "sweep_prefill"
TOP_REPORT = DATA / "ncu_sweep_top.ncu-rep.xz"
TOP_RAW = DATA / "ncu_raw" / "ncu_sweep_top.raw.csv"
STATS = {bs: DATA / "nsys_stats" / f"sweep_prefill_bs_{bs}_cuda_gpu_kern_sum.csv" for bs in (1, 4)}
# the captured cell's model and prompts (tools/fixtures/sweep_capture.py)
D, LAYERS, FFN, VOCAB, SEQ = 512, 2, 1408, 8192, 256
N_LAYERS = LAYERS * (4 * D * D + 3 * D * FFN)  # q, k, v, o and the gated MLP: no bias
N_HEAD = VOCAB * D
TOP = 5


def waits_for(*paths: Path) -> pytest.MarkDecorator:
    missing = [str(p.relative_to(DATA)) for p in paths if not p.exists()]
    return pytest.mark.skipif(
        bool(missing),
        reason="waits for the GPU capture (tools/fixtures/capture_sweep.sh): "
        f"tests/data/{', tests/data/'.join(missing)}",
    )


needs_sweep = waits_for(SWEEP)
needs_top = waits_for(SWEEP, TOP_REPORT)


@pytest.fixture(scope="module")
def sweep() -> SweepRun:
    run = nsight_magic.load_run(SWEEP)
    assert isinstance(run, SweepRun)
    return run


def _child_dir() -> Path:
    (found,) = SWEEP.glob("*/ncu/*-top*")
    return found


@pytest.fixture(scope="module")
def child(sweep: SweepRun, ncu_reports: dict[str, Path]) -> NcuRun:
    """The profile_top child as the session handed it back: its report, its folder's meta.json,
    the bs=4 configuration's run as its parent."""
    meta = RunDir(_child_dir()).read_meta_json()
    return NcuRun(open_report(ncu_reports["ncu_sweep_top"]), _child_dir(), meta,
                  parent=sweep.run(bs=4))  # fmt: skip


def prefill_flops(config: dict[str, Any]) -> dict[str, float]:
    tokens = config["bs"] * SEQ
    layers = nsight_magic.transformer_flops(N_LAYERS, tokens, n_layers=LAYERS, seq_len=SEQ,
                                            d_model=D, causal=True)  # fmt: skip
    head = nsight_magic.transformer_flops(N_HEAD, tokens)
    return {"LLM:layers": layers, "LLM:head": head, "LLM:prefill": layers + head}


@needs_sweep
def test_a_real_sweep_folder_loads_with_each_configurations_run(sweep: SweepRun) -> None:
    assert sweep.variables == ["bs"] and sweep.configs == [(1,), (4,)]
    assert [c.status for c in sweep.record.configs] == ["ok", "ok"]
    assert "2 configurations of bs, 2 ok" in repr(sweep)
    for index, key in enumerate(sweep.configs):
        run = sweep.run(key)
        assert len(run.kernels()) > 0
        # each configuration's meta.json says which one it was; vars.pkl holds its value
        assert run.meta["sweep"] == {"index": index, "values": {"bs": key[0]},
                                     "label": f"bs={key[0]}"}  # fmt: skip
        assert run.meta["warmup"] == 1 and run.meta["options"]["memory"] is True
        assert (run.run_dir / RunDir.VARS).is_file()
        assert run.gpu_info()["name"].startswith("NVIDIA")


@needs_sweep
@waits_for(*STATS.values())
def test_each_configurations_kernels_are_nsys_stats_of_its_report(sweep: SweepRun) -> None:
    """The table's GPU time and the kernel x configuration matrix, against ``nsys stats
    --report cuda_gpu_kern_sum`` of each configuration's own .nsys-rep."""
    table = sweep.table().set_index("config")
    matrix = sweep.kernels().set_index("name")
    for bs, path in STATS.items():
        ref = pd.read_csv(path).set_index("Name")
        summary = sweep.run(bs=bs).kernel_summary().set_index("name")
        assert sorted(summary.index) == sorted(ref.index)
        assert (summary["total_ns"] == ref.loc[summary.index, "Total Time (ns)"]).all()
        assert (summary["instances"] == ref.loc[summary.index, "Instances"]).all()
        label = f"bs={bs}"
        column = matrix[label]
        assert column[column > 0].to_dict() == ref["Total Time (ns)"].to_dict()
        assert table.at[label, "gpu_time_ns"] == ref["Total Time (ns)"].sum()
        top = ref["Total Time (ns)"].idxmax()
        assert table.at[label, "top_kernel"] == top


@needs_sweep
def test_the_table_reads_each_configurations_status_record_and_memory(sweep: SweepRun) -> None:
    table = sweep.table().set_index("config")
    record = {c.label: c for c in sweep.record.configs}
    for bs in (1, 4):
        label, run = f"bs={bs}", sweep.run(bs=bs)
        row = table.loc[label]
        assert row["status"] == "ok" and row["error"] == ""
        assert row["cell_wall_ns"] == round(run.meta["cell_status"]["cell_s"] * 1e9) > 0
        assert row["run_wall_ns"] == round(record[label].wall_s * 1e9)
        assert row["run_wall_ns"] > row["cell_wall_ns"]
        assert 0 < row["gpu_busy_pct"] <= 100
        peak = row["peak_memory_bytes"]  # --memory: PyTorch's own count at the cell's peak
        assert not pd.isna(peak) and peak > 0
    # four times the prompts: more memory at the peak
    assert table.at["bs=4", "peak_memory_bytes"] > table.at["bs=1", "peak_memory_bytes"]


@needs_sweep
def test_mfu_per_configuration_and_phase_is_model_flops_over_each_phase(
    sweep: SweepRun,
) -> None:
    frame = sweep.mfu(flops=prefill_flops)
    assert len(frame) == 6  # 2 configurations x prefill, layers, head
    for row in frame.itertuples():
        phases = sweep.run(bs=row.bs).nvtx_phases()
        own = phases[(phases["domain"] == "LLM") & (phases["range"] == row.range)]
        assert row.time_ns == own["phase_total_ns"].iloc[0] > 0
        assert row.model_flops == prefill_flops({"bs": row.bs})[f"LLM:{row.range}"]
        assert row.model_flops_per_s == pytest.approx(row.model_flops / (row.time_ns * 1e-9))
        assert 0 < row.mfu_frac < 1, (row.config, row.range, row.reason)
    # the whole prefill's phase holds its two phases
    for bs in (1, 4):
        times = frame[frame["bs"] == bs].set_index("range")["time_ns"]
        assert times["prefill"] >= times["layers"] + times["head"]


@needs_sweep
def test_the_charts_and_the_static_form_of_a_real_sweep(sweep: SweepRun) -> None:
    spec = chart_specs.chart_spec(sweep.time_chart())
    assert spec["encoding"]["x"]["scale"] == {"type": "log", "base": 2}
    mfu_spec = chart_specs.chart_spec(sweep.mfu_chart(flops=prefill_flops))
    assert mfu_spec["encoding"]["color"]["field"] == "phase"
    page = sweep.to_html()
    for text in ("Sweep: prefill", "bs=1", "bs=4", "Kernels x configurations"):
        assert text in page, text


@needs_sweep
def test_a_shared_copy_of_the_real_sweep_loads_with_the_same_numbers(
    sweep: SweepRun, tmp_path: Path
) -> None:
    dest = nsight_magic.share(SWEEP, tmp_path / "to_send")
    copy = nsight_magic.load_run(dest)
    assert isinstance(copy, SweepRun) and copy.configs == sweep.configs
    pd.testing.assert_series_equal(copy.table()["gpu_time_ns"], sweep.table()["gpu_time_ns"])
    # one page with no <script>, no .nsys-rep (the fixture has no script.py to keep: the
    # capture left the generated scripts out)
    assert "<script" not in (dest / RunDir.SWEEP_PAGE).read_text()
    assert not list(dest.rglob("*.nsys-rep"))
    root = tmp_path / "runs"
    shutil.copytree(SWEEP, root / SWEEP.name)
    rows = list_runs(root)
    (row,) = rows.itertuples()
    assert (row.tool, row.status, row.children) == ("nsys sweep", "ok", 2)


@needs_sweep
@pytest.mark.parametrize("how", ["named twice", "a link to it"])
def test_two_configurations_of_one_folder_are_refused_by_share_and_load_run(
    tmp_path: Path, how: str
) -> None:
    """A sweep.json whose two configurations name one folder, by name or through a link to it
    (issue 57): ``share()`` and ``load_run`` refuse it with one ``DamagedFolderError`` before
    anything is written; ``share()`` raised ``FileExistsError`` half way through the copy, and
    ``load_run`` gave both configurations one run."""
    source = tmp_path / "runs" / SWEEP.name
    shutil.copytree(SWEEP, source)
    record = json.loads((source / RunDir.SWEEP).read_text())
    if how == "named twice":
        record["configs"][1]["folder"] = "01-bs_1"
    else:
        shutil.rmtree(source / "02-bs_4")
        (source / "02-bs_4").symlink_to("01-bs_1", target_is_directory=True)
    (source / RunDir.SWEEP).write_text(json.dumps(record))
    with pytest.raises(DamagedFolderError, match="name one folder"):
        nsight_magic.share(source, tmp_path / "to_send")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no copy, no scratch folder
    with pytest.raises(DamagedFolderError, match="name one folder"):
        nsight_magic.load_run(source)


@needs_top
def test_profile_top_asked_ncu_for_the_first_launch_of_the_parents_top_kernels(
    sweep: SweepRun, child: NcuRun
) -> None:
    """ONE ncu run of the bs=4 configuration, its filter built by ``first_launches_args`` from
    that run's top 5 kernels by nsys time, and ncu profiled exactly those kernels."""
    names = top_kernel_names(sweep.run(bs=4).kernel_summary(), TOP)
    assert child.meta["top_kernels"] == names
    assert _child_dir().parent.parent.name.endswith("bs_4")
    argv = child.meta.get("capture_argv") or json.loads((_child_dir() / RunDir.ARGV).read_text())
    kernel_id = argv[argv.index("--kernel-id") + 1]
    assert kernel_id == f"::regex:{kernel_id_regex(names)}:1"
    base = argv[argv.index("--kernel-name-base") + 1]
    assert base == first_launches_args(names)[1]
    assert "--launch-count" not in argv and "--kernel-name" not in argv
    launches = child.kernels()
    assert set(launches["demangled"]) == set(names)
    # invocation 1 of each kernel: one launch per name. ncu 2025.3.1 did not count a kernel's
    # invocations per grid: the kernel-id probe's kernel launched with two grid sizes was
    # profiled once (tests/data/README.md)
    assert launches["demangled"].is_unique


@needs_top
def test_each_profiled_kernels_nsys_share_beside_its_hfu(sweep: SweepRun, child: NcuRun) -> None:
    summary = sweep.run(bs=4).kernel_summary()
    names = top_kernel_names(summary, TOP)
    shares = child.top_kernels()
    assert len(shares) == len(child.kernels())
    by_name = summary.set_index("name")
    demangled = child.kernels().set_index("launch")["demangled"]
    for row in shares.itertuples():
        name = demangled[row.launch]
        assert row.nsys_rank == names.index(name) + 1
        assert row.nsys_total_ns == by_name.at[name, "total_ns"]
        assert row.nsys_time_pct == pytest.approx(by_name.at[name, "time_pct"], abs=0.01)
        assert not np.isnan(row.hfu_frac) or row.reason, row  # a blank HFU says why


@needs_top
@waits_for(TOP_RAW)
def test_the_top_kernels_roofline_is_ncus_own_section_formulas(child: NcuRun) -> None:
    from test_roofline import raw_numbers, section_formulas

    ours = child.roofline()
    raw = raw_numbers(DATA, "ncu_sweep_top")
    assert len(ours) == len(raw)
    expected = section_formulas(raw)
    for column in ("fp32_flops_per_s", "fp16_flops_per_s", "dram_bytes_per_s", "sm_clock_hz"):
        tolerance = 0.005 * 4 * raw["smsp__cycles_elapsed.avg.per_second"].max()
        np.testing.assert_allclose(ours[column], expected[column], rtol=1e-5, atol=tolerance,
                                   err_msg=column)  # fmt: skip
    # the prefill's GEMMs ran on the tensor pipe, under its dense ceiling
    tensor = ours[ours["tensor_op_path"] != ""]
    assert len(tensor) > 0
    achieved = tensor["tensor_flops_per_s"]
    assert ((achieved > 0) & (achieved <= tensor["peak_tensor_flops_per_s"])).all()
    verdicts = child.roofline_bounds()
    assert set(verdicts.loc[verdicts["precision"] == "Tensor", "bound"]) <= {"compute", "memory"}
