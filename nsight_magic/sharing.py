"""A share-safe copy of a run folder: ``nsight_magic.share(run_dir, dest)``.

A run folder records where and by whom it ran: the absolute cwd, the interpreter's path, the
host name, and the profiled process's whole environment (nsys and ncu store it in their reports:
``TARGET_INFO_SYSTEM_ENV``, ``META_DATA_CAPTURE``, ``StringIds`` of the export; the
``.ncu-rep``'s process record). The copy keeps what reproducing or reading the run needs (the
cell, setup cells, options and argv, tool, driver and library versions, GPU name, clocks and
memory, every timing and the report data) and rewrites the rest:

- the run folder's own path (absolute or cwd-relative) becomes ``.`` (``../..`` for a picker
  child's parent), so the copy's paths are relative to it;
- the cwd, the interpreter's environment and home directories become ``<cwd>``,
  ``<python-env>``, ``~``; user and host names (this machine's and those the reports and their
  recorded environments name) become ``<user>`` / ``<host>``; ``USER``/``HOSTNAME``-like
  environment values become ``<redacted>``; the GPU's UUID is dropped;
- left out: the ``.nsys-rep`` (compressed by nsys, so it cannot be rewritten; its export, the
  ``.sqlite`` or ``_pq`` folder, is what ``load_run`` reads) unless ``keep_nsys_rep=True``, and
  ``vars.pkl`` (pickled notebook variables: the user's data, and unsafe to unpickle).

Reports are rewritten, never hand-built: SQLite through ``sqlite3``, parquet through pyarrow,
the ``.ncu-rep`` by replacing each found string with one of the same length (its records keep
their sizes; the copy is checked to load). ``share.json`` in the copy says what was done.
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ReportNotFoundError
from .run_dir import RunDir, read_json

MANIFEST = "share.json"
_TEXT_SUFFIXES = {".json", ".log", ".txt", ".csv", ".md", ".out", ".err", ".yaml", ".toml", ""}
_ENV_NAMES = ("USER", "USERNAME", "LOGNAME", "HOSTNAME", "HOST", "CONTAINER_NAME", "SSH_CLIENT",
              "SSH_CONNECTION", "MAIL", "JPY_USER", "PWD", "OLDPWD")  # fmt: skip
_HOST_ENV = ("HOSTNAME", "HOST", "CONTAINER_NAME")
# top-level folders every machine has: never redacted as such (what is under them may be)
_SYSTEM_DIRS = {"/usr", "/opt", "/tmp", "/etc", "/var", "/bin", "/lib", "/sbin", "/work", "/home",
                "/mnt", "/srv", "/data", "/proc", "/sys", "/dev", "/run"}  # fmt: skip
_ENV_VALUE = re.compile(
    r"(?<![A-Za-z0-9_])(" + "|".join(_ENV_NAMES) + r")=(\"?)([^;\x00\"\n\r\t ]+)"
)
_HOME = re.compile(r"(?<![A-Za-z0-9_])HOME=\"?(/[^;\x00\"\n\r\t :]+)")
_PATH_CHARS = r"[^\s\"'=:;,\x00\[\]()]"
# a short name could be any two bytes of a binary report: only longer ones are searched there
_MIN_BINARY_WORD = 4


@dataclass
class Redactions:
    """What to rewrite, found in the run folder and on this machine (never written out)."""

    own_names: list[tuple[str, str]] = field(default_factory=list)  # run folder name -> "."
    paths: list[tuple[str, str]] = field(default_factory=list)  # absolute prefix -> label
    words: list[tuple[str, str]] = field(default_factory=list)  # user/host name -> label

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
        identifier of the user's code that happens to equal a user name is touched."""
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
    for nsys-ui, as it is (it still names the host and holds the environment)."""
    src = Path(run_dir)
    if not RunDir(src).meta.is_file():
        raise ReportNotFoundError(f"{src} is not a run folder (no {RunDir.META}).")
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} exists; share() writes a new folder.")
    found = _find(src, extra=redact)
    left_out: list[str] = []
    short_names: set[str] = set()
    for folder in [src, *(child.path for child in RunDir(src).children())]:
        target = dest / folder.relative_to(src)
        own = [(folder.name, "."), *([(src.name, "../..")] if folder != src else [])]
        rules = Redactions(own, found.paths, found.words)
        left_out += _copy_folder(folder, target, rules, keep_nsys_rep, short_names, src)
    manifest = {
        "shared_from": "a run folder, by nsight_magic.share()",
        "rewritten": [
            *sorted({label for _, label in [*found.paths, *found.words]}),
            "<redacted> (user/host environment values)",
            "run folder paths -> .",
        ],
        "left_out": sorted(left_out),
        "binary_reports_keep": sorted(short_names),
        "note": "Paths are relative to this folder. The .sqlite/.ncu-rep were rewritten in "
        "place of their strings; the GPU's UUID and the interpreter's location were dropped.",
    }
    RunDir(dest).write_copy(MANIFEST, json.dumps(manifest, indent=2))
    return dest


def _copy_folder(
    folder: Path, target: Path, rules: Redactions, keep_nsys_rep: bool, kept: set, root: Path
) -> list[str]:
    target.mkdir(parents=True)
    copy = RunDir(target)  # writes each rewritten file, 0600
    left_out = []
    for item in sorted(folder.iterdir()):
        out = target / item.name
        rel = str(item.relative_to(root))
        if item.name == RunDir.CHILDREN and item.is_dir():
            continue  # picker runs: their own folders, from share()
        if item.name.endswith(".lock") or item.name.startswith("."):
            continue
        if (item.suffix == ".nsys-rep" and not keep_nsys_rep) or item.name == RunDir.VARS:
            left_out.append(rel)
        elif item.is_dir() and item.name.endswith("_pq"):
            _copy_parquet(item, out, rules)
        elif item.suffix == ".sqlite":
            _copy_sqlite(item, out, rules)
        elif item.suffix == ".ncu-rep":
            data, short = rules.binary(item.read_bytes())
            copy.write_copy(item.name, data)
            kept.update(short)
        elif item.suffix == ".json" and (data := read_json(item)) is not None:
            copy.write_copy(item.name, json.dumps(_json(data, rules, item.name), indent=2))
        elif item.suffix == ".py":
            copy.write_copy(item.name, rules.text(item.read_text(errors="replace"), code=True))
        elif item.is_file() and item.suffix in _TEXT_SUFFIXES:
            copy.write_copy(item.name, rules.text(item.read_bytes().decode(errors="replace")))
        elif item.is_file() and item.suffix != ".nsys-rep":
            data, short = rules.binary(item.read_bytes())  # any other file: string for string
            copy.write_copy(item.name, data)
            kept.update(short)
        elif item.is_file():
            shutil.copy2(item, out)  # keep_nsys_rep: as it is, by request
        else:
            left_out.append(rel)
    return left_out


def _json(value: Any, rules: Redactions, name: str) -> Any:
    if name == RunDir.META and isinstance(value, dict):
        value = dict(value)
        value["cwd"] = None  # a re-run uses the reader's cwd
        if value.get("python"):
            value["python"] = Path(str(value["python"])).name  # found on the reader's PATH
        for gpu in value.get("gpus") or []:
            if isinstance(gpu, dict):
                gpu.pop("uuid", None)
    return _walk(value, rules.text)


def _walk(value: Any, fix: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fix(value)
    if isinstance(value, list):
        return [_walk(v, fix) for v in value]
    if isinstance(value, dict):  # env.json and the like: KEY -> value
        return {k: "<redacted>" if k in _ENV_NAMES else _walk(v, fix) for k, v in value.items()}
    return value


def _copy_sqlite(src: Path, out: Path, rules: Redactions) -> None:
    shutil.copyfile(src, out)
    with contextlib.closing(sqlite3.connect(out)) as db:
        db.create_function("nm_redact", 1, rules.text, deterministic=True)
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


def _copy_parquet(src: Path, out: Path, rules: Redactions) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True)
    for item in sorted(src.iterdir()):
        if item.suffix != ".parquet":
            shutil.copy2(item, out / item.name)
            continue
        table = pq.read_table(item)
        for i, column in enumerate(table.schema):
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                values = [None if v is None else rules.text(v) for v in table[i].to_pylist()]
                table = table.set_column(i, column, pa.array(values, type=column.type))
        pq.write_table(table, out / item.name)


def _find(src: Path, extra: Iterable[str]) -> Redactions:
    """The paths and names to hide: from the run's meta, the reports and their recorded
    environments, and this machine (the one sharing is usually the one that profiled)."""
    found = Redactions()
    homes = {str(Path.home())}
    users = {getpass.getuser(), os.environ.get("USER", "")}
    hosts = {socket.gethostname(), socket.gethostname().split(".")[0]}
    cwds: set[str] = set()
    for folder in [RunDir(src), *RunDir(src).children()]:
        meta = folder.read_meta()
        if meta.cwd:
            cwds.add(meta.cwd)
        python = Path(meta.python or "/")
        if python.parent.name == "bin":
            found.add_path(python.parent.parent, "<python-env>")
    for path in src.rglob("*"):
        if path.is_file() and path.suffix in (".sqlite", ".ncu-rep", ".log", ".json", ".parquet"):
            text = path.read_bytes().decode("latin-1")
            homes.update(_HOME.findall(text))
            for name, _, value in _ENV_VALUE.findall(text):
                if name not in ("PWD", "OLDPWD"):
                    (hosts if name in _HOST_ENV else users).add(value)
        if path.suffix == ".sqlite":
            more_hosts, more_users = _sqlite_names(path)
            hosts |= more_hosts
            users |= more_users
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
    for item in extra:
        found.add_word(item, "<redacted>")
    return found


def _sqlite_names(path: Path) -> tuple[set[str], set[str]]:
    """The host and user names an nsys export records about itself."""
    found: dict[str, set[str]] = {"host": set(), "user": set()}
    queries = (
        ("host", "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'"),
        ("host", "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_HOST'"),
        ("user", "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_USER'"),
    )
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        for kind, query in queries:
            try:
                found[kind].update(str(r[0]) for r in db.execute(query) if r[0])
            except sqlite3.Error:
                continue  # the table is absent in this export
    return found["host"], found["user"]


__all__ = ["MANIFEST", "Redactions", "share"]
