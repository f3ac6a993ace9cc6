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
import getpass
import json
import os
import re
import shutil
import socket
import sqlite3
import stat
import tempfile
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import (
    CorruptReportError,
    FolderExistsError,
    ReportError,
    ReportNotFoundError,
    RunFolderError,
)
from ..vocabulary.arguments import texts_arg
from .ownership import PRIVATE_DIR, expand
from .regular_files import NotRegularFile, entries, kind_of, open_regular, read_regular, walk_folder
from .run_dir import RunDir, config_folder_name
from .run_meta import RunMeta
from .shared_env import (
    filter_env_list,
    filter_env_mapping,
    filter_env_row,
    looks_like_env_list,
    shared_env_keeps,
)
from .sweep_layout import check_config_folders
from .sweep_record import ConfigRecord, SweepRecord, config_label

MANIFEST = "share.json"
# a pickle is the user's data and code to whoever unpickles it: vars.pkl (notebook variables),
# shared.pkl (also CUDA IPC handles, meaningless once the notebook is gone), results.pkl and
# adopted.pkl (what a warm cell sends back: left in the folder when the notebook is killed while
# reading it), or one we do not know. Only pickles on this list travel: torch's allocator snapshot,
# plain data that reports/torch_memory.py reads with an unpickler that builds plain values only
_TRAVELLING_PICKLES = (RunDir.TORCH_MEMORY,)
_PICKLE_SUFFIXES = (".pkl", ".pickle")
_TEXT_SUFFIXES = {".json", ".log", ".txt", ".csv", ".md", ".out", ".err", ".yaml", ".toml", ""}
_ENV_NAMES = ("USER", "USERNAME", "LOGNAME", "HOSTNAME", "HOST", "CONTAINER_NAME", "SSH_CLIENT",
              "SSH_CONNECTION", "MAIL", "JPY_USER", "PWD", "OLDPWD")  # fmt: skip
_HOST_ENV = ("HOSTNAME", "HOST", "CONTAINER_NAME")
# variables a shell sets for itself: dropped from a copy's environment like any other, but their
# values (``_``: the last command, ``jupyter-lab``) are no secret to search for elsewhere: every
# log line naming that command would read <dropped>
_SHELL_BOOKKEEPING = frozenset({"_", "SHLVL", "OLDPWD", "PWD", "TERM", "SHELL", "LS_COLORS"})
# top-level folders every machine has: never redacted as such (what is under them may be)
_SYSTEM_DIRS = {"/usr", "/opt", "/tmp", "/etc", "/var", "/bin", "/lib", "/sbin", "/work", "/home",
                "/mnt", "/srv", "/data", "/proc", "/sys", "/dev", "/run"}  # fmt: skip
_ENV_VALUE = re.compile(
    r"(?<![A-Za-z0-9_])(" + "|".join(_ENV_NAMES) + r")=(\"?)([^;\x00\"\n\r\t ]+)"
)
_HOME = re.compile(r"(?<![A-Za-z0-9_])HOME=\"?(/[^;\x00\"\n\r\t :]+)")
_PATH_CHARS = r"[^\s\"'=:;,\x00\[\]()]"
# what a dropped environment value reads as wherever else it appeared (a log, a traceback)
DROPPED = "<dropped>"
# a dropped value shorter than this, or a path (rewritten as a path), is not searched for
# elsewhere: "1" or "yes" would hit everything
_MIN_SECRET = 10
# nsys's tables about the capture and the machine (the environment lives there), as opposed to
# its event tables, whose strings (kernel and NVTX names) are the user's data
_METADATA_TABLES = ("TARGET_INFO_", "META_DATA_")
# a short name could be any two bytes of a binary report: only longer ones are searched there
_MIN_BINARY_WORD = 4


