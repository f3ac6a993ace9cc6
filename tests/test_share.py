"""``nsight_magic.share``: a copy of a real run folder (the ones notebooks 02 and 04 wrote on
the lent H200s) that names no user, host or absolute path, keeps what reproducing it needs, and
still reloads offline with the same numbers."""

from __future__ import annotations

import getpass
import json
import re
import shutil
import socket
from pathlib import Path

import pandas as pd
import pytest

import nsight_magic
from nsight_magic.errors import ReportNotFoundError
from nsight_magic.run_folders.sharing import MANIFEST, _find

RUNS = Path(__file__).resolve().parent.parent / "notebooks" / "runs"
# what those captures recorded about the machine (cwd, interpreter env, HOME); the container's
# host name, which changes with every lent machine, is what ``_find`` reads from the report
RECORDED = (b"/work/main", b"/opt/torch/.venv", b"HOME=/root")


def _saved(study: str, name: str) -> Path:
    found = sorted((RUNS / study).glob(f"*-{name}"))
    if not found:
        pytest.skip(f"no saved {study}/{name} run")
    return found[-1]


def _all_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def prefill(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    src = _saved("02_llm_drilldown", "prefill")
    return src, nsight_magic.share(src, tmp_path_factory.mktemp("share") / "prefill")


def test_copy_names_no_user_host_or_absolute_path(prefill: tuple[Path, Path]) -> None:
    src, out = prefill
    original = b"".join(_all_bytes(src).values())
    assert all(secret in original for secret in RECORDED)  # the leak this fixes is real
    found = _find(src, ())
    assert {label for _, label in found.words} == {"<host>"}  # "vm" and the container name
    assert all(word.encode() in original for word, _ in found.words)
    manifest = json.loads((out / MANIFEST).read_text())
    for name, data in _all_bytes(out).items():
        for secret in RECORDED:
            assert secret not in data, (name, secret)
        for path, _ in found.paths:
            assert path.encode() not in data, (name, path)
        for word, _ in found.words:  # a name as a word ("vm" is also inside "uvm")
            hit = re.search(
                rb"(?<![A-Za-z0-9_-])" + re.escape(word.encode()) + rb"(?![A-Za-z0-9_-])", data
            )
            if hit and name.endswith(".ncu-rep") and len(word) < 4:
                assert manifest["binary_reports_keep"] == ["<host>"]  # said, not hidden
                continue
            assert hit is None, (name, word)
    assert manifest["left_out"] == ["report.nsys-rep"]  # compressed: cannot be rewritten


def test_copy_keeps_what_reproducing_needs(prefill: tuple[Path, Path]) -> None:
    src, out = prefill
    meta, shared = (json.loads((d / "meta.json").read_text()) for d in (src, out))
    assert (out / "cell.py").read_text() == (src / "cell.py").read_text()
    for key in ("versions", "timings", "cell_status", "options", "warmup", "name"):
        if key == "versions":  # tool versions kept; paths in it may be rewritten
            assert {k: v for k, v in shared[key].items() if "path" not in k} == {
                k: v for k, v in meta[key].items() if "path" not in k
            }
        else:
            assert shared[key] == meta[key], key
    gpu = shared["gpus"][0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["driver_version"] == "580.159.04"
    assert gpu["clocks.max.sm"] == "1980 MHz" and "uuid" not in gpu
    assert shared["cwd"] is None and shared["python"] == "python3"
    # paths relative to the copy: the report and script the argv names are in it
    # (a warm run: the per-cell `nsys start`; the worker's launch names the interpreter)
    argv = shared["capture_argv"]
    assert "./report" in argv
    assert all(not a.startswith(("/work", "runs/")) for a in argv)
    launch = shared["worker"]["launch_argv"]
    assert not any(a.startswith(("/opt/torch", "/work")) for a in launch), launch
    # the script keeps the setup cells and the cell verbatim
    assert "VOCAB, D, LAYERS, HEADS = 8192, 1024, 8, 16" in (out / "script.py").read_text()


def test_copy_reloads_with_the_same_numbers(prefill: tuple[Path, Path]) -> None:
    src, out = prefill
    before, after = nsight_magic.load_run(src), nsight_magic.load_run(out)
    pd.testing.assert_frame_equal(before.kernel_summary(), after.kernel_summary())
    pd.testing.assert_frame_equal(before.nvtx_gpu_projection(), after.nvtx_gpu_projection())
    assert after.gpu_info()["name"] == "NVIDIA H100 80GB HBM3"
    # the picker's ncu child: its .ncu-rep rewritten string for string, still read by ncu_report
    (child_src,) = (src / "ncu").iterdir()
    child = nsight_magic.load_run(out / "ncu" / child_src.name)
    pd.testing.assert_frame_equal(nsight_magic.load_run(child_src).roofline(), child.roofline())
    assert json.loads((child.run_dir / "meta.json").read_text())["parent_run"] == "../.."


def test_multi_rank_parquet_run_is_shared(tmp_path: Path) -> None:
    src = _saved("04_multi_gpu", "tp_step")
    out = nsight_magic.share(src, tmp_path / "tp")
    for name, data in _all_bytes(out).items():
        for secret in RECORDED[:3]:
            assert secret not in data, (name, secret)
    run = nsight_magic.load_run(out)
    skew = run.report.rank_skew().sort_values("instance")
    assert skew.iloc[2]["last_rank"] == 1  # notebook 04's finding survives


def test_this_machines_names_and_extra_strings(tmp_path: Path) -> None:
    """A run recorded here: this machine's home, user and host, and a string the user names."""
    src = tmp_path / "run"
    shutil.copytree(_saved("03_compare", "after"), src)
    meta = json.loads((src / "meta.json").read_text())
    meta.update(cwd=str(Path.home() / "projects" / "secret-model"), note="by the-team-x")
    (src / "meta.json").write_text(json.dumps(meta))
    (src / "env.json").write_text(
        json.dumps({"USER": getpass.getuser(), "WHERE": f"{socket.gethostname()}:/x"})
    )
    out = nsight_magic.share(src, tmp_path / "shared", redact=["the-team-x"])
    text = (out / "meta.json").read_text() + (out / "env.json").read_text()
    assert str(Path.home()) not in text and "secret-model" not in (out / "meta.json").read_text()
    assert "the-team-x" not in text and "<redacted>" in text
    # --env values are not on the allow-list: dropped, and named in share.json
    assert json.loads((out / "env.json").read_text()) == {}
    assert {"USER", "WHERE"} <= set(
        json.loads((out / MANIFEST).read_text())["environment"]["dropped"]
    )
    assert (
        nsight_magic.load_run(out)
        .kernel_summary()
        .equals(nsight_magic.load_run(src).kernel_summary())
    )


def test_refuses_to_overwrite_and_non_run_folders(tmp_path: Path) -> None:
    with pytest.raises(ReportNotFoundError, match="not a run folder"):
        nsight_magic.share(tmp_path, tmp_path / "x")
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError):
        nsight_magic.share(_saved("03_compare", "after"), tmp_path / "taken")
