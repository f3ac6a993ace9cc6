"""Reading a run folder without trusting what is in it: only regular files, never through a link.

A run folder may come from someone else (a shared notebook, an unpacked archive) or be edited
by hand: ``ln -s ~/.ssh/id_rsa run/id_rsa`` would make a copy of the folder copy the key, and a
named pipe (``mkfifo run/meta.json``) blocks the first ``read()`` forever. So a file is opened
with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat`` on the open descriptor (no window
between a check and the open for the file to be swapped), and a walk of a folder lists links,
pipes, sockets and devices as skipped instead of following or opening them."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "NotRegularFile",
    "Walked",
    "entries",
    "kind_of",
    "open_regular",
    "read_regular",
    "walk_folder",
]

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


class NotRegularFile(OSError):
    """The path is a link, a pipe, a device or a folder (``what`` says which); never opened
    for reading. An ``OSError``, so callers that treat unreadable files alike need no change."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"{path} is {what}, not a regular file")
        self.path = path
        self.what = what


def kind_of(mode: int) -> str:
    """``"a regular file"`` or what else an ``lstat`` mode is, in words."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular(path: str | Path) -> bytes:
    """The bytes of ``path`` if it is a regular file and not a link; else ``NotRegularFile``
    (a missing file: ``FileNotFoundError``). Never blocks on a pipe."""
    with open_regular(path) as fh:
        return fh.read()


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file and not a link (checked on the open
    descriptor); else ``NotRegularFile``. For a file too large to read at once."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise NotRegularFile(path, "a symbolic link") from None
        if exc.errno == errno.ENXIO:  # a socket
            raise NotRegularFile(path, kind_of(path.lstat().st_mode)) from None
        raise
    fh = os.fdopen(fd, "rb")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        fh.close()
        raise NotRegularFile(path, kind_of(mode))
    os.set_blocking(fd, True)
    return fh


@dataclass(frozen=True)
class Walked:
    """One entry of a folder walk: ``path``, and ``skipped`` ("" to use it, else why not)."""

    path: Path
    is_dir: bool
    skipped: str = ""


def entries(folder: Path) -> list[Walked]:
    """The entries of ``folder`` (not recursive), sorted, each classified by ``lstat``: a link
    is never followed, into a folder or to a file; regular files and real folders are to use,
    the rest come with ``skipped`` saying what they are. A folder that cannot be listed is
    one skipped entry."""
    try:
        with os.scandir(folder) as it:
            found = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        return [Walked(folder, True, f"cannot be listed ({exc.strerror or exc})")]
    out = []
    for entry in found:
        path = Path(entry.path)
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError as exc:
            out.append(Walked(path, False, f"cannot be examined ({exc.strerror or exc})"))
            continue
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            out.append(Walked(path, stat.S_ISDIR(mode)))
        else:
            out.append(Walked(path, False, kind_of(mode)))
    return out


def walk_folder(root: Path) -> Iterator[Walked]:
    """``entries`` of ``root`` and of every real folder under it; folders before their
    contents."""
    for entry in entries(root):
        yield entry
        if entry.is_dir and not entry.skipped:
            yield from walk_folder(entry.path)
