"""Every public function raises our typed errors with the fix, never a bare ``ValueError``,
``TypeError``, ``FileNotFoundError`` or ``RecursionError`` from inside (issue 35, item 10; the
smaller items of 11 that live outside the session). Real fixtures from tests/data and the
notebooks' saved runs."""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import nsight_magic
from nsight_magic.errors import (
    BadArgumentError,
    DamagedFolderWarning,
    NsightMagicError,
    ReportNotFoundError,
    RunFolderError,
)
from nsight_magic.profilers.env import allowed_from_folder
from nsight_magic.run_folders import runs

DATA = Path(__file__).resolve().parent / "data"
RUNS = Path(__file__).resolve().parent.parent / "notebooks" / "runs"


def _saved(study: str, name: str) -> Path:
    found = sorted((RUNS / study).glob(f"*-{name}"))
    if not found:
        pytest.skip(f"no saved {study}/{name} run")
    return found[-1]


@pytest.fixture(scope="module")
def nsys_run() -> object:
    return nsight_magic.load_run(_saved("03_compare", "after"))


@pytest.fixture(scope="module")
def ncu_run() -> object:
    (child,) = (_saved("02_llm_drilldown", "prefill") / "ncu").iterdir()
    return nsight_magic.load_run(child)


def test_load_runs_glob_empty_and_twice(tmp_path: Path) -> None:
    with pytest.raises(ReportNotFoundError, match="no report matches"):
        nsight_magic.load_runs(str(tmp_path / "nomatch*"))
    with pytest.raises(BadArgumentError, match="at least one report"):
        nsight_magic.load_runs([])
    rank0 = DATA / "nsys_2rank_r0.sqlite"
    with pytest.raises(BadArgumentError, match="again; pass each rank's report once"):
        nsight_magic.load_runs([rank0, str(rank0)])
    with pytest.raises(BadArgumentError, match="NUL"):
        nsight_magic.load_runs(["a\x00b"])
    with pytest.raises(BadArgumentError, match="not int"):
        nsight_magic.load_runs(5)
    # the two real ranks still merge
    merged = nsight_magic.load_runs([rank0, DATA / "nsys_2rank_r1.sqlite"])
    assert sorted(merged.report.ranks()["rank"].dropna().unique().tolist()) == [0, 1]


@pytest.mark.parametrize("bad", [None, 5, b"report.sqlite", ["a.sqlite"]])
def test_open_report_and_load_run_of_no_path(bad: object) -> None:
    with pytest.raises(BadArgumentError, match="not"):
        nsight_magic.open_report(bad)  # type: ignore[arg-type]
    with pytest.raises(BadArgumentError, match="not"):
        nsight_magic.load_run(bad)  # type: ignore[arg-type]


def test_nul_and_unknown_user_in_paths(tmp_path: Path) -> None:
    with pytest.raises(ReportNotFoundError, match="NUL"):
        nsight_magic.open_report("a\x00b.sqlite")
    with pytest.raises(RunFolderError, match="NUL"):
        nsight_magic.load_run(f"{tmp_path}/a\x00b")
    with pytest.raises(RunFolderError, match="NUL"):
        runs.new_run_dir(f"{tmp_path}/a\x00b", "cell")
    with pytest.raises(RunFolderError, match="no user 'nosuchuser_nm35'"):
        runs.new_run_dir("~nosuchuser_nm35/x", "cell")
    assert not Path("~nosuchuser_nm35").exists()  # no literal folder made


