"""What the package knows about itself: its version, and the folder it is imported from.

A leaf (it imports nothing of the package) so that any layer can record the version or start a
child Python that imports this very copy of the package.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__version__ = "0.2.0"


def package_root() -> str:
    """The folder holding the ``nsight_magic`` package (what goes on a child's PYTHONPATH)."""
    return str(Path(__file__).resolve().parent.parent)


def pythonpath_with_package(env: Mapping[str, str]) -> str:
    """``env``'s PYTHONPATH with this package's folder first: a child started from a notebook
    that put the package on ``sys.path`` at runtime (or from a checkout) imports the same copy."""
    return os.pathsep.join(p for p in (package_root(), env.get("PYTHONPATH")) if p)
