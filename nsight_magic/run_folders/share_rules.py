"""What a share-safe copy of a run folder rewrites (``sharing.py``): the names and values found in
the folder and on this machine (``Redactions``: user, host, paths, environment values, secrets,
each with what replaces it), and what the copy did (``_Outcome``, written to ``share.json``)."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import socket
import sqlite3
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .regular_files import read_regular, walk_folder
from .run_dir import RunDir
from .run_meta import RunMeta
from .shared_env import (
    looks_like_env_list,
    shared_env_keeps,
)

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


def _json_of(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None  # not JSON: copied as text, rewritten like any other


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
