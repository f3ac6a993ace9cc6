"""The random streams a cell draws from, taken and given both ways, so a profiled cell draws
what the notebook would have drawn and the notebook's streams advance as if it ran there:
Python's ``random``, NumPy's global generator, torch's CPU generator and, where CUDA is up on
both sides, its CUDA generators. Reading a state draws nothing; a library the side has not
imported is neither read nor imported."""

from __future__ import annotations

import contextlib
import pickle
import random
import sys
import zlib
from typing import Any


def states() -> dict[str, Any]:
    out: dict[str, Any] = {"random": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        with contextlib.suppress(Exception):
            out["numpy"] = np.random.get_state()
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            out["torch"] = torch.random.get_rng_state()
            if torch.cuda.is_initialized():
                out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore(saved: dict[str, Any]) -> None:
    """Give each stream the state ``saved`` has for it (one this side lacks is left)."""
    if "random" in saved:
        random.setstate(saved["random"])
    np = sys.modules.get("numpy")
    if "numpy" in saved and np is not None:
        np.random.set_state(saved["numpy"])
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if "torch" in saved:
        torch.random.set_rng_state(saved["torch"])
    if "cuda" in saved and torch.cuda.is_initialized():
        with contextlib.suppress(Exception):  # another number of devices: left as it is
            torch.cuda.set_rng_state_all(saved["cuda"])


def print_of(saved: dict[str, Any]) -> int:
    """A checksum of ``saved``: equal streams, equal prints (a message need not carry them)."""
    try:
        return zlib.crc32(pickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # a state that does not pickle: never equal, always sent
        return -1
