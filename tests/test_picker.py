"""The kernel picker driven as a user would: choose a kernel, set options, click Profile. The
profile function is replaced by one returning a REAL NcuRun (from the ncu_reports fixture)."""

from __future__ import annotations

import threading

import pytest

from nsight_magic.analysis.attribution import kernels_in_range
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.reports.nsys.report import NsysReport
from nsight_magic.results import NcuRun, NsysRun
from nsight_magic.views.picker import KernelPicker

SOFTMAX = (
    "void <unnamed>::softmax_warp_forward<float, float, float, (int)9, (bool)0, (bool)0>"
    "(T2 *, const T1 *, int, int, int, const bool *, int, bool)"
)


@pytest.fixture(scope="module")
def nsys_run(nsys_small_sqlite):
    report = NsysReport.open(nsys_small_sqlite)
    return NsysRun(report, meta={"name": "small"})


@pytest.fixture(scope="module")
def ncu_run(ncu_reports):
    report = NcuReport.open(ncu_reports["ncu_small_roofline"])
    return NcuRun(report, meta={"name": "picked"})


def test_ranked_like_nsys_stats(nsys_run, data_dir):
    import pandas as pd

    ref = pd.read_csv(data_dir / "nsys_stats" / "nsys_small_cuda_gpu_kern_sum.csv")
    ranked = nsys_run.frames.ranked_kernels()
    assert ranked["name"].tolist() == ref["Name"].tolist()
    assert ranked["total_ns"].tolist() == ref["Total Time (ns)"].tolist()


def test_filter_by_nvtx_range(nsys_run):
    picker = KernelPicker(nsys_run.frames, profile_fn=lambda *a, **k: None)
    assert len(picker.kernel.options) == 12
    labels = [label for label, _ in picker.range_filter.options]
    assert ":LLM@prefill" in labels and "nsight_magic:cell" in labels
    picker.range_filter.value = ("", "LLM@prefill")
    ranked = picker.ranked()
    # nvtx_gpu_proj_sum: LLM@prefill holds 15 GPU ops, all kernels; softmax is a decode kernel.
    assert ranked["instances"].sum() == 15
    assert SOFTMAX not in ranked["name"].tolist()
    assert [v for _, v in picker.kernel.options] == ranked["name"].tolist()
    picker.range_filter.value = ("", "decode")
    ranked = picker.ranked().set_index("name")
    assert ranked.loc[SOFTMAX, "instances"] == 3
    assert picker.kernel.value == SOFTMAX  # the top kernel of the range is preselected
    picker.range_filter.value = ("", "side-work")  # start/end range: any thread
    assert picker.ranked()["instances"].sum() == 3
    picker.range_filter.value = ("nsight_magic", "cell")
    assert picker.ranked()["instances"].sum() == len(nsys_run.kernels())  # all in the cell


def test_kernels_in_range_push_pop_needs_same_thread(nsys_run):
    k = kernels_in_range(
        nsys_run.kernels(), nsys_run.cuda_api(), nsys_run.nvtx(), "", "decode/step"
    )
    inner = kernels_in_range(nsys_run.kernels(), nsys_run.cuda_api(), nsys_run.nvtx(), "", "decode")
    assert len(k) and set(k["correlation_id"]) <= set(inner["correlation_id"])


