"""``share()`` keeps no secret and reads nothing outside the folder (issue 35, items 1, 2, 8, 10).

Real run folders (notebooks 03 and 04, captured on the lent H100s) are copied into tmp_path and
damaged there the way a user's machine would: tokens in the environment nsys recorded and in
``--env``, links to files and folders outside, named pipes, a taken or read-only destination,
a damaged export."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sqlite3
import threading
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import nsight_magic
from nsight_magic.errors import CorruptReportError, FolderExistsError, ReportError, RunFolderError
from nsight_magic.reports.torch_memory import load_snapshot
from nsight_magic.run_folders.run_dir import RunDir
from nsight_magic.run_folders.shared_env import filter_env_list, shared_env_keeps
from nsight_magic.run_folders.sharing import MANIFEST

RUNS = Path(__file__).resolve().parent.parent / "notebooks" / "runs"
# a configuration of the real sweep (tests/data/README.md): vars.pkl, torch_memory.pickle, parquet
SWEEP_CONFIG = Path(__file__).resolve().parent / "data" / "sweep_prefill" / "02-bs_4"
IS_ROOT = os.geteuid() == 0
# what a user's environment holds and a shared copy must never carry (none starts with '/')
SECRETS = {
    "HF_TOKEN": "hf_QzTr8uYvLmNpKs4aB7cD9eF0gH",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzSECRET",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "DATABASE_URL": "postgres://admin:s3cr3t-pw@db.internal:5432/prod",
}


def _saved(study: str, name: str) -> Path:
    found = sorted((RUNS / study).glob(f"*-{name}"))
    if not found:
        pytest.skip(f"no saved {study}/{name} run")
    return found[-1]


def _copy(study: str, name: str, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "run"
    shutil.copytree(_saved(study, name), dst, symlinks=True)
    return dst


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def _plant_in_sqlite(db_path: Path) -> None:
    """The tokens where nsys puts the environment: the DeviceEnvironment list and one
    ``PROCESS_0:ENVIRONMENT_VARIABLE`` row each."""
    with sqlite3.connect(db_path) as db:
        extra = "".join(f"{k}={v};" for k, v in SECRETS.items())
        db.execute(
            "UPDATE TARGET_INFO_SYSTEM_ENV SET value = value || ? WHERE name = 'DeviceEnvironment'",
            (extra,),
        )
        db.executemany(
            "INSERT INTO META_DATA_CAPTURE (name, value) "
            "VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
            [(f'{k}="{v}"',) for k, v in SECRETS.items()],
        )


def _plant_in_parquet(pq_dir: Path) -> None:
    extra = "".join(f"{k}={v};" for k, v in SECRETS.items())
    path = pq_dir / "TARGET_INFO_SYSTEM_ENV.parquet"
    table = pq.read_table(path)
    values = [v + extra if n == "DeviceEnvironment" else v for n, v in
              zip(table["name"].to_pylist(), table["value"].to_pylist(), strict=True)]  # fmt: skip
    idx = table.schema.get_field_index("value")
    table = table.set_column(idx, table.schema.field(idx), pa.array(values, table["value"].type))
    pq.write_table(table, path)
    path = pq_dir / "META_DATA_CAPTURE.parquet"
    table = pq.read_table(path)
    rows = pa.table(
        {
            "name": ["PROCESS_0:ENVIRONMENT_VARIABLE"] * len(SECRETS),
            "value": [f'{k}="{v}"' for k, v in SECRETS.items()],
        }
    ).cast(table.schema)
    pq.write_table(pa.concat_tables([table, rows]), path)


def _assert_no_secret(out: Path) -> None:
    data = _all_bytes(out)
    for name, value in SECRETS.items():
        assert value.encode() not in data, name
        assert value.split("@")[0].encode() not in data, name  # not even the URL's user part


def test_sqlite_export_env_json_argv_and_log_keep_no_secret(tmp_path: Path) -> None:
    """Item 1 on an .sqlite export (notebook 04's two-rank run, with its ncu picker child)."""
    src = _copy("04_multi_gpu", "tp_step", tmp_path)
    _plant_in_sqlite(src / "report.sqlite")
    (src / "env.json").write_text(json.dumps({**SECRETS, "CUDA_VISIBLE_DEVICES": "0,1"}))
    argv = json.loads((src / "argv.json").read_text())
    short = "pw-123"  # too short to search for everywhere: dropped where it is set
    extra = ["--token", SECRETS["HF_TOKEN"], f"--env-var=PGPASSWORD={short}", "env",
             f"MY_PASSWORD={short}", "CUDA_VISIBLE_DEVICES=1"]  # fmt: skip
    (src / "argv.json").write_text(json.dumps([*argv, *extra]))
    meta_extra = json.loads((src / "meta.json").read_text())
    meta_extra["options"]["extra_args"] = [f"--env-var=PGPASSWORD={short}"]
    (src / "meta.json").write_text(json.dumps(meta_extra))
    with open(src / "profiler.log", "a") as log:
        log.write(f"connecting to {SECRETS['DATABASE_URL']}\n")
    meta = json.loads((src / "meta.json").read_text())
    meta["note"] = f"run with WANDB_API_KEY={SECRETS['WANDB_API_KEY']}"
    (src / "meta.json").write_text(json.dumps(meta))
    assert all(v.encode() in _all_bytes(src) for v in SECRETS.values())  # the leak is real

    out = nsight_magic.share(src, tmp_path / "shared")
    _assert_no_secret(out)
    manifest = json.loads((out / MANIFEST).read_text())
    assert set(SECRETS) <= set(manifest["environment"]["dropped"])
    assert {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"} <= set(
        manifest["environment"]["kept"]
    )
    assert json.loads((out / "env.json").read_text()) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    shared_argv = json.loads((out / "argv.json").read_text())
    assert shared_argv[-4:] == ["--env-var=PGPASSWORD=<dropped>", "env",
                                "MY_PASSWORD=<dropped>", "CUDA_VISIBLE_DEVICES=1"]  # fmt: skip
    assert short.encode() not in _all_bytes(out)
    assert {"PGPASSWORD", "MY_PASSWORD"} <= set(manifest["environment"]["dropped"])
    with sqlite3.connect(out / "report.sqlite") as db:
        (device_env,) = db.execute(
            "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'"
        ).fetchone()
        rows = [r[0] for r in db.execute(
            "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE'"
        )]  # fmt: skip
    kept = [p.split("=")[0] for p in device_env.split(";") if p]
    assert kept and all(shared_env_keeps(k, "0") or k.endswith("_VERSION") for k in kept)
    assert "PATH" not in kept and "HOME" not in kept and "LD_LIBRARY_PATH" not in kept
    assert rows and all(r.split("=")[0] in manifest["environment"]["kept"] for r in rows)
    # the numbers are the same, and the ncu child still loads
    before, after = nsight_magic.load_run(src), nsight_magic.load_run(out)
    pd.testing.assert_frame_equal(before.kernel_summary(), after.kernel_summary())
    (child,) = (out / "ncu").iterdir()
    assert len(nsight_magic.load_run(child).report.kernels()) >= 1


def test_parquet_export_keeps_no_secret(tmp_path: Path) -> None:
    """Item 1 on a parquet export (notebook 03's run)."""
    src = _copy("03_compare", "after", tmp_path)
    _plant_in_parquet(src / "report_pq")
    out = nsight_magic.share(src, tmp_path / "shared")
    _assert_no_secret(out)
    env = pq.read_table(out / "report_pq" / "TARGET_INFO_SYSTEM_ENV.parquet").to_pandas()
    device_env = env.loc[env["name"] == "DeviceEnvironment", "value"].iloc[0]
    assert "NVIDIA_VISIBLE_DEVICES=" in device_env and "HF_TOKEN" not in device_env
    capture = pq.read_table(out / "report_pq" / "META_DATA_CAPTURE.parquet").to_pandas()
    env_rows = capture[capture["name"].str.contains("ENVIRONMENT_VARIABLE")]["value"]
    assert not env_rows.str.startswith(("PATH=", "HOME=", "LD_LIBRARY_PATH=")).any()
    manifest = json.loads((out / MANIFEST).read_text())
    assert set(SECRETS) <= set(manifest["environment"]["dropped"])
    before, after = nsight_magic.load_run(src), nsight_magic.load_run(out)
    pd.testing.assert_frame_equal(before.kernel_summary(), after.kernel_summary())


def test_nsys_rep_is_left_out_unless_asked_and_then_said(tmp_path: Path) -> None:
    """The .nsys-rep holds the environment in parts nsys compresses: left out by default; kept
    on request, share.json says it is as it was."""
    src = _copy("03_compare", "after", tmp_path)
    out = nsight_magic.share(src, tmp_path / "a")
    assert not (out / "report.nsys-rep").exists()
    assert "report.nsys-rep" in json.loads((out / MANIFEST).read_text())["left_out"]
    out = nsight_magic.share(src, tmp_path / "b", keep_nsys_rep=True)
    (as_is,) = json.loads((out / MANIFEST).read_text())["kept_as_is"]
    assert as_is.startswith("report.nsys-rep") and "environment" in as_is


def test_this_machines_secret_values_are_scrubbed_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token in the notebook's environment that the cell printed (status.json's traceback,
    the cell itself) is removed from the copy too."""
    token = "ghp_" + "Zx9" * 12
    monkeypatch.setenv("GITHUB_TOKEN", token)
    src = _copy("03_compare", "after", tmp_path)
    with open(src / "cell.py", "a") as f:
        f.write(f"\n# auth = {token!r}\n")
    status = json.loads((src / "status.json").read_text())
    status["traceback"] = f"ValueError: bad token {token}"
    (src / "status.json").write_text(json.dumps(status))
    out = nsight_magic.share(src, tmp_path / "shared")
    assert token.encode() not in _all_bytes(out)
    assert "<dropped>" in (out / "cell.py").read_text()


def test_the_shells_own_variables_are_no_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bash's ``_`` (the last command, here ``jupyter-lab``) is dropped from the copy's
    environment like any variable not on the allow list, but it is no secret: a log line that
    names the command keeps it (it read ``<dropped> started``)."""
    monkeypatch.setenv("_", "jupyter-lab-4.2")
    monkeypatch.setenv("SHLVL", "12345678901")
    src = _copy("03_compare", "after", tmp_path)
    status = json.loads((src / "status.json").read_text())
    status["traceback"] = "jupyter-lab-4.2 started; level 12345678901"
    (src / "status.json").write_text(json.dumps(status))
    out = nsight_magic.share(src, tmp_path / "shared")
    shared = json.loads((out / "status.json").read_text())
    assert shared["traceback"] == "jupyter-lab-4.2 started; level 12345678901"


