"""NsysRun / NcuRun on the real fixtures: forwarded frames, the mimebundle (widget + static
HTML with PNG charts + text), the static HTML's real findings, and profile_kernel's hand-off."""

from __future__ import annotations

import html

import pytest

from nsight_magic.profilers.drill_request import DrillRequest
from nsight_magic.profilers.ncu import NcuOptions
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.reports.nsys.report import NsysReport
from nsight_magic.results import WIDGET_MIME, NcuRun, NsysRun
from nsight_magic.results import base as results_base

GEMM_64 = (
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4"
    "_alignc4_execute_kernel__5x_cublas"
)


@pytest.fixture(scope="module")
def nsys_run(nsys_small_sqlite, tmp_path_factory):
    report = NsysReport.open(nsys_small_sqlite)
    return NsysRun(report, tmp_path_factory.mktemp("run"), {"name": "small"})


@pytest.fixture(scope="module")
def ncu_run(ncu_reports):
    report = NcuReport.open(ncu_reports["ncu_gemm_roofline"])
    return NcuRun(report, None, {"name": "gemm"})


def test_frames_forwarded(nsys_run, data_dir):
    summary = nsys_run.kernel_summary()
    assert summary.equals(nsys_run.report.kernel_summary())
    assert summary["name"].iloc[0] == GEMM_64
    assert int(summary["total_ns"].iloc[0]) == 30528  # nsys stats cuda_gpu_kern_sum
    assert len(nsys_run.kernels()) == int(summary["instances"].sum()) == 26
    assert nsys_run.gpu_info()["name"] == "NVIDIA H200"
    assert nsys_run.name == "small" and nsys_run.run_dir.is_dir()
    assert "26 kernels" in repr(nsys_run)


def test_static_html_has_real_findings(nsys_run):
    page = nsys_run.to_html()
    assert "NVIDIA H200" in page
    assert html.escape(GEMM_64) in page  # full name (table cell or title tooltip)
    assert "30.528 us" in page  # top kernel total
    assert "143.569 ms" in page  # GPU-projected time of the nsight_magic:cell range
    assert "nsight_magic:L3: for step in range(3): ..." in page
    assert "HtoD" in page and "DtoH" in page
    assert page.count("data:image/png;base64,") >= 2  # kernels + NVTX charts at least
    assert nsys_run.to_html() is page  # cached: PNGs render once


def test_mimebundle_outside_kernel_is_static(nsys_run):
    bundle = nsys_run._repr_mimebundle_()
    assert WIDGET_MIME not in bundle
    assert bundle["text/html"] == nsys_run.to_html()
    assert bundle["text/plain"].startswith("<NsysRun 'small'")


def test_mimebundle_in_kernel_has_widget_and_static(nsys_run, monkeypatch):
    monkeypatch.setattr(results_base, "in_kernel", lambda: True)
    bundle = nsys_run._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", WIDGET_MIME}
    assert bundle[WIDGET_MIME]["model_id"]
    assert "data:image/png;base64," in bundle["text/html"]
    only = nsys_run._repr_mimebundle_(include={"text/plain"})
    assert set(only) == {"text/plain"}


def test_profile_kernel_goes_to_the_drill_runner_handed_in_and_keeps_child(nsys_run, ncu_run):
    """Results never import the session: the run's DrillRunner (the notebook's session)
    re-runs the cell; the run keeps the child and links it back for MFU."""
    calls = []
    child_run = NcuRun(ncu_run.report, None, {"name": "child"})

    class Recorder:
        def profile_kernel(self, parent, request, **callbacks):
            calls.append(("kernel", parent, request, callbacks))
            return child_run

        def profile_range(self, parent, nvtx, request=None, **callbacks):
            calls.append(("range", parent, tuple(nvtx), request))
            return child_run

    nsys_run.drill_runner = Recorder()
    before = len(nsys_run.children)
    child = nsys_run.profile_kernel(GEMM_64, set="full", instance=2)
    assert child is child_run and child.parent is nsys_run
    wanted = DrillRequest(kernel=GEMM_64, instance=2, ncu=NcuOptions(set="full"))
    no_callbacks = {"progress": None, "output": None, "cancel": None}
    assert calls == [("kernel", nsys_run, wanted, no_callbacks)]
    assert nsys_run.children[before:] == [child_run]
    nsys_run.profile_range("LLM", "LLM@prefill", set="basic")
    assert calls[-1] == ("range", nsys_run, ("LLM", "LLM@prefill", "PushPop"),
                         DrillRequest(ncu=NcuOptions(set="basic")))  # fmt: skip
    # an option a drill-down does not take is a TypeError, never dropped on the way
    with pytest.raises(TypeError, match="bogus"):
        nsys_run.profile_kernel(GEMM_64, bogus=1)
    assert len(calls) == 2
    nsys_run.drill_runner = None


