"""Fuzz the report loaders with mutated REAL fixtures: whatever the bytes, opening a report and
reading its frames either works or raises a ``ReportError`` subclass, never anything else.

Counts (issue: >= 10,000 mutated reports in all): sqlite 7,000, ncu 1,000, parquet 2,000. Each
example flips, zeroes, truncates or splices bytes of one real report. ``derandomize`` keeps CI
repeatable; set NSIGHT_MAGIC_FUZZ_SCALE=10 to run ten times more locally.

Measured on the 2-core dev machine (whole file 7.4 min): sqlite 7,000 in 154 s (~22 ms a case),
parquet 2,000 in ~136 s (~68 ms: mutate one file, load, restore it), ncu 1,000 in 130 s (~130 ms):
every ``.ncu-rep`` is read by ``ncu_report`` in a child process (``reports.ncu.extract``,
~0.2 s when the file loads; it is what turns ncu_report's C++ aborts on some mutations into a
CorruptReportError instead of killing pytest), so the ncu part is kept to ~2 min and the sqlite part
carries the rest of the 10,000."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsight_magic import open_report
from nsight_magic.errors import ReportError

SCALE = int(os.environ.get("NSIGHT_MAGIC_FUZZ_SCALE", "1"))
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


def read_everything(report: object) -> None:
    """Touch every frame a view would read, so lazy loading is fuzzed too."""
    names = (
        "kernels",
        "nvtx",
        "memcpy",
        "memset",
        "cuda_api",
        "kernel_summary",
        "nvtx_gpu_projection",
        "metrics",
        "sol",
    )
    for name in names:
        method = getattr(report, name, None)
        if method is not None:
            method()


def check_typed(path: Path) -> None:
    # The contract: it reads, or raises a typed ReportError; anything else fails the test.
    with contextlib.suppress(ReportError):
        read_everything(open_report(path))


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="fuzz-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_fuzz_nsys_sqlite(data_dir: Path, scratch: Path) -> None:
    original = (data_dir / "nsys_small.sqlite").read_bytes()
    target = scratch / "fuzz.sqlite"

    @settings(FUZZ, max_examples=7000 * SCALE)
    @given(mutations(len(original)))
    def run(edits: list[tuple[str, int, int]]) -> None:
        target.write_bytes(mutate(original, edits))
        check_typed(target)

    run()


def test_fuzz_ncu_rep(ncu_reports: dict[str, Path], scratch: Path) -> None:
    original = ncu_reports["ncu_gemm_metrics"].read_bytes()
    target = scratch / "fuzz.ncu-rep"

    @settings(FUZZ, max_examples=1000 * SCALE)
    @given(mutations(len(original)))
    def run(edits: list[tuple[str, int, int]]) -> None:
        target.write_bytes(mutate(original, edits))
        check_typed(target)

    run()


def test_fuzz_nsys_parquet(data_dir: Path, scratch: Path) -> None:
    src = data_dir / "nsys_small_pq"
    target = scratch / "pq"
    shutil.copytree(src, target)
    originals = {p.name: p.read_bytes() for p in sorted(target.glob("*.parquet"))}

    @settings(FUZZ, max_examples=2000 * SCALE)
    @given(st.sampled_from(sorted(originals)), mutations(64 * 1024))
    def run(name: str, edits: list[tuple[str, int, int]]) -> None:
        victim = target / name
        victim.write_bytes(mutate(originals[name], edits))
        try:
            check_typed(target)
        finally:  # one damaged file per case: put it back (cheaper than copying the dir)
            victim.write_bytes(originals[name])

    run()