@dataclass
class Redactions:
    """What to rewrite, found in the run folder and on this machine (never written out)."""

    own_names: list[tuple[str, str]] = field(default_factory=list)  # run folder name -> "."
    paths: list[tuple[str, str]] = field(default_factory=list)  # absolute prefix -> label
    words: list[tuple[str, str]] = field(default_factory=list)  # user/host name -> label
    secrets: list[str] = field(default_factory=list)  # dropped environment values

    def add_secret(self, value: Any) -> None:
        text = str(value or "")
        if len(text) >= _MIN_SECRET and not text.startswith("/") and text not in self.secrets:
            self.secrets.append(text)

    def add_path(self, path: Any, label: str) -> None:
        text = str(path or "").rstrip("/")
        known = {p for p, _ in self.paths}  # the first label wins: home before cwd
        if text.startswith("/") and text not in _SYSTEM_DIRS | known and len(text) >= 4:
            self.paths.append((text, label))

    def add_word(self, word: Any, label: str) -> None:
        text = str(word or "").strip()
        if len(text) >= 2 and text not in {"root", "localhost"} | {w for w, _ in self.words}:
            self.words.append((text, label))

    def text(self, value: str, code: bool = False) -> str:
        """``value`` rewritten; ``code`` (the cell, the script): paths only, so that no
        identifier of the user's code that happens to equal a user name is touched; a dropped
        environment value is removed from code too)."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            value = value.replace(secret, DROPPED)
        for name, label in self.own_names:
            value = re.sub(
                rf"(?:{_PATH_CHARS}*/)?{re.escape(name)}(?![A-Za-z0-9_.-])", label, value
            )
        for prefix, label in sorted(self.paths, key=lambda p: -len(p[0])):
            value = re.sub(rf"{re.escape(prefix)}(?=/|\b|$)", label, value)
        if code:
            return value
        value = _ENV_VALUE.sub(lambda m: f"{m[1]}={m[2]}<redacted>", value)
        for word, label in self.words:
            value = re.sub(rf"(?<![A-Za-z0-9_-]){re.escape(word)}(?![A-Za-z0-9_-])", label, value)
        return value

    def binary(self, data: bytes) -> tuple[bytes, list[str]]:
        """``data`` with every path and long-enough name replaced by a string of the same
        length; also the names left as they were (too short to find safely)."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            raw = secret.encode()
            data = data.replace(raw, _same_length(DROPPED, len(raw)))
        for prefix, label in sorted(self.paths, key=lambda p: -len(p[0])):
            raw = prefix.encode()
            data = data.replace(raw, _same_length(label, len(raw)))
        kept = []
        for word, label in self.words:
            raw = word.encode()
            if len(raw) < _MIN_BINARY_WORD:
                kept.append(label)
                continue
            pattern = rb"(?<![A-Za-z0-9_-])" + re.escape(raw) + rb"(?![A-Za-z0-9_-])"
            data = re.sub(pattern, _same_length(label, len(raw)), data)
        return data, kept


def _same_length(label: str, size: int) -> bytes:
    raw = label.encode()
    return raw[:size] if len(raw) >= size else raw + b"_" * (size - len(raw))


def share(
    run_dir: str | Path,
    dest: str | Path,
    *,
    redact: Iterable[str] = (),
    keep_nsys_rep: bool = False,
) -> Path:
    """Write a share-safe copy of ``run_dir`` (with its picker runs) to ``dest`` (a new folder)
    and return it; ``nsight_magic.load_run(dest)`` opens it. ``redact``: more strings to hide
    (a project name, a cluster's host prefix). ``keep_nsys_rep``: copy the ``.nsys-rep`` too,
    for nsys-ui, as it is (it still names the host and holds the whole environment: nsys
    compresses parts of it, so it cannot be checked; ``share.json`` says so).

    Only regular files inside the folder are read: a symbolic link (to a file or a folder), a
    named pipe, a socket or a device is never followed or opened, and ``share.json`` lists it
    under ``skipped``. The copy is built beside ``dest`` and renamed into place when whole, so a
    failure leaves no half copy."""
    redact = texts_arg(redact, "redact", "share()")
    src = _folder_arg(run_dir, "run_dir")
    dest = _folder_arg(dest, "dest")
    if _is_sweep(src):
        return _share_sweep(src, dest, redact, keep_nsys_rep)
    meta = RunDir(src).meta
    if not src.is_dir() or (not meta.exists() and not meta.is_symlink()):
        raise ReportNotFoundError(f"{src} is not a run folder (no {RunDir.META}).")
    if meta.is_symlink() or not meta.is_file():
        raise ReportError(
            f"{meta} is {kind_of(meta.lstat().st_mode)}, not a regular file: the folder is "
            "damaged or not a run folder; share() reads only regular files."
        )
    with _new_folder(dest) as tmp:
        _copy_run(src, tmp, _find(src, extra=redact), keep_nsys_rep)
    return dest


@contextlib.contextmanager
def _new_folder(dest: Path) -> Iterator[Path]:
    """A scratch folder beside ``dest`` to build the copy in, renamed to ``dest`` when the
    block ends whole, removed when it raised: no half copy is ever left."""
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