def test_only_pickles_meant_to_travel_are_copied(tmp_path: Path) -> None:
    """``results.pkl`` (what a warm cell sends back, left in its run folder when the notebook is
    killed while reading it), ``adopted.pkl`` and any other pickle are never copied (issue 57):
    the cell's data, and code to whoever unpickles it. torch's allocator snapshot travels: the
    memory view reads it back as plain data only."""
    src = tmp_path / "run"
    shutil.copytree(SWEEP_CONFIG, src)
    results = {"loss": 0.25, "logits_shape": (4, 256, 8192)}  # what a cell's names may hold
    left = [RunDir.RESULTS, RunDir.ADOPTED, "checkpoint.pickle", RunDir.VARS]
    for name in left[:3]:
        (src / name).write_bytes(pickle.dumps(results))
    out = nsight_magic.share(src, tmp_path / "shared")
    manifest = json.loads((out / MANIFEST).read_text())
    for name in left:
        assert not (out / name).exists(), name
        assert name in manifest["left_out"], name
    assert load_snapshot(out / RunDir.TORCH_MEMORY).devices  # copied, still readable


def test_env_list_filter_keeps_allow_listed_names_only() -> None:
    kept, names, dropped = filter_env_list(
        "CUDA_VISIBLE_DEVICES=0;HF_TOKEN=hf_x;y;NV_LIBCUBLAS_VERSION=13.1.0.3-1;"
        "SECRET_VERSION=http://u:p@h;PATH=/usr/bin;"
    )
    assert kept == "CUDA_VISIBLE_DEVICES=0;NV_LIBCUBLAS_VERSION=13.1.0.3-1;"
    assert names == ["CUDA_VISIBLE_DEVICES", "NV_LIBCUBLAS_VERSION"]
    assert dropped == ["HF_TOKEN", "SECRET_VERSION", "PATH"]  # "hf_x;y": one value