def test_compare_takes_two_nsys_runs(nsys_run: object, ncu_run: object) -> None:
    for a, b in ((nsys_run, ncu_run), (ncu_run, nsys_run)):
        with pytest.raises(BadArgumentError, match="compares two nsys runs"):
            nsight_magic.compare(a, b)
    with pytest.raises(BadArgumentError, match="not int"):
        nsight_magic.compare(nsys_run, 5)
    assert isinstance(nsight_magic.compare(nsys_run, nsys_run).kernels, pd.DataFrame)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((5,), {}, "pass its full name"),
        (("",), {}, "pass its full name"),
        (("k\x00",), {}, "pass its full name"),
        (("k",), {"instance": "0"}, "whole number"),
        (("k",), {"count": 1.5}, "whole number"),
        (("k",), {"timeout": -1}, "seconds > 0"),
        (("k",), {"timeout": float("nan")}, "seconds > 0"),
        (("k",), {"instance": -1}, ">= 0"),
    ],
)
def test_profile_kernel_arguments_are_typed(
    nsys_run: object, args: tuple, kwargs: dict, match: str
) -> None:
    with pytest.raises(BadArgumentError, match=match):
        nsys_run.profile_kernel(*args, **kwargs)  # type: ignore[attr-defined]


def test_bad_argument_is_still_a_value_and_type_error() -> None:
    """Code that caught ValueError or TypeError before still does."""
    assert issubclass(BadArgumentError, ValueError) and issubclass(BadArgumentError, TypeError)
    assert issubclass(BadArgumentError, NsightMagicError)


