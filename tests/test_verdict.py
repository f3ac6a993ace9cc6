"""compare()'s verdict (analysis/verdict.py): each kernel's and range's change b / a with a 95%
interval from the spread of its launches, and a word for it. The statistics on synthetic
launches of known distributions (the interval covers the true ratio in >= 94 of 100 seeded
trials; A vs A is ``same``), then on the bundled real runs (naive vs SDPA attention)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import nsight_magic
from nsight_magic.analysis import verdict
from nsight_magic.analysis.compare import kernel_deltas


def _summary(launches: dict[str, np.ndarray]) -> pd.DataFrame:
    """A kernel summary as nsys stats gives it (n, total, sample std) of these launches."""
    rows = [
        {"name": name, "instances": len(d), "total_ns": int(d.sum()),
         "std_ns": float(np.std(d, ddof=1)) if len(d) > 1 else 0.0}
        for name, d in launches.items()
    ]  # fmt: skip
    return pd.DataFrame(rows)


def _launches(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    # launch times are skewed (a long tail of slow launches): a gamma of shape 20, cv ~22%
    return rng.gamma(20.0, mean / 20.0, size=n).round()


def test_the_interval_covers_the_true_ratio_in_94_of_100_trials() -> None:
    covered = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        a = _summary({"gemm": _launches(rng, 100_000, 40)})
        b = _summary({"gemm": _launches(rng, 90_000, 40)})
        row = kernel_deltas(a, b).iloc[0]
        covered += row["ratio_lo"] <= 0.9 <= row["ratio_hi"]  # true: E[total b] / E[total a]
    assert covered >= 94


def test_a_run_against_itself_and_against_a_rerun_is_same() -> None:
    rng = np.random.default_rng(7)
    a = _summary({"gemm": _launches(rng, 100_000, 40), "softmax": _launches(rng, 8_000, 40)})
    same = kernel_deltas(a, a)
    assert list(same["change"]) == ["same", "same"]
    assert (same["ratio_lo"] < 1).all() and (same["ratio_hi"] > 1).all()
    # a re-run of the same distribution: within noise in most trials (95% nominal)
    reruns = [
        kernel_deltas(_summary({"k": _launches(r, 50_000, 30)}),
                      _summary({"k": _launches(r, 50_000, 30)})).iloc[0]["change"]
        for r in (np.random.default_rng(s) for s in range(100))
    ]  # fmt: skip
    assert reruns.count("same") >= 90


def test_a_change_beyond_noise_is_faster_or_slower_and_the_rest_is_said() -> None:
    rng = np.random.default_rng(3)
    a = _summary({"gemm": _launches(rng, 100_000, 50), "old": _launches(rng, 1_000, 5),
                  "once": np.array([5_000.0])})  # fmt: skip
    b = _summary({"gemm": _launches(rng, 70_000, 50), "new": _launches(rng, 1_000, 5),
                  "once": np.array([4_000.0])})  # fmt: skip
    out = kernel_deltas(a, b).set_index("name")
    assert out.loc["gemm", "change"] == "faster" and out.loc["gemm", "ratio_hi"] < 1
    assert out.loc["new", "change"] == "new" and out.loc["old", "change"] == "gone"
    # one launch has no spread: no interval, and the word says so rather than guess
    assert out.loc["once", "change"] == "unsure"
    assert math.isnan(out.loc["once", "ratio_lo"])
    assert out.loc["once", "interval_from"] == verdict.NONE
    slower = kernel_deltas(b, a).set_index("name")
    assert slower.loc["gemm", "change"] == "slower" and slower.loc["gemm", "ratio_lo"] > 1
    line = verdict.summary_line(out.reset_index(), a, b).line("b")
    assert line.startswith("b: GPU time 0.7")
    assert "1 kernel faster beyond noise, 1 kernel new, 1 kernel gone" in line


def test_the_interval_is_the_delta_methods() -> None:
    ratio, lo, hi = verdict.ratio_interval(100.0, 25.0, 80.0, 16.0)
    se = math.sqrt(25 / 100**2 + 16 / 80**2)
    assert ratio == pytest.approx(0.8)
    assert (lo, hi) == (pytest.approx(0.8 * math.exp(-1.96 * se), rel=1e-4),
                        pytest.approx(0.8 * math.exp(1.96 * se), rel=1e-4))  # fmt: skip
    assert all(math.isnan(v) for v in verdict.ratio_interval(0.0, 1.0, 5.0, 1.0)[1:])


def test_naive_against_sdpa_is_faster_on_the_bundled_runs() -> None:
    """The bundled attention runs (H200): every kernel changed (new or gone), the cell and its
    loop, opened once, take their interval from their share of each run's launches."""
    naive, sdpa = nsight_magic.examples.attention("naive"), nsight_magic.examples.attention("sdpa")
    cmp = nsight_magic.compare(naive, sdpa)
    assert cmp.verdict.change == "faster" and cmp.verdict.hi < 0.1
    assert cmp.summary().startswith(f"{cmp.label_b}: GPU time 0.0")
    assert set(cmp.kernels["change"]) == {"new", "gone"}
    cell = cmp.nvtx[cmp.nvtx["range"] == "cell"].iloc[0]
    assert cell["change"] == "faster" and cell["interval_from"] == verdict.RUN_SHARE
    assert cell["ratio_lo"] < cell["ratio"] < cell["ratio_hi"] < 1
    assert cmp.summary() in cmp.to_html().replace("&gt;", ">")
    again = nsight_magic.compare(naive, naive)
    assert set(again.kernels["change"]) == {"same"} and set(again.nvtx["change"]) == {"same"}
    assert again.verdict.change == "same" and "no kernel changed beyond noise" in again.summary()
