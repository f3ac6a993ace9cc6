"""``%%nsys --repeat N``'s statistics (analysis/repeats.py): Student's t against its known
values, the per-repeat columns on totals with a known spread, which repeat a launch belongs to
(its launching call's start, any thread; between the repeats: none), the unstable line, and
the verdict read from repeats. The frames of a real repeated capture are checked in
tests/test_repeat_fixture.py."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from nsight_magic.analysis import compare, repeats, verdict


@pytest.mark.parametrize(
    ("dof", "expected"),
    # scipy.stats.t.ppf(0.975, dof)
    [(1, 12.706204736), (4, 2.776445105), (9, 2.262157163), (30, 2.042272456),
     (31, 2.039513446), (60, 2.000297822), (120, 1.979930405), (1000, 1.962339081)],
)  # fmt: skip
def test_t95_is_students_t(dof: int, expected: float) -> None:
    assert repeats.t95(dof) == pytest.approx(expected, abs=2e-5)
    assert math.isnan(repeats.t95(0))


def test_repeat_columns_of_known_totals() -> None:
    stats = repeats.repeat_stats(pd.DataFrame([[10.0, 12.0, 11.0, 13.0], [5.0, 5.0, 5.0, 5.0]]))
    first = stats.iloc[0]
    std = float(np.std([10, 12, 11, 13], ddof=1))
    assert first.repeat_mean_ns == 11.5 and first.repeat_med_ns == 11.5
    assert first.repeat_std_ns == pytest.approx(std)
    half = 3.182446305 * std / 2  # t(0.975, 3) * s / sqrt(4)
    assert first.repeat_ci95_lo_ns == pytest.approx(11.5 - half)
    assert first.repeat_ci95_hi_ns == pytest.approx(11.5 + half)
    assert first.repeat_rsd_pct == pytest.approx(100 * std / 11.5)
    steady = stats.iloc[1]
    assert steady.repeat_std_ns == 0 and steady.repeat_rsd_pct == 0
    assert list(stats.columns) == repeats.REPEAT_COLUMNS


def test_the_interval_covers_the_true_mean_95_times_in_100() -> None:
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(400):
        totals = rng.normal(100.0, 5.0, size=(1, 10))
        row = repeats.repeat_stats(pd.DataFrame(totals)).iloc[0]
        covered += row.repeat_ci95_lo_ns <= 100.0 <= row.repeat_ci95_hi_ns
    assert 0.92 <= covered / 400 <= 0.98


def test_a_launch_belongs_to_the_repeat_its_call_started_in() -> None:
    """Three openings of the cell in pid 1; a call in each, one between two openings (a
    put-back), one before the first; a kernel of another thread counts by its call's start."""
    nvtx = pd.DataFrame({"domain": ["nsight_magic"] * 3 + ["nsight_magic"],
                         "range": ["cell", "cell", "cell", "L1: y = f(x)"],
                         "pid": [1, 1, 1, 1], "start_ns": [100, 300, 500, 110],
                         "end_ns": [200, 400, 600, 190]})  # fmt: skip
    windows = repeats.repeat_windows(nvtx)
    assert windows["repeat"].tolist() == [0, 1, 2]
    api = pd.DataFrame({"pid": [1] * 5, "correlation_id": [1, 2, 3, 4, 5],
                        "start_ns": [50, 150, 250, 350, 550]})  # fmt: skip
    kernels = pd.DataFrame({"pid": [1] * 6, "correlation_id": [1, 2, 3, 4, 5, 9]})
    got = repeats.launch_repeats(kernels, api, windows)
    # before the first, in 1, between 1 and 2 (put-back), in 2, in 3, no recorded call
    assert got.tolist() == [-1, 0, -1, 1, 2, -1]


def test_unstable_repeats_are_said() -> None:
    assert repeats.unstable_notes(repeats.RepeatStats((100.0, 101.0, 99.0))) == []
    notes = repeats.unstable_notes(repeats.RepeatStats((100.0, 130.0, 80.0)))
    assert len(notes) == 1 and notes[0].startswith("Unstable: the GPU time per repeat varies")
    assert repeats.RepeatStats((100.0, 102.0)).line().startswith("2 repeats: GPU time per repeat")


def _summary(name_totals: dict[str, list[float]], n: int) -> pd.DataFrame:
    """A kernel summary of ``n`` repeats: per kernel its per-repeat totals (one launch each)."""
    rows = [{"name": k, "instances": n, "total_ns": int(sum(v)), "std_ns": float(np.std(v))}
            for k, v in name_totals.items()]  # fmt: skip
    frame = pd.DataFrame(rows)
    stats = repeats.repeat_stats(pd.DataFrame([v for v in name_totals.values()],
                                              index=list(name_totals)))  # fmt: skip
    out = repeats.with_repeat_stats(frame, stats, ["name"], n)
    out.attrs["repeat_totals_ns"] = list(np.sum(list(name_totals.values()), axis=0))
    return out


def test_compare_reads_its_interval_from_the_repeats_and_goes_per_repeat() -> None:
    rng = np.random.default_rng(3)
    a = _summary(
        {"gemm": list(rng.normal(1000, 10, 10)), "softmax": list(rng.normal(500, 5, 10))}, 10
    )
    b = _summary(
        {"gemm": list(rng.normal(800, 10, 10)), "softmax": list(rng.normal(500, 5, 10))}, 10
    )
    deltas = compare.kernel_deltas(a, b).set_index("name")
    assert set(deltas["interval_from"]) == {verdict.REPEATS}
    assert deltas.loc["gemm", "change"] == "faster" and deltas.loc["softmax", "change"] == "same"
    assert deltas.loc["gemm", "total_ns_a"] == pytest.approx(1000, rel=0.02)  # per repeat
    line = verdict.summary_line(compare.kernel_deltas(a, b), a, b).line("b")
    assert "GPU time per repeat" in line and "(10 and 10 repeats)" in line
    # one run of one repeat against ten: per repeat, the single run's spread from its launches
    single = pd.DataFrame({"name": ["gemm"], "instances": [1], "total_ns": [1000],
                           "std_ns": [0.0]})  # fmt: skip
    mixed = compare.kernel_deltas(single, a).set_index("name")
    assert mixed.loc["gemm", "ratio"] == pytest.approx(1.0, rel=0.02)
    assert mixed.attrs["per_repeat"] == (1, 10)
