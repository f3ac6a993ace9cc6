"""The run folder has one owner: ``RunDir`` names its files and is the only code that writes
them; its meta.json is a typed, versioned ``RunMeta`` that still reads every older file."""

from __future__ import annotations

import ast
import json
import stat
from pathlib import Path

import pytest

import nsight_magic
from nsight_magic.run_folders.run_dir import RunDir, write_json
from nsight_magic.run_folders.run_meta import SCHEMA_VERSION, RunMeta
from nsight_magic.run_folders.sweep_record import SweepRecord

PACKAGE = Path(nsight_magic.__file__).parent
# the notebooks' saved runs: rewritten (as the current version) whenever a GPU session re-runs
# the notebooks (tools/gpu_session.sh notebooks)
SAVED_RUNS = PACKAGE.parent / "notebooks" / "runs"
# copies of their meta.json as nsight_magic 0.2 wrote them on the lent GPUs (version 1), kept
# so the version-1 reader stays tested after the notebooks are re-run (tests/data/README.md)
META_V1 = PACKAGE.parent / "tests" / "data" / "run_meta_v1"

# Every file name of a run folder (RunDir's constants), spelled nowhere else in the package.
FOLDER_NAMES = {
    RunDir.CELL, RunDir.SCRIPT, RunDir.VARS, RunDir.ARGV, RunDir.ENV, RunDir.META,
    RunDir.STATUS, RunDir.LOG, RunDir.RANK_PREFIX, RunDir.NSYS_REPORT, RunDir.NCU_REPORT,
    RunDir.SQLITE_EXPORT, RunDir.PARQUET_EXPORT, RunDir.SWEEP,
}  # fmt: skip

# What writes a file: open() in a writing mode, and these callees.
WRITERS = {"write_text", "write_bytes", "write_private", "write_json", "append_private",
           "json.dump", "pickle.dump", "os.open", "shutil.copy", "shutil.copy2",
           "shutil.copyfile", "shutil.copyfileobj", "pq.write_table"}  # fmt: skip

# The writes outside run_folders/run_dir.py, each with why it is not a write into a run folder's
# records.
ALLOWED = {
    # a repeat's files put back where the user's cell wrote them (a warm-up's torch.save):
    # the user's files, not a run folder's
    ("shared_state/files_kept.py", "open"),
    # a process's output streamed into the log its caller names (RunDir.log), 0600
    ("processes/runner.py", "append_private"),
    ("profilers/commands.py", "append_private"),
    # reading a run folder's file without following a link or blocking on a pipe: os.open
    # with O_RDONLY | O_NOFOLLOW | O_NONBLOCK, never a write (the share-safe copy writes every
    # file, the rewritten SQLite and parquet too, through RunDir.write_copy)
    ("run_folders/regular_files.py", "os.open"),
    # the share-safe copy's parquet tables, written into an in-memory buffer first
    ("run_folders/share_reports.py", "pq.write_table"),
    # a developer's command that writes docs/options.md's generated tables: no run folder
    ("magic/option_docs.py", "write_text"),
    # the packaged example reports, unpacked into a cache
    ("examples.py", "open"),
    ("examples.py", "shutil.copyfileobj"),
    # an export's stamp and an .ncu-rep's parquet cache, beside any report (in a run folder
    # or not)
    # (created 0600 with os.open, whatever the umask)
    ("reports/nsys/export.py", "os.open"),
    ("reports/ncu/extract.py", "os.open"),
    ("reports/ncu/extract.py", "pickle.dump"),
    # the generated script's runtime: the profiled process (nsight_magic may not be importable
    # there) writes its own status file, at the path its parent passes (RunDir.status),
    # created 0600 with os.open whatever the umask
    ("script/runtime.py", "open"),
    ("script/status_file.py", "os.open"),
    ("script/status_file.py", "json.dump"),
    # ... and, with %%nsys --memory, torch's allocator snapshot beside its script
    ("script/torch_memory.py", "open"),
    ("script/torch_memory.py", "pickle.dump"),
    # ... and, after a warm cell, what it sends back to the notebook (results.pkl: the path
    # RunDir.results names, sent in the request; shared_state/worker_side.py)
    ("script/shared_objects.py", "open"),
    ("script/shared_objects.py", "pickle.dump"),
    # the worker's side of the notebook's state: what a cell changed, written to the path
    # RunDir.results names (sent in the request), and a file a repeat (warm-up, re-run)
    # wrote put back as it was (the user's file, not a run folder's)
    ("shared_state/worker_side.py", "open"),
    # the watchdog opens /dev/null for its standard streams: no file of a run folder
    ("processes/child_watchdog.py", "os.open"),
    # the console command points its stdout at /dev/null when the reader closed the pipe
    # (`nsight-magic summary RUN | head -1`): no file of a run folder
    ("cli.py", "os.open"),
}


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(PACKAGE)), ast.parse(p.read_text()))
            for p in sorted(PACKAGE.rglob("*.py"))]  # fmt: skip


