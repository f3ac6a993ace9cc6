"""Process checks the session and runner tests share."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (its /proc state is not "Z")."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
