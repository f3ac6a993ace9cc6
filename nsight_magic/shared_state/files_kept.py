"""The files a repeated run (a warm-up, a drill-down's re-run) changes, put back when it ends:
the notebook's run writes them once, as a plain run does.

Python's audit hooks see every ``open`` (``os.open`` too), ``os.remove``, ``os.rename``
(``os.replace``), ``os.truncate``, ``os.mkdir`` and ``os.rmdir``, whatever library calls them
(``torch.save``, ``np.save``, ``pathlib``). Not seen: calls relative to a directory's file
descriptor (``shutil.rmtree``'s unlinks) and writes through a descriptor opened before the run.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, ClassVar

FILE_KEEP_MAX_BYTES = 64 << 20  # a file a repeat writes is put back up to this size
# os.open's flags that change a file (or make one)
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _path(value: Any) -> str | None:
    """An absolute path, or None for what is not one (a file descriptor)."""
    if not isinstance(value, str | bytes | os.PathLike):
        return None
    return os.path.abspath(os.fsdecode(value))


def _no_dir_fd(args: tuple[Any, ...], *at: int) -> bool:
    # the audit events give -1 (or None) for "no directory descriptor"
    return all(len(args) <= i or args[i] in (None, -1) for i in at)


def changed_paths(event: str, args: tuple[Any, ...]) -> tuple[list[str | None], str]:
    """The files an audit event is about to change, and what it does to a directory: ``""``,
    ``"made"`` (``os.mkdir``: ``paths[0]``), ``"removed"`` (``os.rmdir``) or ``"renamed"``
    (``os.rename`` of a directory: ``paths[0]`` to ``paths[1]``)."""
    if event == "open" and len(args) >= 2:
        mode, flags = args[1], args[2] if len(args) > 2 else None
        writes = any(m in mode for m in "wax+") if isinstance(mode, str) else (
            mode is None and isinstance(flags, int) and bool(flags & _WRITES))  # fmt: skip
        return ([_path(args[0])] if writes else []), ""
    if event in ("os.remove", "os.truncate") and _no_dir_fd(args, 1):
        return [_path(args[0])], ""
    if event == "os.rename" and _no_dir_fd(args, 2, 3):
        paths = [_path(args[0]), _path(args[1])]
        return paths, "renamed" if paths[0] and os.path.isdir(paths[0]) else ""
    if event == "os.mkdir" and _no_dir_fd(args, 2):
        return [_path(args[0])], "made"
    if event == "os.rmdir" and _no_dir_fd(args, 1):
        return [_path(args[0])], "removed"
    return [], ""


class FileKeeper:
    """While active, the first change of each file saves it; leaving puts each back (or
    removes a file that was not there), and the directories made or removed. The audit hook
    cannot be removed: it is installed once and does nothing while no keeper is active."""

    active: ClassVar[list[FileKeeper]] = []
    installed: ClassVar[bool] = False

    def __init__(self) -> None:
        self.saved: dict[str, bytes | None] = {}
        self.made_dirs: list[str] = []
        self.removed_dirs: list[str] = []
        self.renamed_dirs: list[tuple[str, str]] = []

    def forget(self) -> None:
        """Nothing is put back: what the run changed stays (a run that is the cell's own)."""
        self.saved.clear()
        self.made_dirs.clear()
        self.removed_dirs.clear()
        self.renamed_dirs.clear()

    def __enter__(self) -> FileKeeper:
        if not FileKeeper.installed:
            sys.addaudithook(FileKeeper._hook)
            FileKeeper.installed = True
        FileKeeper.active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        FileKeeper.active.remove(self)
        for src, dst in reversed(self.renamed_dirs):
            with contextlib.suppress(OSError):
                if os.path.isdir(dst) and not os.path.exists(src):
                    os.rename(dst, src)
        for path in self.removed_dirs:
            with contextlib.suppress(OSError):
                os.makedirs(path, exist_ok=True)
        for path, data in self.saved.items():
            with contextlib.suppress(OSError):
                if data is None:
                    if os.path.isfile(path) or os.path.islink(path):
                        os.unlink(path)
                else:
                    with open(path, "wb") as f:
                        f.write(data)
        for path in reversed(self.made_dirs):
            with contextlib.suppress(OSError):
                os.rmdir(path)  # only when the run left it empty

    def _save(self, paths: list[str | None], directory: str) -> None:
        if directory == "renamed":
            src, dst = paths
            if src and dst and not os.path.exists(dst):
                self.renamed_dirs.append((src, dst))
            return
        for full in paths:
            if full is None:
                continue
            if directory == "made" and not os.path.exists(full):
                self.made_dirs.append(full)
            elif directory == "removed" and os.path.isdir(full):
                self.removed_dirs.append(full)
            elif not directory and full not in self.saved:
                if os.path.isfile(full) and os.path.getsize(full) <= FILE_KEEP_MAX_BYTES:
                    with open(full, "rb") as f:
                        self.saved[full] = f.read()
                elif not os.path.exists(full):
                    self.saved[full] = None

    @staticmethod
    def _hook(event: str, args: tuple[Any, ...]) -> None:
        if not FileKeeper.active:
            return
        paths, directory = changed_paths(event, args)
        if not paths:
            return
        keeper = FileKeeper.active.pop()  # the keeper's own opens are not watched
        try:
            keeper._save(paths, directory)
        except OSError:
            pass
        finally:
            FileKeeper.active.append(keeper)