def _copied_run(tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(_saved("03_compare", "after"), dst)
    return dst


def test_deeply_nested_or_truncated_meta_warns_and_loads(tmp_path: Path) -> None:
    run = _copied_run(tmp_path)
    expected = nsight_magic.load_run(run).kernel_summary()
    text = (run / "meta.json").read_text()
    for damage, why in (("[" * 100_000 + "]" * 100_000, "nested too deep"),
                        (text[: len(text) // 2], "not valid JSON")):  # fmt: skip
        (run / "meta.json").write_text(damage)
        with pytest.warns(DamagedFolderWarning, match=why):
            loaded = nsight_magic.load_run(run)
        pd.testing.assert_frame_equal(loaded.kernel_summary(), expected)
    (run / "meta.json").write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedFolderWarning)
        nsight_magic.load_run(run)  # a whole file: no warning


def test_folder_env_allow_list_refuses_redirects_and_endpoints() -> None:
    """Item 11: a saved folder's env.json may not redirect output (TORCH_LOGS_OUT), choose a
    rendezvous (NCCL_COMM_ID) or a network plugin (NCCL_NET)."""
    asked = {"TORCH_LOGS_OUT": "/tmp/x", "NCCL_COMM_ID": "evil:1234", "NCCL_NET": "Socket",
             "NCCL_NET_PLUGIN": "x", "TORCH_EXTENSIONS_DIR": "/tmp/e", "NCCL_DEBUG": "INFO",
             "TORCH_SHOW_CPP_STACKTRACES": "1", "NCCL_DEBUG_FILE": "/tmp/l"}  # fmt: skip
    kept, refused = allowed_from_folder(asked)
    assert set(kept) == {"NCCL_DEBUG", "TORCH_SHOW_CPP_STACKTRACES"}
    assert {"TORCH_LOGS_OUT", "NCCL_COMM_ID", "NCCL_NET"} <= set(refused)


def test_meta_json_fifo_in_a_child_does_not_block_share(tmp_path: Path) -> None:
    """share() reads a picker child's meta.json only when it is a regular file."""
    import os

    src = tmp_path / "run"
    shutil.copytree(_saved("02_llm_drilldown", "prefill"), src)
    (child,) = (src / "ncu").iterdir()
    (child / "meta.json").unlink()
    os.mkfifo(child / "meta.json")
    out = nsight_magic.share(src, tmp_path / "shared")
    manifest = json.loads((out / "share.json").read_text())
    assert f"ncu/{child.name}" in manifest["left_out"]


# --- every public function, every kind of bad argument --------------------------------------
BAD_VALUES = [None, -1, 0, "x", "", float("nan"), float("inf"), 10**30, [], {}, b"x",
              "a\x00b", True]  # fmt: skip


class _OneItem(Mapping[Any, Any]):
    """``{key: value}`` for any key, a list too (a dict would refuse it before the call)."""

    def __init__(self, key: Any, value: Any) -> None:
        self.key, self.value = key, value

    def __getitem__(self, key: Any) -> Any:
        return self.value

    def __iter__(self) -> Iterator[Any]:
        return iter([self.key])

    def __len__(self) -> int:
        return 1


def _public_calls(run: Any, ncu: Any, tmp_path: Path, sw: Any = None) -> dict[str, Any]:
    """One argument of each public function (and NsysRun method) that takes one from the user,
    as a function of the bad value to put there; the others are valid."""
    h100 = "NVIDIA H100 80GB HBM3"
    return {
        "examples.llm": lambda a: nsight_magic.examples.llm(a),
        "examples.attention": lambda a: nsight_magic.examples.attention(a),
        "transformer_flops n_params": lambda a: nsight_magic.transformer_flops(a, 10),
        "transformer_flops tokens": lambda a: nsight_magic.transformer_flops(1e9, a),
        "transformer_flops n_layers": lambda a: nsight_magic.transformer_flops(
            1e9, 10, n_layers=a, seq_len=4, d_model=8
        ),
        "set_peak gpu_name": lambda a: nsight_magic.set_peak(a, "bf16", 1e15),
        "set_peak dtype": lambda a: nsight_magic.set_peak(h100, a, 1e15),
        "set_peak flops": lambda a: nsight_magic.set_peak(h100, "bf16", a),
        "lookup_peak gpu_name": lambda a: nsight_magic.lookup_peak(a, "bf16"),
        "lookup_peak dtype": lambda a: nsight_magic.lookup_peak(h100, a),
        "model_mfu": lambda a: nsight_magic.model_mfu(a),
        "op_mfu": lambda a: nsight_magic.op_mfu(a),
        "kernel_utilisation": lambda a: nsight_magic.kernel_utilisation(a),
        "range_utilisation": lambda a: nsight_magic.range_utilisation(a, a),
        "open_report": lambda a: nsight_magic.open_report(a),
        "load_run": lambda a: nsight_magic.load_run(a),
        "load_runs": lambda a: nsight_magic.load_runs(a),
        "list_runs root": lambda a: nsight_magic.list_runs(a),
        "list_runs children": lambda a: nsight_magic.list_runs(tmp_path, children=a),
        "compare": lambda a: nsight_magic.compare(run, a),
        "share run_dir": lambda a: nsight_magic.share(a, tmp_path / "s1"),
        "share dest": lambda a: nsight_magic.share(run.run_dir, a),
        "share redact": lambda a: nsight_magic.share(run.run_dir, tmp_path / "s2", redact=a),
        "run.gaps": lambda a: run.gaps(a),
        "run.idle_causes": lambda a: run.idle_causes(a),
        "run.launch_bound": lambda a: run.launch_bound(a),
        "run.timeline window": lambda a: run.timeline(a),
        "run.timeline max_rows": lambda a: run.timeline(None, a),
        "run.resolve_nvtx_range": lambda a: run.resolve_nvtx_range(a),
        "run.kernels_in_range": lambda a: run.kernels_in_range(a, a),
        "run.op_mfu dtype": lambda a: run.op_mfu(dtype=a),
        "run.op_mfu peak_flops": lambda a: run.op_mfu(peak_flops=a),
        "run.mfu flops": lambda a: run.mfu(a),
        "run.mfu dtype": lambda a: run.mfu(dtype=a),
        "run.profile_kernel": lambda a: run.profile_kernel(a),
        "run.profile_range": lambda a: run.profile_range(a, a),
        "ncu.sections": lambda a: ncu.sections(a),
        "ncu.mfu flops": lambda a: ncu.mfu(a),
        "ncu.mfu dtype": lambda a: ncu.mfu(dtype=a),
        "ncu.mfu peak_flops": lambda a: ncu.mfu(peak_flops=a),
        "ncu.hfu dtype": lambda a: ncu.hfu(dtype=a),
        "ncu.range_mfu flops": lambda a: ncu.range_mfu(a),
        "ncu.range_mfu time_ns": lambda a: ncu.range_mfu(time_ns=a),
        "ncu.range_mfu dtype": lambda a: ncu.range_mfu(dtype=a),
        "ncu.range_mfu peak_flops": lambda a: ncu.range_mfu(peak_flops=a),
        # issue 57: the sweep, the sweep's methods, the rest of the public names
        "training_step_flops n_params": lambda a: nsight_magic.training_step_flops(a, 10),
        "training_step_flops tokens": lambda a: nsight_magic.training_step_flops(1e9, a),
        "run.profile_top": lambda a: run.profile_top(a),
        "run.profile_top set": lambda a: run.profile_top(2, set=a),
        "sweep cell": lambda a: nsight_magic.sweep(a, {"bs": [1]}),
        "sweep values": lambda a: nsight_magic.sweep("y = bs", a),
        "sweep a value list": lambda a: nsight_magic.sweep("y = bs", {"bs": a}),
        "sweep a name": lambda a: nsight_magic.sweep("y = 1", _OneItem(a, [1])),
        "sweep name": lambda a: nsight_magic.sweep("y = bs", {"bs": [1]}, name=a),
        "sweep warmup": lambda a: nsight_magic.sweep("y = bs", {"bs": [1]}, warmup=a),
        "sweep repeat": lambda a: nsight_magic.sweep("y = bs", {"bs": [1]}, repeat=a),
        "sweep timeout": lambda a: nsight_magic.sweep("y = bs", {"bs": [1]}, timeout=a),
        "sweep fresh": lambda a: nsight_magic.sweep("y = bs", {"bs": [1]}, fresh=a),
        "sweep cancel": lambda a: nsight_magic.sweep("y = bs", {"bs": [1]}, cancel=a),
        "sw.run": lambda a: sw.run(a),
        "sw.run by name": lambda a: sw.run(impl=a),
        "sw.key": lambda a: sw.key(a),
        "sw.compare": lambda a: sw.compare(a, "naive"),
        "sw.mfu flops": lambda a: sw.mfu(a),
        "sw.mfu dtype": lambda a: sw.mfu(dtype=a),
        "sw.mfu peak_flops": lambda a: sw.mfu(peak_flops=a),
        "sw.time_chart": lambda a: sw.time_chart(a),
        "sw.mfu_chart variable": lambda a: sw.mfu_chart(variable=a),
        "sw.profile_top": lambda a: sw.profile_top(a),
        "sw.share": lambda a: sw.share(a),
    }


def test_every_public_argument_fails_typed(
    nsys_run: Any, ncu_run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every argument x 13 bad values: each call works or raises one of our typed errors (none
    needs a GPU: a re-profile stops at its first check; the sweep's session is replaced by one
    that records the call). Run in tmp_path: share(run, "x") writes ./x; set_peak's overrides
    are this test's own. tests/README.md lists the bad-input classes per function."""
    from test_sweep_run import write_sweep

    from nsight_magic.analysis import gpu_peaks
    from nsight_magic.session import manager as manager_module

    sw = nsight_magic.load_run(write_sweep(tmp_path / "sweeps"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gpu_peaks, "_USER", {})
    monkeypatch.setattr(manager_module.MANAGER, "sweep", lambda *a, **k: None)
    untyped = []
    tried = typed = 0
    calls = _public_calls(nsys_run, ncu_run, tmp_path, sw)
    for name, call in calls.items():
        for value in BAD_VALUES:
            tried += 1
            for leftover in ("s1", "s2", "x"):
                shutil.rmtree(tmp_path / leftover, ignore_errors=True)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    call(value)
            except NsightMagicError:
                typed += 1
            except Exception as exc:  # the defect this test is about
                untyped.append(f"{name}({value!r}): {type(exc).__name__}: {exc}")
    assert untyped == [], "\n".join(untyped)
    assert len(calls) == 70 and tried == 70 * 13 and typed > 600