def _share_sweep(src: Path, dest: Path, redact: Iterable[str], keep_nsys_rep: bool) -> Path:
    """A sweep folder's copy: each configuration's run folder as ``share`` copies a run (with
    its own ``share.json``), and ``sweep.json`` with its values, folder names and error lines
    rewritten as those runs' texts are (a swept value may be a secret: ``_shared_record``); a
    configuration folder that is missing, a link or not a run is left out, and the sweep's
    ``share.json`` says so. A record that names a folder outside the sweep folder, or one
    folder twice, is refused before anything is written (``DamagedFolderError``)."""
    record = RunDir(src).read_sweep()
    if record is None:
        raise ReportError(f"{RunDir(src).sweep} is not a sweep record: the folder is damaged.")
    check_config_folders(src, record)  # '..' once had the copy written around dest
    runs = {
        c.folder: _find(src / c.folder, extra=redact) for c in record.configs if _is_run(src, c)
    }
    rules = _sweep_rules(src, list(runs.values()), redact)
    names = _shared_folder_names(record, rules)
    with _new_folder(dest) as tmp:
        for folder, found in runs.items():
            _copy_run(src / folder, tmp / names[folder], found, keep_nsys_rep)
        left_out = [names[c.folder] for c in record.configs if c.folder and c.folder not in runs]
        RunDir(tmp).write_sweep(_shared_record(record, rules, names))
        manifest = {"shared_from": "a sweep folder, by nsight_magic.share()",
                    "configurations": [names[f] for f in runs], "left_out": left_out,
                    "note": "Each configuration's folder has its own share.json: what was "
                    "rewritten there."}  # fmt: skip
        RunDir(tmp).write_copy(MANIFEST, json.dumps(manifest, indent=2))
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


