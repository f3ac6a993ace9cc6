"""``nsight-magic compare`` / ``summary`` (nsight_magic/cli.py) on the saved real runs of notebook
03 (naive fp32 attention, then fused bf16 SDPA): the exit codes a CI gates on (0 unchanged or
faster, 1 slower beyond noise and the threshold, 2 bad input), the three formats, a shared copy
of a run, and ``python -m nsight_magic`` as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import nsight_magic
from nsight_magic import cli

REPO = Path(__file__).resolve().parents[1]
SAVED = REPO / "notebooks" / "runs"
BEFORE, AFTER = sorted((SAVED / "03_compare").iterdir())[:2]  # naive, then SDPA


def run(*argv: str | Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_faster_passes_and_slower_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run("compare", BEFORE, AFTER, capsys=capsys)
    assert code == cli.OK
    assert out.startswith("before -> after: after: GPU time 0.03x (0.03-0.03)")
    assert "OK: the total GPU time: not slower beyond noise" in out
    code, out, _ = run("compare", AFTER, BEFORE, capsys=capsys)
    assert code == cli.REGRESSED
    assert "FAIL: slower beyond noise and by more than 0.0%: total GPU time 34.9" in out
    # a threshold above the change: slower beyond noise, but not by that much
    code, out, _ = run("compare", AFTER, BEFORE, "--fail-if-slower", "5000%", capsys=capsys)
    assert code == cli.OK


def test_the_same_run_twice_is_same(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run("compare", BEFORE, BEFORE, "--format", "json", capsys=capsys)
    assert code == cli.OK
    data = json.loads(out)
    assert data["change"] == "same" and data["regressed"] == []
    assert {k["change"] for k in data["kernels"]} == {"same"}
    assert data["ratio_lo"] < 1 < data["ratio_hi"]


def test_only_gates_on_the_named_rows(capsys: pytest.CaptureFixture[str]) -> None:
    # the cell range is 22.8x slower back from SDPA to naive; a kernel only the naive run has
    # is "new" there, which no gate counts as slower
    code, out, _ = run("compare", AFTER, BEFORE, "--only", "cell", capsys=capsys)
    assert code == cli.REGRESSED and "nsight_magic:cell 22.8" in out
    code, _, _ = run("compare", AFTER, BEFORE, "--only", "elementwise_kernel<128, 2>",
                     capsys=capsys)  # fmt: skip
    assert code == cli.OK


def test_only_takes_a_moved_statement_by_either_runs_own_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The loop is line 1 of the naive cell and line 2 of the SDPA one: ``summary`` shows it
    as ``L1: ...`` for one run and ``L2: ...`` for the other, and either name (bare or
    ``domain:``) gates on it, as the comparison's own ``L2->L1: ...`` label does; it was
    exit 2, 'no kernel or NVTX range of either run is named so'."""
    loop = "for _ in range(10): ..."
    _, after_summary, _ = run("summary", AFTER, capsys=capsys)
    assert f"L2: {loop}" in after_summary
    for name in (f"L2: {loop}", f"L1: {loop}", f"nsight_magic:L2: {loop}",
                 f"nsight_magic:L1: {loop}", f"nsight_magic:L2->L1: {loop}"):  # fmt: skip
        code, out, err = run("compare", AFTER, BEFORE, "--only", name, capsys=capsys)
        assert code == cli.REGRESSED, (name, err)
        assert f"more than 0.0%: nsight_magic:L2->L1: {loop} 33." in out
        code, _, err = run("compare", BEFORE, AFTER, "--only", name, capsys=capsys)
        assert code == (cli.BAD_INPUT if "->" in name else cli.OK), (name, err)
    code, _, err = run("compare", AFTER, BEFORE, "--only", f"L3: {loop}", capsys=capsys)
    assert code == cli.BAD_INPUT and "no kernel or NVTX range" in err


def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:  # fmt: skip
    code, _, err = run("compare", BEFORE, tmp_path / "nope", capsys=capsys)
    assert code == cli.BAD_INPUT and err.strip().endswith("nope: no such run folder or report")
    code, _, err = run("compare", BEFORE, AFTER, "--only", "nothing", capsys=capsys)
    assert code == cli.BAD_INPUT and "--only 'nothing'" in err
    (child,) = (SAVED / "02_llm_drilldown").glob("*/ncu/*")
    code, _, err = run("summary", child, capsys=capsys)
    assert code == cli.BAD_INPUT and "not an nsys run" in err
    code, _, err = run("compare", BEFORE, AFTER, "--top", "0", capsys=capsys)
    assert code == cli.BAD_INPUT
    with pytest.raises(SystemExit) as exited:
        cli.main(["compare", str(BEFORE), str(AFTER), "--fail-if-slower", "fast"])
    assert exited.value.code == cli.BAD_INPUT