def test_ncu_run_static_html(ncu_run, data_dir):
    kernels = ncu_run.kernels()
    assert len(kernels) == 2
    page = ncu_run.to_html()
    assert html.escape(kernels["name"].iloc[0]) in page
    assert "Roofline" in page
    assert page.count("data:image/png;base64,") >= 2  # SOL + roofline
    bundle = ncu_run._repr_mimebundle_()
    assert bundle["text/plain"].startswith("<NcuRun 'gemm': 2 profiled launches")


def test_ncu_run_with_parent_shows_mfu_on_nsys_time(ncu_reports, data_dir):
    from nsight_magic.reports import open_report

    parent = NsysRun(open_report(data_dir / "nsys_gemm.sqlite"))
    run = NcuRun(open_report(ncu_reports["ncu_gemm_roofline"]), parent=parent)
    page = run.to_html()
    assert "HFU / MFU per kernel" in page and "HFU / MFU per NVTX range" in page
    assert "derived: H200 bf16 dense" in page
    assert "nsight_magic:L1: C = A @ B  # bf16 2048x1024x512" in page
    assert page.count("data:image/png;base64,") == 3  # SOL, roofline, HFU/MFU


def test_ncu_run_advice_and_roofline_chart(ncu_run):
    advice = ncu_run.advice()
    assert list(advice.columns)[:8] == [
        "launch", "name", "rule", "section", "title", "message", "speedup_pct", "speedup_type",
    ]  # fmt: skip
    # ncu's rules, largest estimated speedup first; rules without an estimate come last
    speedup = advice["speedup_pct"]
    assert len(advice) and speedup.dropna().is_monotonic_decreasing
    assert speedup.isna().to_numpy()[speedup.notna().sum() :].all()
    spec = ncu_run.roofline_chart().to_dict()
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["line", "point", "text"]


def test_examples_open_in_one_line(tmp_path, monkeypatch):
    """The bundled runs: real reports (H200), each one call; unpacked copies are temporary."""
    import tempfile

    import nsight_magic
    from nsight_magic import examples

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(examples, "_unpacked", None)
    run = nsight_magic.examples.llm()
    assert isinstance(run, NsysRun) and len(run.kernels()) == 86
    assert run.gpu_info()["name"] == "NVIDIA H200"
    assert run.kernel_summary()["name"].iloc[0].startswith("nvjet_sm90_tst_256x128")
    kernel = examples.llm_kernel()
    assert isinstance(kernel, NcuRun) and isinstance(kernel.parent, NsysRun)
    assert kernel.frames.roofline()[0]["verdict"].iloc[0].startswith("compute-bound")
    assert kernel.frames.mfu()["kernels"]["time_source"].iloc[0] == "nsys"
    # The .ncu-rep was unpacked into a folder that is already gone; the SQLite exports live in
    # one folder for the process (nsys reports read tables on demand).
    (session,) = [p for p in tmp_path.iterdir()]
    assert session.name.startswith("nsight-magic-examples-")
    assert sorted(p.name for p in session.iterdir()) == ["llm_prefill.sqlite"]
    cmp = examples.compare()
    assert (cmp.label_a, cmp.label_b) == ("attention naive", "attention sdpa")
    assert cmp.kernels["delta_ns"].sum() < 0  # fused bf16 SDPA is faster
    assert set(examples.available()) >= {"tour", "llm_prefill", "llm_kernel", "attention_sdpa"}
    with pytest.raises(ValueError, match="prefill"):
        examples.llm("train")