def _writes(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = ast.unparse(node.func)
        short = callee.rsplit(".", 1)[-1]
        if callee in ("open", "io.open"):
            mode = node.args[1] if len(node.args) > 1 else None
            mode = mode or next((k.value for k in node.keywords if k.arg == "mode"), None)
            text = mode.value if isinstance(mode, ast.Constant) else "r"
            if isinstance(text, str) and set(text) & set("wax+"):
                found.append((node.lineno, "open"))
        elif (
            callee in WRITERS
            or short in ("write_text", "write_bytes")
            or (short in WRITERS and short == callee)
        ):
            found.append((node.lineno, callee if callee in WRITERS else short))
    return found


def test_run_dir_is_the_only_writer() -> None:
    """No module but run_folders/run_dir.py writes a file, except the writes ALLOWED says why."""
    stray = [
        f"{name}:{line} {callee}"
        for name, tree in _modules()
        if name != "run_folders/run_dir.py"
        for line, callee in _writes(tree)
        if (name, callee) not in ALLOWED
    ]
    assert stray == [], "write through RunDir (nsight_magic/run_folders/run_dir.py) instead"
    # the scan sees writes at all: RunDir's own are found
    assert len(_writes(ast.parse((PACKAGE / "run_folders/run_dir.py").read_text()))) >= 10


def test_folder_file_names_are_spelled_only_in_run_dir() -> None:
    """A literal "script.py", "meta.json"... (or a path ending in one) outside docstrings."""
    spelled = []
    for name, tree in _modules():
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.body and isinstance(node.body[0], ast.Expr)
        }  # fmt: skip
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if id(node) not in docstrings and any(
                    text == n or text.endswith("/" + n) for n in FOLDER_NAMES
                ):
                    spelled.append(f"{name}:{node.lineno} {text!r}")
    assert all(s.startswith("run_folders/run_dir.py:") for s in spelled), spelled
    assert len(spelled) == len(FOLDER_NAMES)


def test_every_write_is_private(tmp_path: Path) -> None:
    folder = RunDir.create(tmp_path / "runs", "cell")
    folder.write_cell("x = 1\n")
    folder.write_script("print('script')\n")
    folder.write_vars(b"blob")
    folder.write_argv(["nsys", "profile"])
    folder.write_env({"A": "1"})
    folder.write_status({"status": "ok"})
    folder.write_rank_prefix(["ncu"])
    folder.write_meta(RunMeta(name="cell"))
    folder.append_log("a line")
    folder.append_log("process output\n")
    written = [p for p in folder.path.iterdir() if p.is_file() and not p.name.endswith(".lock")]
    assert {p.name for p in written} == FOLDER_NAMES - {
        RunDir.NSYS_REPORT,
        RunDir.NCU_REPORT,
        RunDir.SQLITE_EXPORT,
        RunDir.PARQUET_EXPORT,
        RunDir.SWEEP,  # a sweep folder's, below
    }
    assert {stat.S_IMODE(p.stat().st_mode) for p in written} == {0o600}
    assert folder.log.read_text() == "a line\nprocess output\n"
    assert folder.read_status() == {"status": "ok"} and folder.read_env() == {"A": "1"}
    child = folder.new_child("void k<4>(float*)")
    assert child.path.parent == folder.path / RunDir.CHILDREN
    child.write_meta(RunMeta(name="child"))
    assert folder.children() == [child]
    sweep = RunDir.create(tmp_path / "runs", "sweep")
    config = sweep.new_config(1, "bs=8 seq=2048")
    assert config.path.name == "01-bs_8_seq_2048"
    assert stat.S_IMODE(config.path.stat().st_mode) == 0o700
    sweep.write_sweep(SweepRecord(name="sweep", variables=["bs"]))
    assert stat.S_IMODE(sweep.sweep.stat().st_mode) == 0o600
    assert sweep.read_sweep() == SweepRecord(name="sweep", variables=["bs"])


