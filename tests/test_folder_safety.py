"""A saved run folder is data, never code: run folders are private (0700 / 0600), a re-profile
of a loaded run uses this session's interpreter and an allow-listed environment (what the
folder asked for is shown, not obeyed; ``trust=True`` opts in), nothing is replayed from a
folder another user owns or others can write, and ``load_run`` opens only files inside the
folder. Real fixture reports, copied into a tmp run folder."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nsight_magic.errors import (
    FolderSettingsIgnored,
    NsightMagicError,
    ReportError,
    RunFolderError,
    UntrustedFolderError,
)
from nsight_magic.processes.clean_env import is_injection_variable
from nsight_magic.processes.locate import Tool
from nsight_magic.results import load_run
from nsight_magic.run_folders import ownership as folders
from nsight_magic.run_folders import runs
from nsight_magic.run_folders.run_dir import RunDir, write_json, write_private
from nsight_magic.script import prepare_cell
from nsight_magic.session import manager as manager_module
from nsight_magic.session.backends import NcuBackend
from nsight_magic.session.history import History
from nsight_magic.session.manager import SessionManager

IS_ROOT = os.geteuid() == 0


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_runs_root_folders_and_files_are_private(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "nsight-runs"
    run = runs.new_run_dir(root, "cell")
    child = RunDir(run).new_child("kernel").path
    write_json(run / RunDir.META, {"a": 1})
    RunDir(run).write_vars(b"blob")
    assert _mode(root) == 0o700 and _mode(run) == 0o700
    assert _mode(child) == 0o700 and _mode(run / "ncu") == 0o700
    assert _mode(run / RunDir.META) == 0o600 and _mode(run / "vars.pkl") == 0o600


def test_runs_root_writable_by_others_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(UntrustedFolderError, match=str(root)):
        runs.new_run_dir(root, "cell")
    assert list(root.iterdir()) == []


def test_runs_root_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(folders.os, "geteuid", lambda: os.getuid() + 1)
    with pytest.raises(UntrustedFolderError, match="another user"):
        runs.new_run_dir(tmp_path, "cell")


def test_bad_runs_root_is_one_typed_line(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(RunFolderError, match="is a file"):
        runs.new_run_dir(a_file, "cell")
    with pytest.raises(RunFolderError, match="file where a folder should be"):
        runs.new_run_dir(a_file / "sub", "cell")
    if not IS_ROOT:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(RunFolderError, match="cannot create"):
            runs.new_run_dir(ro, "cell")
        with pytest.raises(RunFolderError, match="cannot be created"):
            runs.new_run_dir(ro / "sub", "cell")


def test_full_disk_is_one_typed_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(folders.os, "replace", full)  # the disk fills as the file is written
    with pytest.raises(RunFolderError, match="No space left"):
        write_json(tmp_path / "meta.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []  # no half-written temp file left behind


def test_tilde_in_runs_dir_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    run = runs.new_run_dir("~/runs", "cell")
    assert run.parent == tmp_path / "runs" and not (tmp_path / "~").exists()


# --- re-profiling a loaded run ---------------------------------------------------------------
EVIL_ENV = {"LD_PRELOAD": "/tmp/evil.so", "CUDA_INJECTION64_PATH": "/tmp/inject.so",
            "PYTHONPATH": "/tmp/evil", "CUDA_VISIBLE_DEVICES": "1"}  # fmt: skip


def _saved_run(tmp_path: Path, nsys_small_sqlite: Path, **meta: Any) -> Path:
    run = runs.new_run_dir(tmp_path / "runs", "saved")
    shutil.copy(nsys_small_sqlite, run / "report.sqlite")
    write_private(run / "cell.py", "x = 1\n")
    write_private(run / "script.py", "print('saved script')\n")
    write_json(run / "env.json", EVIL_ENV)
    write_json(run / RunDir.META, {"tool": "nsys", "name": "saved", "python": "/tmp/evil-py",
                                      "cwd": str(tmp_path), **meta})  # fmt: skip
    return run


class _Captured(Exception):
    pass


@pytest.fixture
def capturing_manager(monkeypatch: pytest.MonkeyPatch) -> tuple[SessionManager, list[Any]]:
    """A session manager whose ``profile`` records the request it is handed (there is no ncu
    here; what is tested is what a saved folder puts into that request)."""
    seen: list[Any] = []
    manager = SessionManager()

    def profile(request: Any, backend: Any, **kwargs: Any) -> Any:
        seen.append((request, kwargs))
        raise _Captured

    monkeypatch.setattr(manager, "profile", profile)
    monkeypatch.setattr(NcuBackend, "locate", lambda self: Tool(name="ncu", path="ncu"))
    return manager, seen


def _kernel(run: Any) -> str:
    return str(run.kernels()["name"].iloc[0])


def test_saved_interpreter_and_injection_env_are_shown_not_obeyed(
    tmp_path: Path, nsys_small_sqlite: Path, capturing_manager: Any
) -> None:
    manager, seen = capturing_manager
    run = load_run(_saved_run(tmp_path, nsys_small_sqlite), drill_runner=manager.drills)
    with (
        pytest.warns(FolderSettingsIgnored, match="LD_PRELOAD") as warned,
        pytest.raises(_Captured),
    ):
        run.profile_kernel(_kernel(run))
    request, kwargs = seen[0]
    assert request.python == sys.executable and request.cwd == os.getcwd()
    assert dict(request.env) == {"CUDA_VISIBLE_DEVICES": "1"}
    # pytest.warns records every warning: a ResourceWarning of another test's garbage, collected
    # meanwhile, can come first
    (text,) = [str(w.message) for w in warned if issubclass(w.category, FolderSettingsIgnored)]
    assert "/tmp/evil-py" in text and "CUDA_INJECTION64_PATH" in text and "trust=True" in text
    assert kwargs["rerun"].meta["ignored_from_folder"]["python"] == "/tmp/evil-py"


def test_trust_true_uses_the_folder_settings(
    tmp_path: Path, nsys_small_sqlite: Path, capturing_manager: Any
) -> None:
    manager, seen = capturing_manager
    run = load_run(_saved_run(tmp_path, nsys_small_sqlite), drill_runner=manager.drills, trust=True)
    with pytest.raises(_Captured):
        run.profile_kernel(_kernel(run))
    request = seen[0][0]
    assert request.python == "/tmp/evil-py" and dict(request.env) == EVIL_ENV


@pytest.mark.parametrize("how", ["group-writable", "other-owner", "script-writable"])
def test_nothing_is_replayed_from_a_folder_others_control(
    tmp_path: Path, nsys_small_sqlite: Path, capturing_manager: Any,
    monkeypatch: pytest.MonkeyPatch, how: str,
) -> None:  # fmt: skip
    manager, seen = capturing_manager
    folder = _saved_run(tmp_path, nsys_small_sqlite)
    run = load_run(folder, drill_runner=manager.drills)
    named = folder
    if how == "group-writable":
        folder.chmod(0o770)
    elif how == "script-writable":
        (folder / "script.py").chmod(0o666)
        named = folder / "script.py"
    else:
        monkeypatch.setattr(folders.os, "geteuid", lambda: os.getuid() + 1)
    with pytest.raises(UntrustedFolderError, match=str(named)):
        run.profile_kernel(_kernel(run))
    assert seen == []
    assert not (folder / "ncu").exists()


def test_history_replay_refuses_a_vars_file_others_can_write(tmp_path: Path) -> None:
    run = runs.new_run_dir(tmp_path, "cell")
    vars_file = RunDir(run).write_vars(b"not replayed")
    entry = History().add("cell", "c", prepare_cell("y = x"), vars_file=vars_file, run_dir=run)
    assert entry.payload()["vars_file"] == str(vars_file)  # ours, 0600: replayed
    vars_file.chmod(0o666)
    with pytest.raises(UntrustedFolderError, match=r"vars\.pkl"):
        entry.payload()


@pytest.mark.parametrize("report", ["/etc/passwd", "../other/report.sqlite", "sub/../../x.sqlite"])
def test_load_run_stays_inside_the_folder(
    tmp_path: Path, nsys_small_sqlite: Path, report: str
) -> None:
    folder = _saved_run(tmp_path, nsys_small_sqlite, report=report)
    with pytest.raises(ReportError, match="outside the run folder"):
        load_run(folder)


def test_load_run_refuses_a_link_out_of_the_folder(tmp_path: Path, nsys_small_sqlite: Path) -> None:
    folder = _saved_run(tmp_path, nsys_small_sqlite, report="linked.sqlite")
    (folder / "linked.sqlite").symlink_to(nsys_small_sqlite)
    with pytest.raises(ReportError, match="outside the run folder"):
        load_run(folder)


@pytest.mark.parametrize(
    "meta",
    [[1, 2], "text", {"tool": 5}, {"name": ["x"]}, {"nproc": "two"}, {"nproc": 0},
     {"report": 7}],
)  # fmt: skip
def test_malformed_meta_is_one_typed_line(
    tmp_path: Path, nsys_small_sqlite: Path, meta: Any
) -> None:
    folder = _saved_run(tmp_path, nsys_small_sqlite)
    (folder / RunDir.META).write_text(json.dumps(meta))
    with pytest.raises(ReportError, match=r"meta\.json"):
        load_run(folder)


# issue 35 item 11: a warm-up count the magic refuses is refused from a folder too
@pytest.mark.parametrize(
    "meta", [{"warmup": "x"}, {"warmup": -1}, {"warmup": 99999999999999999999}, {"nproc": 1.5}]
)
def test_malformed_meta_in_a_re_profile_is_one_typed_line(
    tmp_path: Path, nsys_small_sqlite: Path, capturing_manager: Any, meta: dict[str, Any]
) -> None:
    manager, _ = capturing_manager
    folder = _saved_run(tmp_path, nsys_small_sqlite)
    run = load_run(folder, drill_runner=manager.drills)
    write_json(folder / RunDir.META, {"tool": "nsys", **meta})
    with pytest.raises(RunFolderError, match=r"meta\.json"):
        run.profile_kernel(_kernel(run))


def test_manager_module_keeps_one_manager() -> None:
    assert isinstance(manager_module.MANAGER, SessionManager)


def test_list_runs_survives_malformed_meta(tmp_path: Path) -> None:
    for meta in ([1], {"timings": "x", "children": 5}, {"name": "ok", "timings": {"total_s": 1.5}}):
        run = runs.new_run_dir(tmp_path, "r")
        (run / RunDir.META).write_text(json.dumps(meta))
    listed = runs.list_runs(tmp_path)
    assert len(listed) == 3 and listed["wall_s"].dropna().tolist() == [1.5]


# --- fuzzed meta.json / env.json ----------------------------------------------------------------
_JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=8),
    st.sampled_from(["nsys", "ncu", "report.sqlite", "/etc/passwd", "../x", sys.executable]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip
_META_KEYS = ["tool", "name", "status", "nproc", "report", "python", "cwd", "warmup", "timings"]


@pytest.fixture(scope="module")
def fuzz_folder(tmp_path_factory: pytest.TempPathFactory, nsys_small_sqlite: Path) -> Path:
    return _saved_run(tmp_path_factory.mktemp("fuzzmeta"), nsys_small_sqlite)


@settings(derandomize=True, deadline=None, database=None, max_examples=150,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(
    meta=st.one_of(st.dictionaries(st.sampled_from(_META_KEYS), _JSON_VALUES, max_size=6),
                   _JSON_VALUES),
    env=st.one_of(st.dictionaries(st.sampled_from(["LD_PRELOAD", "CUDA_VISIBLE_DEVICES", "X"]),
                                  _JSON_VALUES, max_size=3), _JSON_VALUES),
)  # fmt: skip
@example(meta={"tool": "nsys", "python": "/x/py", "nproc": 1}, env={"LD_PRELOAD": "/x.so"})
def test_fuzzed_meta_and_env_are_typed(fuzz_folder: Path, capturing_manager: Any, meta: Any,
                                       env: Any) -> None:  # fmt: skip
    """Whatever meta.json and env.json hold: load_run gives a run or a ReportError, and a
    re-profile reaches the profiler with this session's interpreter and no injection variable,
    or stops with a typed error."""
    manager, seen = capturing_manager
    seen.clear()
    (fuzz_folder / RunDir.META).write_text(json.dumps(meta))
    (fuzz_folder / "env.json").write_text(json.dumps(env))
    try:
        run = load_run(fuzz_folder, drill_runner=manager.drills)
    except ReportError:
        return
    if not hasattr(run, "profile_kernel"):
        return  # an ncu run (meta says tool "ncu" over an nsys export): nothing to re-profile
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FolderSettingsIgnored)
        try:
            run.profile_kernel("some_kernel")
        except _Captured:
            request = seen[0][0]
            assert request.python == sys.executable
            assert not [n for n in request.env if is_injection_variable(n)]
        except NsightMagicError:
            pass
