"""Fuzz the report loaders with mutated REAL fixtures: whatever the bytes, opening a report and
reading every frame it offers (and ``roofline()``, ``sol()``, ``advice()`` for ncu) either works or
raises a ``ReportError`` subclass, never anything else; and a report that loads never has a
kernel named None or "".

Counts: ``make test`` runs 1,960 mutated reports: sqlite 1,600, ncu 120 (80 of the --metrics
report, 40 of a --set roofline report, whose rule results feed ``advice()``), parquet 240. Each
example flips, zeroes, truncates or splices bytes of one real report. ``derandomize`` keeps CI
repeatable; ``make fuzz`` (NSIGHT_MAGIC_FUZZ_SCALE=4) runs the long campaign, 7,840 cases, each
shard drawing new cases beyond the short one's; NSIGHT_MAGIC_FUZZ_SCALE=0.1 a quick tenth.

Time (2-core dev machine): ncu cases take ~0.2 s each (every ``.ncu-rep`` is read by
``ncu_report`` in a child process, ``reports.ncu.extract``, which turns ncu_report's C++ aborts
on some mutations into a CorruptReportError instead of killing pytest), parquet ~0.12 s (mutate
one table file, load, restore it), sqlite ~0.02 s. Issue 25 (``make test`` <= 6 min on 2 cores)
cut the campaign in ``make test`` from 10,000 to 7,200 and then to 1,960 (~1 min of CPU instead
of ~4.5), the long one moving to ``make fuzz``. The kinds run as seeded shards
(``@seed(shard)``: repeatable, and each shard draws other cases than the rest), so that
``pytest -n 2`` spreads them over both cores."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from nsight_magic import open_report
from nsight_magic.errors import ReportError
from nsight_magic.reports.ncu.report import NcuReport
from nsight_magic.reports.nsys.report import NsysReport

SCALE = float(os.environ.get("NSIGHT_MAGIC_FUZZ_SCALE", "1"))
FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@st.composite
def mutations(draw: st.DrawFn, size: int) -> list[tuple[str, int, int]]:
    """A short list of (kind, offset, value) edits within a file of ``size`` bytes."""
    kinds = st.sampled_from(["flip", "zero", "truncate", "splice"])
    edits = st.tuples(kinds, st.integers(0, size - 1), st.integers(0, 255))
    return draw(st.lists(edits, min_size=1, max_size=4))


def mutate(data: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for kind, offset, value in edits:
        if not buf:
            break
        offset %= len(buf)
        if kind == "flip":
            buf[offset] ^= value or 0xFF
        elif kind == "zero":
            buf[offset : offset + 512] = bytes(len(buf[offset : offset + 512]))
        elif kind == "truncate":
            del buf[offset:]
        else:  # splice: repeat a page-sized slice elsewhere (plausible but wrong structure)
            chunk = buf[offset : offset + 4096]
            pos = (offset * 7 + value) % len(buf)
            buf[pos : pos + len(chunk)] = chunk
    return bytes(buf)


# What a view or a user can ask of a report: the loaders' frames, the nsys summaries nsys stats
# also prints, and ncu's roofline, SOL and advice. (The other summaries are analysis functions
# of these frames.)
NSYS_READS = (
    "meta",
    "cuda_api",
    "kernels",
    "nvtx",
    "memcpy",
    "memset",
    "graph_launches",
    "processes",
    "gpu_work",
    "gpus",
    "gpu_info",
    "capture_window",
    "kernel_summary",
    "nvtx_gpu_projection",
)
NCU_READS = (
    "kernels",
    "metrics",
    "sol",
    "roofline",
    "advice",
    "advice_note",
    "nvtx_ranges",
    "device",
)


def read_everything(report: NsysReport | NcuReport) -> None:
    """Touch every frame a view would read, so lazy loading is fuzzed too."""
    for name in NSYS_READS if isinstance(report, NsysReport) else NCU_READS:
        getattr(report, name)()
    assert isinstance(report.warnings, list)
    if isinstance(report, NcuReport):
        for launch in range(len(report)):
            report.sections(launch)
    names = report.kernels()["name"]
    assert names.notna().all() and (names.astype(str) != "").all(), "a kernel named None or ''"


def check_typed(path: Path) -> None:
    # The contract: it reads, or raises a typed ReportError; anything else fails the test.
    with contextlib.suppress(ReportError):
        read_everything(open_report(path))


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="fuzz-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def shards(total: int, count: int) -> list[Any]:
    """``count`` pytest params ``(shard, cases)`` whose cases add up to ``total``."""
    return [
        pytest.param(i, total // count + (i < total % count), id=f"{i + 1}of{count}")
        for i in range(count)
    ]


@pytest.mark.parametrize(("shard", "cases"), shards(1600, 2))
def test_fuzz_nsys_sqlite(data_dir: Path, scratch: Path, shard: int, cases: int) -> None:
    original = (data_dir / "nsys_small.sqlite").read_bytes()
    target = scratch / f"fuzz-{shard}.sqlite"

    @seed(shard)
    @settings(FUZZ, max_examples=round(cases * SCALE))
    @given(mutations(len(original)))
    def run(edits: list[tuple[str, int, int]]) -> None:
        target.write_bytes(mutate(original, edits))
        check_typed(target)

    run()


NCU_CASES = [("ncu_gemm_metrics", *s.values) for s in shards(80, 1)]
NCU_CASES += [("ncu_gemm_roofline", *s.values) for s in shards(40, 1)]


@pytest.mark.parametrize(("name", "shard", "cases"), NCU_CASES)
def test_fuzz_ncu_rep(
    ncu_reports: dict[str, Path], scratch: Path, name: str, shard: int, cases: int
) -> None:
    original = ncu_reports[name].read_bytes()
    target = scratch / f"fuzz-{shard}.ncu-rep"

    @seed(shard)
    @settings(FUZZ, max_examples=round(cases * SCALE))
    @given(mutations(len(original)))
    def run(edits: list[tuple[str, int, int]]) -> None:
        target.write_bytes(mutate(original, edits))
        check_typed(target)

    run()


@pytest.mark.parametrize(("shard", "cases"), shards(240, 1))
def test_fuzz_nsys_parquet(data_dir: Path, scratch: Path, shard: int, cases: int) -> None:
    src = data_dir / "nsys_small_pq"
    target = scratch / f"pq-{shard}"
    shutil.copytree(src, target)
    originals = {p.name: p.read_bytes() for p in sorted(target.glob("*.parquet"))}

    @seed(shard)
    @settings(FUZZ, max_examples=round(cases * SCALE))
    @given(st.sampled_from(sorted(originals)), mutations(64 * 1024))
    def run(name: str, edits: list[tuple[str, int, int]]) -> None:
        victim = target / name
        victim.write_bytes(mutate(originals[name], edits))
        try:
            check_typed(target)
        finally:  # one damaged file per case: put it back (cheaper than copying the dir)
            victim.write_bytes(originals[name])

    run()
