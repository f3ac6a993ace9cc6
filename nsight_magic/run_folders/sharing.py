"""A share-safe copy of a run folder: ``nsight_magic.share(run_dir, dest)``.

A run folder records where and by whom it ran: the absolute cwd, the interpreter's path, the
host name, and the profiled process's whole environment (nsys stores it in its reports:
``TARGET_INFO_SYSTEM_ENV``'s ``DeviceEnvironment`` and ``META_DATA_CAPTURE``'s
``PROCESS_<n>:ENVIRONMENT_VARIABLE`` rows of the export, and inside the ``.nsys-rep``), and
``env.json`` the cell's ``--env``. The copy keeps what reproducing or reading the run needs (the
cell, setup cells, options and argv, tool, driver and library versions, GPU name, clocks and
memory, every timing and the report data) and rewrites the rest:

- environment: only variables on ``shared_env``'s allow-list (device choice, ranks, library
  knobs, versions) keep their values, in the export's tables and in env.json; every other
  value is dropped, and wherever else it appears (a log, a traceback, the cell, a binary
  report) it reads ``<dropped>``. The values searched for are those the run recorded and this
  machine's own environment (a token the notebook has is likely the one the profiled process
  had); ``share.json`` names the variables kept and dropped;
- the run folder's own path (absolute or cwd-relative) becomes ``.`` (``../..`` for a picker
  child's parent), so the copy's paths are relative to it;
- the cwd, the interpreter's environment and home directories become ``<cwd>``,
  ``<python-env>``, ``~``; user and host names (this machine's and those the reports and their
  recorded environments name) become ``<user>`` / ``<host>``; ``USER``/``HOSTNAME``-like
  values become ``<redacted>``; the GPU's UUID is dropped;
- left out: the ``.nsys-rep`` (nsys compresses parts of it, so it cannot be rewritten or
  checked; its export, the ``.sqlite`` or ``_pq`` folder, is what ``load_run`` reads) unless
  ``keep_nsys_rep=True``, and every pickle but torch's allocator snapshot (``vars.pkl``,
  ``shared.pkl``, ``results.pkl``, ``adopted.pkl``: the user's data, and unsafe to unpickle);
- skipped: anything that is not a regular file or a real folder inside the run folder (a
  symbolic link, to a file or a folder, is never followed; a named pipe, socket or device is
  never opened), listed in ``share.json``.

Reports are rewritten, never hand-built: SQLite through ``sqlite3``, parquet through pyarrow,
the ``.ncu-rep`` by replacing each found string with one of the same length (its records keep
their sizes). ``share.json`` in the copy says what was done. The copy is built in a scratch
folder beside ``dest`` and renamed into place when whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import (
    FolderExistsError,
    ReportError,
    ReportNotFoundError,
    RunFolderError,
)
from ..vocabulary.arguments import texts_arg
from .ownership import PRIVATE_DIR, expand
from .regular_files import NotRegularFile, entries, kind_of, open_regular
from .run_dir import RunDir, config_folder_name
from .share_reports import _copy_parquet, _copy_sqlite
from .share_rules import (
    _ENV_NAMES,
    _PICKLE_SUFFIXES,
    _TEXT_SUFFIXES,
    _TRAVELLING_PICKLES,
    DROPPED,
    MANIFEST,
    Redactions,
    _find,
    _json_of,
    _Outcome,
)
from .shared_env import (
    filter_env_mapping,
    shared_env_keeps,
)
from .sweep_layout import check_config_folders, has_run, mark_missing
from .sweep_record import ConfigRecord, SweepRecord, config_label


def share(
    run_dir: str | Path,
    dest: str | Path,
    *,
    redact: Iterable[str] = (),
    keep_nsys_rep: bool = False,
    finish: Callable[[Path], None] | None = None,
) -> Path:
    """Write a share-safe copy of ``run_dir`` (with its picker runs) to ``dest`` (a new folder)
    and return it; ``nsight_magic.load_run(dest)`` opens it. ``redact``: more strings to hide
    (a project name, a cluster's host prefix). ``keep_nsys_rep``: copy the ``.nsys-rep`` too,
    for nsys-ui, as it is (it still names the host and holds the whole environment: nsys
    compresses parts of it, so it cannot be checked; ``share.json`` says so).

    Only regular files inside the folder are read: a symbolic link (to a file or a folder), a
    named pipe, a socket or a device is never followed or opened, and ``share.json`` lists it
    under ``skipped``. The copy is built beside ``dest`` and renamed into place when whole, so a
    failure leaves no half copy. A ``dest`` inside ``run_dir`` (or around it) is a
    ``RunFolderError``: the original is never written to. ``finish``: called with the whole
    copy, still in its scratch folder, before it is renamed into place (``results/sharing``
    writes a sweep's page there), so what it raises leaves nothing behind too."""
    redact = texts_arg(redact, "redact", "share()")
    src = _folder_arg(run_dir, "run_dir")
    dest = _folder_arg(dest, "dest")
    if _is_sweep(src):
        return _share_sweep(src, dest, redact, keep_nsys_rep, finish)
    meta = RunDir(src).meta
    if not src.is_dir() or (not meta.exists() and not meta.is_symlink()):
        raise ReportNotFoundError(f"{src} is not a run folder (no {RunDir.META}).")
    if meta.is_symlink() or not meta.is_file():
        raise ReportError(
            f"{meta} is {kind_of(meta.lstat().st_mode)}, not a regular file: the folder is "
            "damaged or not a run folder; share() reads only regular files."
        )
    with _new_folder(src, dest) as tmp:
        _copy_run(src, tmp, _find(src, extra=redact), keep_nsys_rep)
        if finish is not None:
            finish(tmp)
    return dest


@contextlib.contextmanager
def _new_folder(src: Path, dest: Path) -> Iterator[Path]:
    """A scratch folder beside ``dest`` to build the copy of ``src`` in, renamed to ``dest``
    when the block ends whole, removed when it raised: no half copy is ever left. A ``dest``
    inside ``src`` (or around it) is refused first."""
    _refuse_nested(src, dest)
    if dest.exists() or dest.is_symlink():
        raise FolderExistsError(f"{dest} exists; share() writes a new folder: choose another.")
    tmp = _scratch_beside(dest)
    try:
        yield tmp
        try:
            tmp.rename(dest)
        except OSError as exc:
            raise RunFolderError(
                f"cannot create {dest} ({exc.strerror or exc}); choose a new folder."
            ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _is_sweep(src: Path) -> bool:
    """A sweep folder: a regular ``sweep.json`` and no meta.json of its own."""
    folder = RunDir(src)
    return _is_real_dir(src) and _is_regular(folder.sweep) and not folder.meta.exists()


def _share_sweep(
    src: Path, dest: Path, redact: Iterable[str], keep_nsys_rep: bool,
    finish: Callable[[Path], None] | None,
) -> Path:  # fmt: skip
    """A sweep folder's copy: each configuration's run folder as ``share`` copies a run (with
    its own ``share.json``), and ``sweep.json`` with its values, folder names and error lines
    rewritten as those runs' texts are (a swept value may be a secret: ``_shared_record``); a
    configuration folder that is missing, a link or not a run is left out, and the sweep's
    ``share.json`` says so, and a left-out configuration recorded ``ok`` is recorded failed in
    the copy, its error saying why (``sweep_layout.mark_missing``), so the copy loads as it
    is. A record that names a folder outside the sweep folder, or one folder twice, is refused
    before anything is written (``DamagedFolderError``)."""
    record = RunDir(src).read_sweep()
    if record is None:
        raise ReportError(f"{RunDir(src).sweep} is not a sweep record: the folder is damaged.")
    check_config_folders(src, record)  # '..' once had the copy written around dest
    runs = {
        c.folder: _find(src / c.folder, extra=redact) for c in record.configs if _is_run(src, c)
    }
    gone = [c for c in record.configs if c.folder not in runs or not has_run(src, c.folder)]
    mark_missing(c for c in gone if c.status == "ok")
    rules = _sweep_rules(src, list(runs.values()), redact)
    names = _shared_folder_names(record, rules)
    with _new_folder(src, dest) as tmp:
        for folder, found in runs.items():
            _copy_run(src / folder, tmp / names[folder], found, keep_nsys_rep)
        left_out = [names[c.folder] for c in record.configs if c.folder and c.folder not in runs]
        RunDir(tmp).write_sweep(_shared_record(record, rules, names))
        manifest = {"shared_from": "a sweep folder, by nsight_magic.share()",
                    "configurations": [names[f] for f in runs], "left_out": left_out,
                    "note": "Each configuration's folder has its own share.json: what was "
                    "rewritten there."}  # fmt: skip
        RunDir(tmp).write_copy(MANIFEST, json.dumps(manifest, indent=2))
        if finish is not None:
            finish(tmp)
    return dest


def _is_run(src: Path, config: ConfigRecord) -> bool:
    """A configuration folder to copy: a real folder (a link is never followed) with a regular
    meta.json of its own."""
    folder = src / config.folder
    return bool(config.folder) and _is_real_dir(folder) and _is_regular(RunDir(folder).meta)


def _sweep_rules(src: Path, runs: list[Redactions], redact: Iterable[str]) -> Redactions:
    """What the sweep's own record is rewritten by: all that its configurations' copies
    rewrote, or, when none is copied, what the sweep folder and this machine give."""
    rules = Redactions([(src.name, ".")])
    for found in runs or [_find(src, extra=redact)]:
        rules.paths += [p for p in found.paths if p not in rules.paths]
        rules.words += [w for w in found.words if w not in rules.words]
        rules.secrets += [t for t in found.secrets if t not in rules.secrets]
    return rules


def _shared_values(values: dict[str, Any], rules: Redactions) -> dict[str, Any]:
    """A configuration's values as the copy keeps them: text rewritten as the cell is (a swept
    secret or path, ``HF_TOKEN``'s value, reads as the cell's would)."""
    return {k: _shared_value(v, rules) for k, v in values.items()}


def _shared_value(value: Any, rules: Redactions) -> Any:
    """One swept value rewritten: its text, and the text in a list or dict it is (sweep.json
    keeps those as they are, ``sweep_record.json_value``)."""
    if isinstance(value, str):
        return rules.text(value, code=True)
    if isinstance(value, list):
        return [_shared_value(item, rules) for item in value]
    if isinstance(value, dict):
        return {rules.text(str(k), code=True): _shared_value(v, rules) for k, v in value.items()}
    return value


def _shared_folder_names(record: SweepRecord, rules: Redactions) -> dict[str, str]:
    """Each configuration folder -> its name in the copy: its own, unless the copy rewrites
    its values; then one made again from the rewritten values, as the session names it. The
    original's name holds the value cut to 40 characters, which no search for the whole value
    would find."""
    names: dict[str, str] = {}
    taken = {c.folder for c in record.configs}
    for config in record.configs:
        values = _shared_values(config.values, rules)
        if not config.folder or values == config.values:
            names[config.folder] = config.folder
            continue
        name = base = config_folder_name(config.index + 1, config_label(values))
        for n in range(2, len(taken) + 2):  # "-2", ... as RunDir.new_config on a clash
            if name not in taken:
                break
            name = f"{base}-{n}"
        taken.add(name)
        names[config.folder] = name
    return names


def _shared_record(record: SweepRecord, rules: Redactions, names: dict[str, str]) -> SweepRecord:
    """The copy's sweep.json: the name and values rewritten as the cell is, each folder as the
    copy names it, and each error line (``(run folder: /home/me/runs/<sweep>/03-bs_8)``) as
    the runs' texts are."""
    record.name = rules.text(record.name, code=True)
    for config in record.configs:
        if config.error:  # a renamed folder first: rewriting a secret in it breaks its name
            for old, new in names.items():
                if old != new:
                    config.error = config.error.replace(old, new)
            config.error = rules.text(config.error)
        config.values = _shared_values(config.values, rules)
        config.folder = names[config.folder]
    return record


def _folder_arg(value: Any, what: str) -> Path:
    """A path argument as a ``Path`` (``~`` expanded), or the typed error that says why not."""
    if not isinstance(value, (str, os.PathLike)):
        raise RunFolderError(f"share(): {what} is {value!r}, not a path; pass a folder path.")
    text = os.fspath(value)
    if isinstance(text, bytes) or "\x00" in text or not text:
        raise RunFolderError(f"share(): {what} {text!r} is not a usable path (empty or a NUL).")
    return expand(text)


def _refuse_nested(src: Path, dest: Path) -> None:
    """``RunFolderError`` when ``dest`` lies inside ``src`` (the copy would be written into the
    original, and listed as one of its runs) or ``src`` inside ``dest``; both resolved, so a
    link or a ``..`` step does not hide it. Checked before any folder is made."""
    inside, target = _resolved(src), _resolved(dest)
    if target == inside or target.is_relative_to(inside):
        raise RunFolderError(
            f"share(): {dest} is inside the folder it copies ({src}); share() never writes into "
            "the original: choose a destination outside it."
        )
    if inside.is_relative_to(target):
        raise RunFolderError(
            f"share(): {src} is inside the destination {dest}; choose a new folder outside it."
        )


def _resolved(path: Path) -> Path:
    """``path`` with every link followed (as far as it exists); a loop reads as itself."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop: RuntimeError before Python 3.13
        return path.absolute()


def _scratch_beside(dest: Path) -> Path:
    """An empty private folder next to ``dest`` (same disk: the final rename is atomic)."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".sharing", dir=dest.parent))
    except OSError as exc:
        raise RunFolderError(
            f"cannot create {dest} ({exc.strerror or exc}); choose a writable folder."
        ) from None


def _copy_run(src: Path, out: Path, found: Redactions, keep_nsys_rep: bool) -> None:
    """The share-safe copy of run folder ``src`` (its picker runs too) in ``out``, with the
    ``share.json`` that says what was rewritten, dropped and skipped."""
    outcome = _Outcome(found)
    folders = [src]
    for child in entries(src / RunDir.CHILDREN) if _is_real_dir(src / RunDir.CHILDREN) else []:
        rel = str(child.path.relative_to(src))
        if child.skipped:
            outcome.skipped.append(f"{rel} ({child.skipped})")
        elif not child.is_dir:
            outcome.left_out.append(rel)
        elif _is_regular(child.path / RunDir.META):
            folders.append(child.path)
        else:
            outcome.left_out.append(rel)  # no meta.json of its own: no picker run
    for folder in folders:
        own = [(folder.name, "."), *([(src.name, "../..")] if folder != src else [])]
        rules = Redactions(own, found.paths, found.words, found.secrets)
        _copy_folder(folder, out / folder.relative_to(src), rules, keep_nsys_rep, outcome, src)
    RunDir(out).write_copy(MANIFEST, json.dumps(outcome.manifest(), indent=2))


def _is_real_dir(path: Path) -> bool:
    return not path.is_symlink() and path.is_dir()


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _copy_folder(
    folder: Path, target: Path, rules: Redactions, keep_nsys_rep: bool, outcome: _Outcome,
    root: Path,
) -> None:  # fmt: skip
    target.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    copy = RunDir(target)  # writes each rewritten file, 0600
    for entry in entries(folder):
        item = entry.path
        rel = str(item.relative_to(root))
        if entry.skipped:
            outcome.skipped.append(f"{rel} ({entry.skipped})")
        elif item.name == RunDir.CHILDREN and entry.is_dir and folder == root:
            continue  # picker runs: their own folders, from _copy_run
        elif item.name.endswith(".lock") or item.name.startswith("."):
            continue  # our locks and export stamps
        elif (item.suffix == ".nsys-rep" and not keep_nsys_rep) or _pickle_left_out(item.name):
            outcome.left_out.append(rel)
        elif entry.is_dir and item.name.endswith("_pq"):
            _copy_parquet(item, target / item.name, rules, outcome, root)
        elif entry.is_dir:
            outcome.left_out.append(rel)
        else:
            _copy_file(item, copy, rules, outcome, rel)


def _pickle_left_out(name: str) -> bool:
    """``name`` is a pickle that does not travel: every one but ``_TRAVELLING_PICKLES``."""
    return name.endswith(_PICKLE_SUFFIXES) and name not in _TRAVELLING_PICKLES


def _copy_file(item: Path, copy: RunDir, rules: Redactions, outcome: _Outcome, rel: str) -> None:
    try:
        fh = open_regular(item)  # a file swapped for a link or a pipe since the walk: skipped
    except NotRegularFile as exc:
        outcome.skipped.append(f"{rel} ({exc.what})")
        return
    except OSError as exc:
        outcome.skipped.append(f"{rel} (cannot be read: {exc.strerror or exc})")
        return
    with fh:
        if item.suffix == ".sqlite":  # streamed: an export may be gigabytes
            _copy_sqlite(fh, item, copy.path / item.name, rules, outcome)
            return
        if item.suffix == ".nsys-rep":  # keep_nsys_rep: as it is, by request
            copy.write_copy(item.name, fh)
            outcome.as_is.append(
                f"{rel}: compressed by nsys, so not rewritten; it still holds the host name and "
                "the profiled process's whole environment"
            )
            return
        data = fh.read()
    if item.suffix == ".json" and (text := _json_text(data, rules, item.name, outcome)):
        copy.write_copy(item.name, text)
    elif item.suffix == ".py":
        copy.write_copy(item.name, rules.text(data.decode(errors="replace"), code=True))
    elif item.suffix in _TEXT_SUFFIXES:
        copy.write_copy(item.name, rules.text(data.decode(errors="replace")))
    else:  # the .ncu-rep and any other file: string for string
        data, short = rules.binary(data)
        copy.write_copy(item.name, data)
        outcome.short_names.update(short)


def _json_text(data: bytes, rules: Redactions, name: str, outcome: _Outcome) -> str:
    """A JSON file rewritten value by value ("" when it is no JSON, or nested too deep to
    walk: then it is rewritten as text, like a log)."""
    value = _json_of(data)
    if value is None:
        return ""
    try:
        return json.dumps(_json(value, rules, name, outcome), indent=2)
    except RecursionError:
        return ""


def _json(value: Any, rules: Redactions, name: str, outcome: _Outcome) -> Any:
    if name == RunDir.ENV and isinstance(value, dict):  # the cell's --env
        value, dropped = filter_env_mapping(value)
        outcome.env_dropped.update(dropped)
        outcome.env_kept.update(str(k) for k in value)
    if name == RunDir.META and isinstance(value, dict):
        value = dict(value)
        value["cwd"] = None  # a re-run uses the reader's cwd
        if value.get("python"):
            value["python"] = Path(str(value["python"])).name  # found on the reader's PATH
        for gpu in value.get("gpus") or []:
            if isinstance(gpu, dict):
                gpu.pop("uuid", None)
    if name == RunDir.ARGV or name == RunDir.META:
        value = _argv_env(value, outcome, name == RunDir.ARGV)
    return _walk(value, rules.text)


# an argv item that sets a variable: ``HF_TOKEN=x`` (``env HF_TOKEN=x python ...``), nsys's
# ``--env-var=HF_TOKEN=x``
_ARGV_ASSIGNMENT = re.compile(r"(--env-var=|--env=)?([A-Z_][A-Z0-9_]*)=(.*)", re.DOTALL)


def _argv_env(value: Any, outcome: _Outcome, is_argv: bool) -> Any:
    """The environment assignments in command lines (argv.json; meta.json's ``*argv`` and
    ``extra_args`` lists) down to the allow-list, as in the export."""

    def fix_list(items: list[Any]) -> list[Any]:
        out = []
        for item in items:
            match = _ARGV_ASSIGNMENT.fullmatch(item) if isinstance(item, str) else None
            if match and not shared_env_keeps(match[2], match[3]):
                outcome.env_dropped.add(match[2])
                item = f"{match[1] or ''}{match[2]}={DROPPED}"
            out.append(item)
        return out

    def walk(node: Any, key: str) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, str(k)) for k, v in node.items()}
        if isinstance(node, list):
            if is_argv or key.endswith("argv") or key == "extra_args":
                return fix_list(node)
            return [walk(v, key) for v in node]
        return node

    return walk(value, "")


def _walk(value: Any, fix: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fix(value)
    if isinstance(value, list):
        return [_walk(v, fix) for v in value]
    if isinstance(value, dict):  # KEY -> value
        return {k: "<redacted>" if k in _ENV_NAMES else _walk(v, fix) for k, v in value.items()}
    return value


__all__ = ["MANIFEST", "Redactions", "share"]