def test_a_bare_threshold_above_1_is_refused_not_read_as_hundreds_of_percent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--fail-if-slower 5`` meant 500% silently (a kernel 4x slower passed the gate): now
    exit 2 saying to write 5% or 0.05; 1 (100%) and any number written with % still go."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["compare", str(AFTER), str(BEFORE), "--fail-if-slower", "5"])
    assert exited.value.code == cli.BAD_INPUT
    assert "write 5% or 0.05" in capsys.readouterr().err
    for given, share in (("5%", 0.05), ("0.05", 0.05), ("1", 1.0), ("500%", 5.0)):
        assert cli.parser().parse_args(["compare", "a", "b", "--fail-if-slower", given]
                                       ).fail_if_slower == pytest.approx(share)  # fmt: skip


def test_the_documented_usage_is_the_parsers() -> None:
    """docs/ci.md wrote ``[--only NAME ...]``, which reads as one --only taking several names;
    each name needs its own --only (argparse's append)."""
    doc = (REPO / "docs" / "ci.md").read_text()
    assert "[--only NAME ...]" not in doc and "[--only NAME]..." in doc
    args = cli.parser().parse_args(["compare", "a", "b", "--only", "x", "--only", "y"])
    assert args.only == ["x", "y"]
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["compare", "a", "b", "--only", "x", "y"])


def test_markdown_summary_and_a_shared_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:  # fmt: skip
    shared = nsight_magic.share(AFTER, tmp_path / "after_shared")
    code, out, _ = run("compare", BEFORE, shared, "--format", "markdown", capsys=capsys)
    assert code == cli.OK and out.startswith("## before -> ")
    assert "| short_name | change | ratio |" in out and "|---|" in out
    code, out, _ = run("summary", BEFORE, "--top", "3", capsys=capsys)
    assert code == cli.OK and "kernel names" in out and "sm80_xmma_gemm" in out


def test_python_dash_m_and_the_console_script() -> None:
    done = subprocess.run([sys.executable, "-m", "nsight_magic", "compare", str(AFTER),
                           str(BEFORE), "--format", "json"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == cli.REGRESSED, done.stderr
    assert json.loads(done.stdout)["change"] == "slower"
    # (read as text: tomllib is Python 3.11's, and the oldest tier runs 3.10)
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '[project.scripts]\nnsight-magic = "nsight_magic.cli:main"' in pyproject


PREFILL = next((SAVED / "02_llm_drilldown").glob("*-prefill"))


def _damaged(tmp_path: Path, how: str) -> Path:
    """The bundled prefill run, copied (its picker child left out) and damaged one way."""
    import shutil

    copy = tmp_path / how
    shutil.copytree(PREFILL, copy, ignore=shutil.ignore_patterns("ncu"))
    tables = copy / "report_pq"
    if how == "kernels_cut":
        kernels = tables / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
        kernels.write_bytes(kernels.read_bytes()[:100])
    elif how == "nvtx_empty":
        (tables / "NVTX_EVENTS.parquet").write_bytes(b"")
    else:
        (tables / "StringIds.parquet").unlink()
    return copy


@pytest.mark.parametrize("how", ["kernels_cut", "nvtx_empty", "strings_gone"])
def test_a_damaged_report_is_one_line_and_exit_2(
    how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A report damaged where the command reads its tables (not where it opens the folder)
    printed a traceback ending in CorruptReportError and exited 1, which a CI reads as
    'slower'. Now: one line, exit 2, and no half table on stdout."""
    bad = _damaged(tmp_path, how)
    for argv in (("summary", bad), ("compare", PREFILL, bad), ("compare", bad, PREFILL)):
        code, out, err = run(*argv, capsys=capsys)
        assert code == cli.BAD_INPUT, (argv, err)
        assert out == "" and len(err.strip().splitlines()) == 1
        assert err.startswith("nsight-magic: CorruptReportError: ") and str(bad) in err


def test_an_os_error_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run("summary", tmp_path / ("a" * 300), capsys=capsys)
    assert code == cli.BAD_INPUT and out == ""
    assert err.startswith("nsight-magic: OSError: ") and "too long" in err
    assert len(err.strip().splitlines()) == 1


def test_a_reader_that_stops_reading_ends_it_quietly() -> None:
    """``nsight-magic summary RUN | head -1``: the reader closed the pipe, so the write fails
    (EPIPE): no BrokenPipeError traceback, the command's own status."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)  # head has read its line and gone
    try:
        done = subprocess.run([sys.executable, "-m", "nsight_magic", "summary", str(PREFILL)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=300)  # fmt: skip
    finally:
        os.close(write_end)
    assert done.stderr == "" and done.returncode == cli.OK


def test_a_parquet_export_folder_is_a_report_to_the_command(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What open_report opens, the command opens: an ``x_pq/`` export folder was 'not a run
    folder' (exit 2)."""
    parquet = data_dir / "nsys_small_pq"
    code, out, err = run("summary", parquet, capsys=capsys)
    assert code == cli.OK, err
    assert out.startswith(f"{parquet}: 12 kernel names")
    code, out, err = run("compare", parquet, data_dir / "nsys_small.sqlite", capsys=capsys)
    assert code == cli.OK and "no kernel changed beyond noise" in out, err