def test_profile_click_renders_ncu_view_and_ignores_second_click(nsys_run, ncu_run):
    release = threading.Event()
    started = threading.Event()
    calls = []

    def profile_fn(name, **opts):
        calls.append((name, opts))
        started.set()
        opts["progress"](0.5, "ncu: running")
        assert release.wait(30)
        return ncu_run

    picker = KernelPicker(nsys_run.frames, profile_fn=profile_fn)
    picker.kernel.value = SOFTMAX
    assert picker.instance.max == 2  # 3 launches of softmax in the run
    picker.ncu_set.value = "full"
    picker.instance.value = 1
    picker.count.value = 2
    picker.profile_button.click()
    assert started.wait(30)
    assert picker.running and picker.profile_button.disabled
    assert not picker.cancel_button.disabled
    picker.profile_button.click()  # ignored while running
    assert picker.progress.value == 0.5 and "ncu: running" in picker.status.value
    release.set()
    picker.thread.join(30)
    assert len(calls) == 1
    name, opts = calls[0]
    assert name == SOFTMAX
    assert {k: opts[k] for k in ("set", "instance", "count")} == {
        "set": "full",
        "instance": 1,
        "count": 2,
    }
    assert isinstance(opts["cancel"], threading.Event) and not opts["cancel"].is_set()
    assert picker.last_result is ncu_run and picker.last_error is None
    (view,) = picker.result.children
    tabs = view.children[1]
    assert tabs.titles == ("Advice", "Launches", "Sections", "Roofline", "MFU")
    assert "Nsight Compute: picked" in view.children[0].value
    assert not picker.profile_button.disabled and picker.cancel_button.disabled


def test_cancel_sets_event_and_error_is_one_line(nsys_run):
    started = threading.Event()

    def profile_fn(name, *, cancel, **opts):
        started.set()
        assert cancel.wait(30)
        raise KeyboardInterrupt("profile interrupted\nlog tail ...")

    picker = KernelPicker(nsys_run.frames, profile_fn=profile_fn)
    picker.profile_button.click()
    assert started.wait(30)
    picker.cancel_button.click()
    picker.thread.join(30)
    assert picker.cancel_event.is_set()
    assert "cancelled" in picker.status.value
    assert picker.last_error == "KeyboardInterrupt: profile interrupted"
    assert picker.result.children == ()


def test_failure_shown_as_one_line(nsys_run):
    def profile_fn(name, **opts):
        raise RuntimeError("ncu exited with code 1: ERR_NVGPUCTRPERM\nmore lines")

    picker = KernelPicker(nsys_run.frames, profile_fn=profile_fn)
    picker.profile_button.click()
    picker.thread.join(30)
    assert "profile failed: RuntimeError: ncu exited with code 1: ERR_NVGPUCTRPERM" in (
        picker.status.value
    )
    assert "more lines" not in picker.status.value


def test_range_filter_starts_on_all_kernels(nsys_run):
    """The dropdown shows "(all kernels)" at first, not a blank (ipywidgets blanks a None value)."""
    picker = KernelPicker(nsys_run.frames, profile_fn=lambda *a, **k: None)
    assert picker.range_filter.label == "(all kernels)"
    assert len(picker.ranked()) == len(nsys_run.kernel_summary())


def test_kernel_list_shows_short_names_distinguishable(nsys_run):
    """Short names in the list; where several kernels share one, the head of the full name
    follows, so no two entries read the same; the full name of the choice shows below."""
    picker = KernelPicker(nsys_run.frames, profile_fn=lambda *a, **k: None)
    labels = [label for label, _ in picker.kernel.options]
    assert len(set(labels)) == len(labels)
    softmax = next(label for label, value in picker.kernel.options if value == SOFTMAX)
    # unique short name: no [full name] tag (the user's range it ran in follows: "in ...")
    assert "softmax_warp_forward<9, 0, 0>" in softmax and "[" not in softmax
    assert softmax.endswith("  in :decode/step")
    # 6 distinct at::native elementwise kernels ran here: one short form, told apart by tags
    shared = [label for label in labels if "vectorized_elementwise_kernel<4> [" in label]
    assert len(shared) == 6 and len({label.split("  x")[1] for label in shared}) == 6
    # two cuBLAS kernels whose short names differ only after 80 characters read apart
    cublas = [label for label in labels if "sm80_xmma_gemm" in label]
    assert len(cublas) == 2 and "split_k" in cublas[1]
    picker.kernel.value = SOFTMAX
    assert "softmax_warp_forward&lt;float" in picker.full_name.value