# --- item 2: links ---------------------------------------------------------------------------


def test_links_out_of_the_folder_are_never_followed(tmp_path: Path) -> None:
    src = _copy("04_multi_gpu", "tp_step", tmp_path)
    secret_dir = tmp_path / "home" / ".ssh"
    secret_dir.mkdir(parents=True)
    key = secret_dir / "id_rsa"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAsecretkeymaterial\n")
    (src / "id_rsa").symlink_to(key)
    (src / "notes.txt").symlink_to(key)
    (src / "keys_pq").symlink_to(secret_dir, target_is_directory=True)
    (child,) = (src / "ncu").iterdir()
    (src / "ncu" / "20990101T000000.000000Z-evil").symlink_to(secret_dir)
    (child / "report.ncu-rep.bak").symlink_to(key)
    out = nsight_magic.share(src, tmp_path / "shared")
    assert b"secretkeymaterial" not in _all_bytes(out)
    assert not any(p.is_symlink() for p in out.rglob("*"))
    skipped = json.loads((out / MANIFEST).read_text())["skipped"]
    for name in ("id_rsa", "notes.txt", "keys_pq", "ncu/20990101T000000.000000Z-evil",
                 f"ncu/{child.name}/report.ncu-rep.bak"):  # fmt: skip
        assert f"{name} (a symbolic link)" in skipped


