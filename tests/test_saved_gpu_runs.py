"""The run folders that notebooks 02-06 wrote on the lent H100s and H200s (committed under
notebooks/runs/) reload offline, with no GPU and no Nsight tools, and say what the notebooks say."""

from __future__ import annotations

from pathlib import Path

import pytest

import nsight_magic
from nsight_magic.views import charts

RUNS = Path(__file__).resolve().parent.parent / "notebooks" / "runs"


def _run(study: str, name: str) -> Path:
    found = sorted((RUNS / study).glob(f"*-{name}"))
    if not found:
        pytest.skip(f"no saved {study}/{name} run")
    return found[-1]


def test_llm_prefill_run_and_its_picker_child_reload() -> None:
    prefill = nsight_magic.load_run(_run("02_llm_drilldown", "prefill"))
    assert type(prefill).__name__ == "NsysRun"
    assert prefill.gpu_info()["name"] == "NVIDIA H100 80GB HBM3"
    summary = prefill.kernel_summary()
    top = summary["name"].iloc[0]
    assert top.startswith("nvjet_sm90")  # a Hopper bf16 GEMM is the prefill's top kernel
    # The picker's child run: ncu profiled exactly the kernel that was picked.
    child_dir = next((prefill.run_dir / "ncu").iterdir())
    child = nsight_magic.load_run(child_dir)
    assert type(child).__name__ == "NcuRun"
    assert list(child.kernels()["name"]) == [top]
    point = child.roofline().iloc[0]
    assert point["tensor_op_path"].endswith("bf16_dst_fp32_sparsity_off")
    assert 0 < point["tensor_flops_per_s"] <= point["peak_tensor_flops_per_s"]
    # notebook 02 draws it with kernel.roofline_chart(): the tensor roof and one labelled point
    spec = child.roofline_chart().to_dict()
    roof, dots, _labels = spec["layer"]
    assert len(spec["datasets"][dots["data"]["name"]]) == 1
    assert any(r["ceiling"].startswith("Tensor") for r in spec["datasets"][roof["data"]["name"]])


def test_llm_decode_run_has_statement_ranges() -> None:
    decode = nsight_magic.load_run(_run("02_llm_drilldown", "decode"))
    proj = decode.nvtx_gpu_projection()
    stmts = set(proj.loc[proj["domain"] == "nsight_magic", "range"])
    assert "cell" in stmts
    assert any(s.startswith("L4: for step in range(NEW)") for s in stmts)
    assert int(decode.kernel_summary()["instances"].sum()) == len(decode.kernels())
    # notebook 02's MFU chart of the decode statement (model FLOPs given, nsys time)
    stmt = next(s for s in stmts if s.startswith("L4: for step in range(NEW)"))
    phase = decode.mfu({stmt: 1e12}, dtype="bf16")
    spec = charts.utilisation_chart(phase, label="range").to_dict()
    (row,) = spec["datasets"][spec["data"]["name"]]
    assert row["measure"] == "MFU" and row["pct"] == pytest.approx(100 * phase["mfu_frac"].iloc[0])
    assert "H100 SXM bf16 dense" in spec["title"]["subtitle"]


def test_compare_runs_reload_and_show_the_speedup() -> None:
    before = nsight_magic.load_run(_run("03_compare", "before"))
    after = nsight_magic.load_run(_run("03_compare", "after"))
    cmp = nsight_magic.compare(before, after)
    assert cmp.kernels["total_ns_a"].sum() > 10 * cmp.kernels["total_ns_b"].sum()
    assert any("flash" in n for n in after.kernel_summary()["name"])


def test_two_rank_run_and_its_one_rank_drilldown_reload() -> None:
    """Notebook 04 (nvidia-h200-x2): one report, two ranks; rank 1 was made late before the
    third all-reduce, so rank 0 waits there; the picker's child profiled rank 1's GEMM only."""
    run = nsight_magic.load_run(_run("04_multi_gpu", "tp_step"))
    ranks = run.report.ranks()
    assert sorted(ranks["rank"].dropna().astype(int)) == [0, 1]
    assert set(ranks["source"]) == {"nvtx"}
    assert run.meta["rank_status"] == {"0": "ok", "1": "ok"}
    skew = run.report.rank_skew().sort_values("instance")
    assert len(skew) == 4 and set(skew["kind"]) == {"AllReduce"}
    late = skew.iloc[2]
    assert late["last_rank"] == 1 and late["skew_ns"] > 4_000_000  # the 5 ms sleep
    assert late["skew_ns"] == skew["skew_ns"].max()
    waits = run.report.collective_summary().set_index("rank")["wait_ns"]
    assert waits[0] > 10 * waits[1]
    per_rank = run.report.rank_kernel_summary()
    assert set(per_rank["rank"]) == {0, 1}
    child = nsight_magic.load_run(next((run.run_dir / "ncu").iterdir()))
    assert type(child).__name__ == "NcuRun" and child.meta["rank"] == 1
    (name,) = child.kernels()["name"]
    assert name.startswith("nvjet_sm90")
    assert name in set(per_rank.loc[per_rank["rank"] == 1, "name"])