def _scratch_beside(dest: Path) -> Path:
    """An empty private folder next to ``dest`` (same disk: the final rename is atomic)."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".sharing", dir=dest.parent))
    except OSError as exc:
        raise RunFolderError(
            f"cannot create {dest} ({exc.strerror or exc}); choose a writable folder."
        ) from None


@dataclass
class _Outcome:
    """What the copy did, for ``share.json``."""

    found: Redactions
    left_out: list[str] = field(default_factory=list)  # by design: .nsys-rep, pickles
    skipped: list[str] = field(default_factory=list)  # links, pipes, devices: never read
    env_kept: set[str] = field(default_factory=set)
    env_dropped: set[str] = field(default_factory=set)
    short_names: set[str] = field(default_factory=set)
    as_is: list[str] = field(default_factory=list)

    def manifest(self) -> dict[str, Any]:
        found = self.found
        return {
            "shared_from": "a run folder, by nsight_magic.share()",
            "rewritten": [
                *sorted({label for _, label in [*found.paths, *found.words]}),
                "<redacted> (user/host environment values)",
                "run folder paths -> .",
            ],
            "environment": {
                "kept": sorted(self.env_kept),
                "dropped": sorted(self.env_dropped),
                "rule": "only variables on nsight_magic.run_folders.shared_env's allow-list "
                "(device choice, ranks, library knobs, versions) keep their values; every other "
                "variable's value is left out, and where it also appeared elsewhere it reads "
                f"{DROPPED}",
            },
            "left_out": sorted(self.left_out),
            "skipped": sorted(self.skipped),
            "kept_as_is": self.as_is,
            "binary_reports_keep": sorted(self.short_names),
            "note": "Paths are relative to this folder. The .sqlite/.ncu-rep were rewritten in "
            "place of their strings; the GPU's UUID and the interpreter's location were "
            "dropped. Skipped entries (links, pipes, devices) were neither followed nor read.",
        }


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


def _json_of(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None  # not JSON: copied as text, rewritten like any other


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


def _env_rows(db: sqlite3.Connection, outcome: _Outcome) -> None:
    """The environment nsys recorded, down to the allow-list (see ``shared_env``)."""

    def env_list(text: str) -> str:
        kept, names, dropped = filter_env_list(text)
        outcome.env_kept.update(names)
        outcome.env_dropped.update(dropped)
        return kept

    def env_row(text: str) -> int:
        kept, name = filter_env_row(text)
        (outcome.env_kept if kept else outcome.env_dropped).add(name or "<unnamed>")
        return int(kept)

    db.create_function("nm_env_list", 1, env_list)
    db.create_function("nm_env_row", 1, env_row)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "META_DATA_CAPTURE" in tables:
        db.execute(
            "DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%' "
            "AND NOT nm_env_row(CAST(value AS TEXT))"
        )
    for table in sorted(t for t in tables if t.startswith(_METADATA_TABLES)):
        columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
        for column in columns:
            db.execute(
                f'UPDATE "{table}" SET "{column}" = nm_env_list("{column}") '
                f'WHERE typeof("{column}") = \'text\' AND nm_is_env_list("{column}")'
            )


def _copy_sqlite(
    data: BinaryIO, src: Path, out: Path, rules: Redactions, outcome: _Outcome
) -> None:
    RunDir(out.parent).write_copy(out.name, data)
    try:
        with contextlib.closing(sqlite3.connect(out)) as db:
            db.create_function("nm_redact", 1, rules.text, deterministic=True)
            db.create_function("nm_is_env_list", 1, looks_like_env_list, deterministic=True)
            _env_rows(db, outcome)
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for table in tables:
                columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
                for column in columns:
                    db.execute(
                        f'UPDATE "{table}" SET "{column}" = nm_redact("{column}") '
                        f"WHERE typeof(\"{column}\") = 'text'"
                    )
            db.commit()
            db.execute("VACUUM")  # the old strings must not survive in free pages
    except sqlite3.Error as exc:
        raise CorruptReportError(
            f"{src} cannot be rewritten for sharing ({exc}); it is damaged: export the "
            ".nsys-rep again (nsys export --type sqlite) or share a run without it."
        ) from None


def _copy_parquet(src: Path, out: Path, rules: Redactions, outcome: _Outcome, root: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(mode=PRIVATE_DIR, parents=True)
    for entry in entries(src):
        item = entry.path
        rel = str(item.relative_to(root))
        if entry.skipped:
            outcome.skipped.append(f"{rel} ({entry.skipped})")
            continue
        if entry.is_dir:
            outcome.left_out.append(rel)
            continue
        try:
            data = read_regular(item)
        except OSError as exc:
            outcome.skipped.append(f"{rel} ({getattr(exc, 'what', None) or exc})")
            continue
        if item.suffix != ".parquet":
            RunDir(out).write_copy(item.name, rules.binary(data)[0])
            continue
        try:
            table = pq.read_table(pa.BufferReader(data))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptReportError(
                f"{item} cannot be read for sharing ({type(exc).__name__}: {exc}); the parquet "
                "export is damaged: export the .nsys-rep again (nsys export --type parquetdir) "
                "or share a run without it."
            ) from None
        table = _parquet_env(table, item.stem, outcome)
        for i, column in enumerate(table.schema):
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                values = [None if v is None else rules.text(v) for v in table[i].to_pylist()]
                table = table.set_column(i, column, pa.array(values, type=column.type))
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        RunDir(out).write_copy(item.name, sink.getvalue().to_pybytes())


def _parquet_env(table: Any, name: str, outcome: _Outcome) -> Any:
    """A parquet export's environment rows down to the allow-list, as ``_env_rows`` does."""
    import pyarrow as pa

    if not name.startswith(_METADATA_TABLES) or table.num_rows == 0:
        return table
    columns = {f.name: i for i, f in enumerate(table.schema)}
    if name == "META_DATA_CAPTURE" and {"name", "value"} <= columns.keys():
        keep = []
        rows = zip(table["name"].to_pylist(), table["value"].to_pylist(), strict=True)
        for row_name, value in rows:
            if "ENVIRONMENT_VARIABLE" in str(row_name):
                kept, var = filter_env_row(str(value))
                (outcome.env_kept if kept else outcome.env_dropped).add(var or "<unnamed>")
                keep.append(kept)
            else:
                keep.append(True)
        table = table.filter(pa.array(keep))
    for i, column in enumerate(table.schema):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        values = table[i].to_pylist()
        if not any(isinstance(v, str) and looks_like_env_list(v) for v in values):
            continue
        fixed = []
        for v in values:
            if isinstance(v, str) and looks_like_env_list(v):
                v, names, dropped = filter_env_list(v)
                outcome.env_kept.update(names)
                outcome.env_dropped.update(dropped)
            fixed.append(v)
        table = table.set_column(i, column, pa.array(fixed, type=column.type))
    return table