def test_a_linked_report_is_not_loaded_or_copied(tmp_path: Path) -> None:
    """``report.sqlite`` as a link to another report: load_run refuses it, share skips it."""
    src = _copy("04_multi_gpu", "tp_step", tmp_path)
    elsewhere = tmp_path / "elsewhere.sqlite"
    (src / "report.sqlite").rename(elsewhere)
    (src / "report.sqlite").symlink_to(elsewhere)
    with pytest.raises(ReportError, match=r"symbolic link|outside the run folder"):
        nsight_magic.load_run(src)
    meta = json.loads((src / "meta.json").read_text())
    del meta["report"]  # found by its usual name, not named by meta.json
    (src / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ReportError, match="symbolic link"):
        nsight_magic.load_run(src)
    out = nsight_magic.share(src, tmp_path / "shared")
    assert not (out / "report.sqlite").exists()
    assert "report.sqlite (a symbolic link)" in json.loads((out / MANIFEST).read_text())["skipped"]


def test_a_linked_run_folder_meta_is_refused(tmp_path: Path) -> None:
    src = _copy("03_compare", "after", tmp_path)
    (src / "meta.json").rename(tmp_path / "meta.json")
    (src / "meta.json").symlink_to(tmp_path / "meta.json")
    with pytest.raises(ReportError, match="not a regular file"):
        nsight_magic.share(src, tmp_path / "shared")
    assert not (tmp_path / "shared").exists()


# --- item 8: special files -------------------------------------------------------------------