def test_training_step_runs_reload_with_their_phases_and_backward_drill_downs() -> None:
    """Notebook 05 (H100): a Qwen2 training step. The backward phase holds autograd's kernels
    (nsys's own-thread projection holds almost none of them), MFU per phase is a fraction of the
    peak, and the picker's children (a backward GEMM, the attention backward kernel) reload with
    the phase ncu recorded for them."""
    step = nsight_magic.load_run(_run("05_training", "step"))
    keys = ["domain", "range", "style"]
    ph = step.nvtx_gpu_projection().merge(step.nvtx_phases(), on=keys).set_index("range")
    assert ph.loc["train@bwd", "phase_gpu_ops"] > 100 * ph.loc["train@bwd", "gpu_ops"]
    assert ph.loc["train@bwd", "phase_total_ns"] > ph.loc["train@fwd", "phase_total_ns"]
    flops = {"train:train@fwd": 1e12, "train:train@bwd": 2e12}
    mfu = step.mfu(flops=flops).set_index("range")
    assert mfu.loc["train@bwd", "time_ns"] == ph.loc["train@bwd", "phase_total_ns"]
    children = sorted((step.run_dir / "ncu").iterdir())
    assert len(children) == 2
    kernels = [nsight_magic.load_run(c).kernels() for c in children]
    assert all(list(k["phase"]) == ["train:train@bwd"] for k in kernels)
    names = " ".join(k["name"].iloc[0] for k in kernels)
    assert "nvjet" in names or "gemm" in names
    assert "bprop" in names or "bwd" in names or "backward" in names.lower()


def test_one_step_of_four_and_the_loader_bound_loop_reload() -> None:
    one = nsight_magic.load_run(_run("05_training", "one_step"))
    assert one.meta["options"]["nvtx_capture"] == "train@step#3"
    v = one.nvtx()
    assert int((v["range"] == "train@step").sum()) == 1
    assert "train:train@bwd" in set(one.kernel_phases())
    loader = nsight_magic.load_run(_run("05_training", "loader"))
    sentences = " ".join(loader.idle_causes()["sentence"])
    assert "DataLoader" in sentences


def test_sweep_notebook_runs_reload_as_a_sweep(tmp_path: Path) -> None:
    """Notebook 06 (H100): a batch-size sweep (1 to 64) of an 8-layer Llama prefill with
    --memory. Its sweep folder is committed; the ``profile_top(10)`` child of bs=64 (a 42 MB
    roofline report) and the ``share()`` copy are not, being too large for the repository: a real
    top-N child reloads from tests/data (tests/test_sweep_fixture.py), and the share is made
    again here from the committed folder."""
    from nsight_magic.run_folders.runs import list_runs

    sweep = nsight_magic.load_run(_run("06_sweep", "prefill"))
    assert type(sweep).__name__ == "SweepRun"
    sizes = [1, 2, 4, 8, 16, 32, 64]
    assert sweep.variables == ["bs"] and sweep.configs == [(bs,) for bs in sizes]
    assert "7 configurations of bs, 7 ok" in repr(sweep)
    table = sweep.table().set_index("bs")
    assert (table["status"] == "ok").all()
    assert table.at[64, "gpu_time_ns"] > 8 * table.at[1, "gpu_time_ns"]  # 64x the tokens
    assert table.at[64, "peak_memory_bytes"] > table.at[1, "peak_memory_bytes"]
    for index, bs in enumerate(sizes):
        run = sweep.run(bs=bs)
        assert run.gpu_info()["name"] == "NVIDIA H100 80GB HBM3"
        assert run.meta["sweep"] == {"index": index, "values": {"bs": bs}, "label": f"bs={bs}"}
        assert run.meta["warmup"] == 1 and run.meta["options"]["memory"] is True
    # the notebook's model (1024 wide, 8 layers, MLP 2816, vocab 32000) and 512-token prompts
    d, layers, ffn, vocab, seq = 1024, 8, 2816, 32000, 512

    def flops(config: dict) -> dict[str, float]:
        tokens = config["bs"] * seq
        body = nsight_magic.transformer_flops(layers * (4 * d * d + 3 * d * ffn), tokens,
                                              n_layers=layers, seq_len=seq, d_model=d,
                                              causal=True)  # fmt: skip
        head = nsight_magic.transformer_flops(vocab * d, tokens)
        return {"LLM:layers": body, "LLM:head": head, "LLM:prefill": body + head}

    mfu = sweep.mfu(flops=flops)
    assert len(mfu) == 3 * len(sizes)
    assert ((mfu["mfu_frac"] > 0) & (mfu["mfu_frac"] <= 1)).all()
    prefill = mfu[mfu["range"] == "prefill"].set_index("bs")["mfu_frac"]
    assert prefill[64] > prefill[1]
    # the GEMMs a profile_top(10) of bs=64 asks ncu for: the bs=64 run's top 10 by nsys time
    top = sweep.run(bs=64).kernel_summary()["name"].head(10)
    assert sum(name.startswith("nvjet_sm90") for name in top) >= 2
    # list_runs: the sweep folder is one row, its configurations its children
    (row,) = list_runs(RUNS / "06_sweep").itertuples()
    assert (row.tool, row.status, row.children) == ("nsys sweep", "ok", 7)
    assert row.wall_s == pytest.approx(sum(c.wall_s for c in sweep.record.configs))
    # the notebook's share(), made again: the folders it printed, the same numbers, a page with
    # no <script>; each configuration keeps its generated script.py (docs/sharing.md) but not
    # its report.nsys-rep nor its vars.pkl
    copy = sweep.share(tmp_path / "06_sweep_shared")
    assert type(copy).__name__ == "SweepRun" and copy.configs == sweep.configs
    assert sorted(p.name for p in copy.run_dir.iterdir()) == [
        "01-bs_1", "02-bs_2", "03-bs_4", "04-bs_8", "05-bs_16", "06-bs_32", "07-bs_64",
        "index.html", "share.json", "sweep.json",
    ]  # fmt: skip
    assert copy.table()["gpu_time_ns"].equals(sweep.table()["gpu_time_ns"])
    assert "<script" not in (copy.run_dir / "index.html").read_text()
    assert len(list(copy.run_dir.glob("*/script.py"))) == len(sizes)
    assert not list(copy.run_dir.rglob("*.nsys-rep")) and not list(copy.run_dir.rglob("vars.pkl"))
