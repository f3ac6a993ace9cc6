"""Ship named notebook variables into the profiled script (``--vars a,b``).

One pickle file maps name -> (kind, blob). Torch tensors and modules go through
``torch.save`` (dtype and device kept: a cuda tensor loads back on cuda); everything else
through cloudpickle, which also carries classes and functions defined in the notebook.
The script's loader (in ``script.py``) needs only pickle, plus torch for torch entries.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import NsightMagicError, UnpicklableVariableError


def parse_names(spec: str | Iterable[str]) -> list[str]:
    """``"a, b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (order kept, duplicates dropped)."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in (s.strip() for s in items):
        if item and item not in names:
            if not item.isidentifier():
                raise NsightMagicError(f"--vars: {item!r} is not a variable name.")
            names.append(item)
    return names


def _is_torch(obj: Any) -> bool:
    mod = type(obj).__module__ or ""
    if not (mod.startswith("torch") or _is_module(obj)):
        return False
    try:
        import torch
    except ImportError:
        return False
    return isinstance(obj, torch.Tensor | torch.nn.Module)


def _is_module(obj: Any) -> bool:
    # a notebook-defined nn.Module subclass lives in __main__, not torch.*
    return any(
        c.__module__ == "torch.nn.modules.module" and c.__name__ == "Module"
        for c in type(obj).__mro__
    )


def serialize(name: str, obj: Any) -> tuple[str, bytes]:
    """(kind, blob) for one variable; UnpicklableVariableError naming it when it cannot go."""
    import cloudpickle

    try:
        if _is_torch(obj):
            import torch

            buf = io.BytesIO()
            # cloudpickle as the pickler: notebook-defined module classes go by value
            torch.save(obj, buf, pickle_module=cloudpickle)
            return "torch", buf.getvalue()
        return "pickle", cloudpickle.dumps(obj)
    except Exception as exc:
        raise UnpicklableVariableError(
            f"--vars: variable {name!r} ({type(obj).__name__}) cannot be pickled ({exc}). "
            f"Create it in a %%nsight_setup cell instead, so the profiled script builds it "
            f"itself."
        ) from exc


def pack_vars(names: Iterable[str], user_ns: Mapping[str, Any]) -> bytes:
    """Serialize the named variables of ``user_ns`` into one blob (nothing written yet, so a
    failure leaves no run folder behind)."""
    entries: dict[str, tuple[str, bytes]] = {}
    for name in names:
        if name not in user_ns:
            raise NsightMagicError(f"--vars: {name!r} is not defined in the notebook.")
        entries[name] = serialize(name, user_ns[name])
    return pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)


def write_vars(path: str | Path, blob: bytes) -> Path:
    path = Path(path)
    path.write_bytes(blob)
    return path


def load_vars(path: str | Path) -> dict[str, Any]:
    """What the script does, for checking a vars file from Python."""
    with open(path, "rb") as f:
        entries = pickle.load(f)
    out: dict[str, Any] = {}
    for name, (kind, blob) in entries.items():
        if kind == "torch":
            import torch

            out[name] = torch.load(io.BytesIO(blob), weights_only=False)
        else:
            out[name] = pickle.loads(blob)
    return out