def test_run_meta_round_trip() -> None:
    meta = RunMeta(
        name="cell", tool="nsys", mode="warm", status="ok", started_utc="2026-11-23T00:00:00",
        finished_utc="2026-11-23T00:00:09", cwd="/work", python="/usr/bin/python3", warmup=1,
        nproc=2, vars=["x"], versions={"nsys": "2025.3"}, gpus=[{"name": "H100"}],
        timings={"prepare_s": 0.02, "total_s": 9.25}, children=[{"run_dir": "ncu/a"}],
        options={"trace": ["cuda"]}, worker={"pid": 7}, first_run=False, replayed=["setup"],
        replay_skipped=["other"], shipped_vars=["x"], report="report.sqlite",
        cell_status={"status": "ok"}, capture_argv=["nsys", "start"], history_id=3,
        rank_status={"0": "ok", "1": None}, extra={"a_later_key": [1, 2]},
    )  # fmt: skip
    data = json.loads(json.dumps(meta.to_dict()))
    assert data["schema_version"] == SCHEMA_VERSION == 2 and data["a_later_key"] == [1, 2]
    back = RunMeta.from_dict(data)
    assert back == meta and back.to_dict() == data
    assert "error" not in data  # a field never set is not written


@pytest.mark.parametrize("saved", sorted(META_V1.glob("*.json")), ids=lambda p: p.stem[:40])
def test_version_1_meta_reads_and_is_written_back_whole(saved: Path) -> None:
    """meta.json of the notebooks' runs as nsight_magic 0.2 wrote them (no schema_version)
    read typed, and writing one back loses nothing."""
    raw = json.loads(saved.read_text())
    assert "schema_version" not in raw
    meta = RunMeta.from_dict(raw)
    assert meta.schema_version == 1 and meta.mistyped() == {}
    assert meta.tool in ("nsys", "ncu") and meta.status == "ok" and meta.name
    assert meta.timings and all(isinstance(s, float) for s in meta.timings.values())
    assert meta.to_dict() == {**raw, "schema_version": SCHEMA_VERSION}


@pytest.mark.parametrize(
    "saved", sorted(SAVED_RUNS.rglob("meta.json")), ids=lambda p: p.parent.name[-24:]
)
def test_saved_runs_meta_reads_whole_in_any_version(saved: Path) -> None:
    """The notebooks' saved runs, of whichever version wrote them last (0.2's version 1 until
    a GPU session re-runs the notebooks, then this one's), read typed and lose nothing."""
    raw = json.loads(saved.read_text())
    meta = RunMeta.from_dict(raw)
    assert meta.schema_version == raw.get("schema_version", 1) and meta.mistyped() == {}
    assert meta.tool in ("nsys", "ncu") and meta.status == "ok" and meta.name
    assert meta.timings and all(isinstance(s, float) for s in meta.timings.values())
    assert meta.to_dict() == {**raw, "schema_version": max(meta.schema_version, SCHEMA_VERSION)}


def test_unknown_and_mistyped_keys_are_kept(tmp_path: Path) -> None:
    folder = RunDir(tmp_path)
    old = {"name": "cell", "tool": "nsys", "nproc": "two", "warmup": True,
           "added_by_a_fork": {"k": 1}}  # fmt: skip
    write_json(folder.meta, old)
    meta = folder.read_meta()
    assert meta.nproc is None and meta.warmup is None  # never typed wrong
    assert meta.mistyped() == {"nproc": "two", "warmup": True}
    merged = folder.update_meta(status="ok")
    on_disk = json.loads(folder.meta.read_text())
    assert on_disk == {**old, "status": "ok", "schema_version": SCHEMA_VERSION,
                       "vars": [], "versions": {}, "gpus": [], "timings": {},
                       "children": []}  # fmt: skip
    assert merged.status == "ok" and merged.extra["added_by_a_fork"] == {"k": 1}
    # a well-typed value later replaces the kept one
    assert folder.update_meta(nproc=2).to_dict()["nproc"] == 2 and not folder.read_meta().extra.get(
        "nproc"
    )


def test_a_newer_schema_keeps_its_version(tmp_path: Path) -> None:
    folder = RunDir(tmp_path)
    write_json(folder.meta, {"schema_version": 3, "name": "later", "new_field": 1})
    assert folder.update_meta(status="ok").to_dict()["schema_version"] == 3


def test_damaged_meta_reads_as_empty(tmp_path: Path) -> None:
    folder = RunDir(tmp_path)
    folder.meta.write_text("[1, 2")
    assert folder.read_meta_json() is None and folder.read_meta() == RunMeta(schema_version=1)
    write_json(folder.meta, [1, 2])
    assert folder.read_meta_json() == [1, 2] and folder.read_meta().name is None