def _bounded(fn, *args, seconds: float = 30.0):  # type: ignore[no-untyped-def]
    """``fn(*args)`` in a thread; fails the test instead of hanging when it blocks."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__} blocked on a special file"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def test_a_fifo_never_blocks_share(tmp_path: Path) -> None:
    src = _copy("03_compare", "after", tmp_path)
    os.mkfifo(src / "notes.txt")
    os.mkfifo(src / "report_pq" / "EXTRA.parquet")
    out = _bounded(nsight_magic.share, src, tmp_path / "shared")
    skipped = json.loads((out / MANIFEST).read_text())["skipped"]
    assert "notes.txt (a named pipe)" in skipped
    assert "report_pq/EXTRA.parquet (a named pipe)" in skipped


FOLDER_FILES = ["meta.json", "status.json", "status.rank1.json", "env.json", "argv.json",
                "cell.py", "script.py", "profiler.log", "report.sqlite"]  # fmt: skip


@pytest.mark.parametrize("name", FOLDER_FILES)
def test_a_fifo_never_blocks_load_run_or_its_view(tmp_path: Path, name: str) -> None:
    src = _copy("04_multi_gpu", "tp_step", tmp_path)
    (src / name).unlink()
    os.mkfifo(src / name)
    if name in ("meta.json", "report.sqlite"):
        with pytest.raises(ReportError, match="named pipe"):
            _bounded(nsight_magic.load_run, src)
        return
    run = _bounded(nsight_magic.load_run, src)
    assert len(run.kernel_summary()) > 0
    assert "Kernels" in _bounded(run.to_html)


def test_a_linked_meta_json_is_refused_by_load_run(tmp_path: Path) -> None:
    src = _copy("04_multi_gpu", "tp_step", tmp_path)
    (src / "meta.json").rename(tmp_path / "meta.json")
    (src / "meta.json").symlink_to(tmp_path / "meta.json")
    with pytest.raises(ReportError, match="a symbolic link, not a regular file"):
        nsight_magic.load_run(src)


# --- item 10: the destination and damaged exports -------------------------------------------


def test_taken_read_only_or_bad_destination_is_one_typed_error(tmp_path: Path) -> None:
    src = _saved("03_compare", "after")
    (tmp_path / "taken").mkdir()
    with pytest.raises(FolderExistsError, match="exists"):
        nsight_magic.share(src, tmp_path / "taken")
    with pytest.raises(RunFolderError, match="NUL"):
        nsight_magic.share(src, tmp_path / "a\x00b")
    with pytest.raises(RunFolderError, match="not a path"):
        nsight_magic.share(src, None)  # type: ignore[arg-type]
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(RunFolderError, match="cannot create"):
        nsight_magic.share(src, tmp_path / "a_file" / "shared")
    if not IS_ROOT:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(RunFolderError, match="cannot create"):
            nsight_magic.share(src, ro / "shared")


def test_a_destination_inside_the_run_folder_or_around_it_is_refused(tmp_path: Path) -> None:
    """share() never touches the original: a copy written inside the run folder (``P/inner``,
    or reached through a link or ``..``) would become one of its files and a run list_runs
    lists; refused before any folder is made, as is a destination the run folder lies in."""
    src = _copy("03_compare", "after", tmp_path)
    before = sorted(str(p.relative_to(src)) for p in src.rglob("*"))
    (tmp_path / "link").symlink_to(src)
    for dest in (src / "inner", src / "a" / "b", src, tmp_path / "link" / "inner",
                 tmp_path / "elsewhere" / ".." / "run" / "inner"):  # fmt: skip
        with pytest.raises(RunFolderError, match="inside the folder it copies"):
            nsight_magic.share(src, dest)
    nested = tmp_path / "outer" / "run"
    shutil.copytree(src, nested)
    with pytest.raises(RunFolderError, match="is inside the destination"):
        nsight_magic.share(nested, tmp_path / "outer" / "." / ".." / "outer2" / ".." / "outer")
    assert sorted(str(p.relative_to(src)) for p in src.rglob("*")) == before
    assert len(nsight_magic.list_runs(src)) == 0 and not (tmp_path / "elsewhere").exists()
    assert nsight_magic.share(src, tmp_path / "beside").is_dir()  # beside it: fine


def test_damaged_exports_are_typed_and_leave_nothing_behind(tmp_path: Path) -> None:
    src = _copy("04_multi_gpu", "tp_step", tmp_path)
    data = (src / "report.sqlite").read_bytes()
    (src / "report.sqlite").write_bytes(data[:100] + b"\xff" * 4000 + data[4100:])
    with pytest.raises(CorruptReportError, match=r"export the \.nsys-rep again"):
        nsight_magic.share(src, tmp_path / "shared")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no half copy, no scratch
    src = _copy("03_compare", "after", tmp_path / "pq")
    (src / "report_pq" / "CUPTI_ACTIVITY_KIND_KERNEL.parquet").write_bytes(b"PAR1garbage")
    with pytest.raises(CorruptReportError, match="parquet export is damaged"):
        nsight_magic.share(src, tmp_path / "shared2")
    assert not (tmp_path / "shared2").exists()


def test_a_run_folder_named_with_uri_characters_is_shared(tmp_path: Path) -> None:
    """The export is opened through an SQLite URI: '?' and '#' in a folder name are quoted."""
    src = _copy("04_multi_gpu", "tp_step", tmp_path)
    odd = src.rename(tmp_path / "run?mode=rw#x")
    _plant_in_sqlite(odd / "report.sqlite")
    out = nsight_magic.share(odd, tmp_path / "shared")
    _assert_no_secret(out)


def test_damaged_json_files_are_shared_as_text(tmp_path: Path) -> None:
    """status.json cut short, env.json nested to just under json's limit: still rewritten (as
    text), no RecursionError, and the secret is still dropped."""
    src = _copy("03_compare", "after", tmp_path)
    token = SECRETS["HF_TOKEN"]
    (src / "env.json").write_text(json.dumps({"HF_TOKEN": token}))
    (src / "status.json").write_text('{"traceback": "' + token)
    deep = "[" * 900 + json.dumps(token) + "]" * 900
    (src / "argv.json").write_text(deep)
    out = nsight_magic.share(src, tmp_path / "shared")
    _assert_no_secret(out)
    assert (out / "status.json").read_text().endswith("<dropped>")


def test_the_copy_is_private(tmp_path: Path) -> None:
    """Folders 0700 and files 0600, as a run folder's own."""
    import stat

    out = nsight_magic.share(_copy("03_compare", "after", tmp_path), tmp_path / "shared")
    modes = {p.relative_to(out).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*")}
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert {m for m in modes.values()} == {0o600, 0o700}, modes
    assert modes["report_pq"] == 0o700