def _find(src: Path, extra: Iterable[str]) -> Redactions:
    """The paths and names to hide: from the run's meta, the reports and their recorded
    environments, and this machine (the one sharing is usually the one that profiled)."""
    found = Redactions()
    homes = {str(Path.home())}
    users = {getpass.getuser(), os.environ.get("USER", "")}
    hosts = {socket.gethostname(), socket.gethostname().split(".")[0]}
    cwds: set[str] = set()
    env_values: dict[str, str] = {}  # every recorded NAME=value, to find the dropped ones
    for item in walk_folder(src):  # regular files only: no link followed, no pipe opened
        path = item.path
        if item.skipped or item.is_dir:
            continue
        if path.name == RunDir.META and path.parent in (src, *src.glob(f"{RunDir.CHILDREN}/*")):
            meta = RunMeta.from_dict(_dict_of(path))
            if meta.cwd:
                cwds.add(meta.cwd)
            python = Path(meta.python or "/")
            if python.parent.name == "bin":
                found.add_path(python.parent.parent, "<python-env>")
        if path.name == RunDir.ENV:
            env_values.update({str(k): str(v) for k, v in _dict_of(path).items()})
        if path.suffix in (".sqlite", ".ncu-rep", ".log", ".json", ".parquet"):
            text = _bytes_of(path).decode("latin-1")
            homes.update(_HOME.findall(text))
            for name, _, value in _ENV_VALUE.findall(text):
                if name not in ("PWD", "OLDPWD"):
                    (hosts if name in _HOST_ENV else users).add(value)
        if path.suffix == ".sqlite":
            more_hosts, more_users, env = _sqlite_names(path)
            hosts |= more_hosts
            users |= more_users
            env_values.update(env)
        if path.suffix == ".parquet" and path.stem.startswith(_METADATA_TABLES):
            env_values.update(_parquet_env_values(path))
    # this machine's own variables too: a token the notebook has is likely the profiled one's
    for name, value in [*env_values.items(), *os.environ.items()]:
        if not shared_env_keeps(name, value) and name not in _SHELL_BOOKKEEPING:
            found.add_secret(value)
    for home in homes:
        found.add_path(home, "~")
        if Path(home).parent.name == "home":
            users.add(Path(home).name)
    for cwd in cwds:  # after the homes: a cwd under a home reads ~/...
        found.add_path(cwd, "<cwd>")
        for depth, parent in enumerate(Path(cwd).parents, start=1):
            found.add_path(parent, "<cwd>" + "/.." * depth)  # the project around it
    for user in users:
        found.add_word(user, "<user>")
    for host in hosts:
        found.add_word(host, "<host>")
    for word in extra:
        found.add_word(word, "<redacted>")
    return found


def _bytes_of(path: Path) -> bytes:
    try:
        return read_regular(path)
    except OSError:
        return b""  # swapped or unreadable since the walk: the copy skips it too


def _dict_of(path: Path) -> dict[str, Any]:
    value = _json_of(_bytes_of(path))
    return value if isinstance(value, dict) else {}


def _env_pairs(rows: Iterable[tuple[Any, Any]]) -> dict[str, str]:
    """(name, value) rows of an nsys metadata table -> the NAME=value pairs they hold."""
    out: dict[str, str] = {}
    for name, value in rows:
        text = str(value or "")
        if "ENVIRONMENT_VARIABLE" in str(name):
            var, _, val = text.partition("=")
            out[var] = val[1:-1] if len(val) >= 2 and val[0] == val[-1] == '"' else val
        elif looks_like_env_list(text):
            for piece in text.split(";"):
                var, eq, val = piece.partition("=")
                if eq:
                    out[var] = val
    return out


def _sqlite_names(path: Path) -> tuple[set[str], set[str], dict[str, str]]:
    """The host and user names an nsys export records about itself, and its environment."""
    found: dict[str, set[str]] = {"host": set(), "user": set()}
    queries = (
        ("host", "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'"),
        ("host", "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_HOST'"),
        ("user", "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_USER'"),
    )
    env: dict[str, str] = {}
    uri = f"file:{urllib.parse.quote(str(path))}?mode=ro"  # a '?' or '#' in a folder name
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        for kind, query in queries:
            try:
                found[kind].update(str(r[0]) for r in db.execute(query) if r[0])
            except sqlite3.Error:
                continue  # the table is absent in this export
        for table in ("TARGET_INFO_SYSTEM_ENV", "META_DATA_CAPTURE"):
            try:
                env.update(_env_pairs(db.execute(f"SELECT name, value FROM {table}")))
            except sqlite3.Error:
                continue
    return found["host"], found["user"], env


def _parquet_env_values(path: Path) -> dict[str, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(_bytes_of(path)), columns=["name", "value"])
    except (pa.ArrowException, OSError, ValueError, KeyError):
        return {}  # not an nsys name/value table; a damaged one is refused by the copy
    return _env_pairs(zip(table["name"].to_pylist(), table["value"].to_pylist(), strict=True))


__all__ = ["MANIFEST", "Redactions", "share"]
