"""Run folders are private, and a folder is trusted only when it is ours.

Executed notebooks and their run folders are shared. A folder holds pickles (``vars.pkl``) and
scripts that a later re-run would execute, so the runs root and each run folder are created
0700 and the files we write 0600, whatever the umask (what a profiler wrote there is made so
when the run ends, ``make_private``: under umask 0 nsys leaves 0666 reports), and nothing is
unpickled or replayed from a folder that this user does not own or that others can write
(another user could have swapped a file in)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from ..errors import RunFolderError, UntrustedFolderError

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def expand(path: str | Path) -> Path:
    """``~`` and ``~user`` expanded: ``runs_dir='~/x'`` never becomes a literal ``./~``; a
    ``~user`` of no user, or a NUL in the path, is a ``RunFolderError`` naming it (never a
    folder called ``~nosuchuser``, nor a bare ``ValueError`` from the OS call)."""
    text = str(path)
    if "\x00" in text:
        raise RunFolderError(f"the path {text!r} holds a NUL character; remove it.")
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        user = expanded[1:].split("/", 1)[0]
        raise RunFolderError(
            f"{text}: there is no user {user!r} on this machine to expand ~{user} for; give the "
            "folder's full path."
        )
    return Path(expanded)


def check_owned(path: str | Path) -> None:
    """Raise ``UntrustedFolderError`` naming ``path`` unless this user owns it and neither
    its group nor others may write it."""
    path = Path(path)
    try:
        info = path.lstat()
    except OSError as exc:
        raise RunFolderError(f"{path} cannot be read ({exc.strerror or exc}).") from None
    if stat.S_ISLNK(info.st_mode):
        raise UntrustedFolderError(
            f"{path} is a symbolic link; nothing is replayed through it. Open the folder it "
            "points to, or pass trust=True if you trust it."
        )
    if info.st_uid != os.geteuid():
        raise UntrustedFolderError(
            f"{path} belongs to another user (uid {info.st_uid}); nothing in it is unpickled "
            "or replayed. Copy the folder to one of your own, or pass trust=True if you trust it."
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UntrustedFolderError(
            f"{path} can be written by others (mode {stat.filemode(info.st_mode)}); nothing in "
            f"it is unpickled or replayed. Run `chmod go-w {path}`, or pass trust=True."
        )


def check_tree_owned(run_dir: str | Path, names: tuple[str, ...] = ()) -> None:
    """``check_owned`` for a run folder and the files ``names`` in it that exist."""
    run_dir = Path(run_dir)
    check_owned(run_dir)
    for name in names:
        if (run_dir / name).exists() or (run_dir / name).is_symlink():
            check_owned(run_dir / name)


def private_root(root: str | Path) -> Path:
    """The runs root, created 0700 when missing (parents too); an existing one must be ours
    and not writable by others (``UntrustedFolderError``), and a file, a read-only disk or a
    full disk give one ``RunFolderError`` line. Returned absolute: a relative ``runs_dir`` is
    taken from the current directory once, and the paths a run records (its variables file,
    replayed by workers that follow the notebook's ``%cd``) keep meaning the same folder."""
    root = expand(root).absolute()
    try:
        root.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    except FileExistsError:
        raise RunFolderError(f"runs_dir {root} is a file, not a folder; choose another.") from None
    except NotADirectoryError:
        raise RunFolderError(
            f"runs_dir {root} has a file where a folder should be; choose another."
        ) from None
    except OSError as exc:
        raise RunFolderError(
            f"runs_dir {root} cannot be created ({exc.strerror or exc}); choose a writable "
            "folder with %nsight_session runs_dir=PATH."
        ) from None
    check_owned(root)
    return root


def make_private(root: str | Path) -> None:
    """Every folder and regular file under ``root`` (never through a symlink) this user's
    only: its group and others bits cleared, the owner's kept. For what other programs wrote
    into a run folder under the notebook's umask (nsys's .nsys-rep, ncu's .ncu-rep, a rank's
    status file: 0666 under umask 0). A file that is not ours to change is left as it is."""
    for folder, dirs, files in os.walk(root):  # os.walk does not descend into symlinks
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            with contextlib.suppress(OSError):
                info = os.lstat(name)
                if (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)) and (
                    info.st_mode & 0o077
                ):
                    os.chmod(name, stat.S_IMODE(info.st_mode) & 0o700)


def private_mkdir(path: Path) -> None:
    """``mkdir`` 0700 that fails on an existing path (``FileExistsError``), other errors as
    one ``RunFolderError`` line."""
    try:
        path.mkdir(mode=PRIVATE_DIR, exist_ok=False)
    except FileExistsError:
        raise
    except OSError as exc:
        raise RunFolderError(
            f"cannot create the run folder {path} ({exc.strerror or exc}); check that its "
            "disk is writable and not full."
        ) from None
