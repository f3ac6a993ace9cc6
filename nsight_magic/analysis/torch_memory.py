"""What PyTorch's allocator held at the cell's peak (or at its out-of-memory error), from its
snapshot (``reports.torch_memory``): the live tensors, largest first, with the line that made
each.

The allocator's history starts with the cell (``%%nsys --memory``), so tensors made before it
(the model, an earlier cell's data) have no alloc event: they are the blocks alive when the
snapshot was taken that the history never saw allocated, plus those the history saw freed
without an alloc. Both were alive when the cell started; they read ``before the cell``.

Sizes are what each tensor asked for: torch's *requested* bytes (``requested_bytes`` in
``torch.cuda.memory_stats``; the history records no block sizes). Its *allocated* bytes count
whole blocks (rounded up to 512 B, and a block the allocator did not split: up to 1 MiB more
each), and its *reserved* bytes the segments it holds from CUDA (cached free blocks,
fragmentation): nsys's ``gpu_memory()`` sees those segments. An allocation counts as alive from
its ``alloc`` to its ``free_completed`` (the block is back in the cache once the streams that
used it are done).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = [
    "BEFORE_CELL",
    "LIVE_COLUMNS",
    "NO_PYTHON",
    "allocated_timeline",
    "by_line",
    "empty_live",
    "live_at",
]

BEFORE_CELL = "before the cell"
# an allocation with no Python frame: autograd's backward thread, a C++ extension, a hook
NO_PYTHON = "no Python frame (autograd's backward thread, C++)"
LIVE_COLUMNS = ["address", "bytes", "frame", "cell_line", "backtrace", "before_cell"]


def empty_live() -> pd.DataFrame:
    """``live_at``'s frame with no rows."""
    return pd.DataFrame(
        {"address": pd.Series(dtype="int64"), "bytes": pd.Series(dtype="int64"),
         "frame": pd.Series(dtype="str"), "cell_line": pd.Series(dtype="str"),
         "backtrace": pd.Series(dtype="str"),
         "before_cell": pd.Series(dtype="bool")}
    )  # fmt: skip


def _device(frame: pd.DataFrame, device: int) -> pd.DataFrame:
    return frame[frame["device_id"] == device]


def _baseline(events: pd.DataFrame, blocks: pd.DataFrame) -> pd.DataFrame:
    """Allocations alive when the history started: blocks alive at the snapshot that the
    history never allocated, and addresses it freed without allocating them first."""
    allocs = events[events["action"] == "alloc"]
    seen: set[int] = set()
    freed_first: dict[int, int] = {}
    # plain lists: iterating pandas' (Arrow-backed) columns costs ~2 us an element
    for action, address, size in zip(events["action"].tolist(), events["address"].tolist(),
                                     events["bytes"].tolist(), strict=True):  # fmt: skip
        if action == "alloc":
            seen.add(int(address))
        elif action == "free_completed" and int(address) not in seen:
            freed_first.setdefault(int(address), int(size))
    alive = blocks[blocks["state"].isin(("active_allocated", "active_pending_free"))]
    alive = alive[~alive["address"].isin(allocs["address"])]
    rows = [(int(a), int(b), f, c, t) for a, b, f, c, t in
            zip(alive["address"], alive["requested_bytes"], alive["frame"], alive["cell_line"],
                alive["backtrace"], strict=True)]  # fmt: skip
    rows += [(a, b, "", "", "") for a, b in freed_first.items() if a not in set(alive["address"])]
    return pd.DataFrame(rows, columns=["address", "bytes", "frame", "cell_line", "backtrace"])


def allocated_timeline(events: pd.DataFrame, blocks: pd.DataFrame, device: int) -> pd.DataFrame:
    """Torch's allocated bytes after each history event of ``device``: ``seq, action,
    time_ns, bytes_in_use`` (the tensors alive, those made before the cell included)."""
    ev = _device(events, device)
    return _allocated(ev, int(_baseline(ev, _device(blocks, device))["bytes"].sum()))


def _allocated(ev: pd.DataFrame, base: int) -> pd.DataFrame:
    """``allocated_timeline`` of one device's events, ``base`` bytes alive before them."""
    sign = np.where(ev["action"] == "alloc", 1, np.where(ev["action"] == "free_completed", -1, 0))
    use = base + np.cumsum(sign * ev["bytes"].to_numpy(np.int64))
    return pd.DataFrame(
        {
            "seq": ev["seq"].to_numpy(np.int64),
            "action": ev["action"].to_numpy(dtype=object),
            "time_ns": ev["time_ns"].to_numpy(np.float64),
            "bytes_in_use": use.astype(np.int64),
        }
    )


def live_at(
    events: pd.DataFrame, blocks: pd.DataFrame, device: int, at: str = "peak"
) -> tuple[pd.DataFrame, dict[str, object]]:
    """The allocations alive at ``at``: "peak" (the first event where torch's allocated bytes
    were highest) or "oom" (the first out-of-memory event; the peak when there is none).
    Returns (``address, bytes`` (asked for), ``frame`` (the line that made it; "" for one
    made before the cell without history; ``NO_PYTHON`` for one made in the cell with no
    Python on its stack), ``cell_line`` (the notebook line that led there),
    ``backtrace, before_cell`` (bool), largest first; facts: ``bytes_in_use, seq,
    time_ns, at`` ("peak" | "oom"), ``requested_bytes`` (what the failed allocation asked
    for, "oom" only), ``device_free_bytes`` (free on the device then, where torch says))."""
    ev = _device(events, device).reset_index(drop=True)
    base = _baseline(ev, _device(blocks, device))
    timeline = _allocated(ev, int(base["bytes"].sum()))
    facts: dict[str, object] = {"at": "peak"}
    oom = np.flatnonzero(ev["action"].to_numpy(dtype=object) == "oom")
    if at == "oom" and len(oom):
        stop = int(oom[0])
        facts.update(at="oom", requested_bytes=int(ev["bytes"].iloc[stop]))
    elif len(timeline):
        stop = int(np.argmax(timeline["bytes_in_use"].to_numpy()))
    else:
        stop = -1
    live: dict[int, tuple[int, str, str, str, bool]] = {
        int(a): (int(b), str(f), str(c), str(t), True)
        for a, b, f, c, t in zip(base["address"], base["bytes"], base["frame"], base["cell_line"],
                                 base["backtrace"], strict=True)
    }  # fmt: skip
    # the events up to ``stop`` replayed as plain lists: one pandas lookup per event and
    # column took 1.6 s for 26k events (a training step's history; benchmarks P17)
    upto = ev.iloc[: stop + 1]
    columns = [upto[c].tolist() for c in ("action", "address", "bytes", "frame", "cell_line",
                                           "backtrace")]  # fmt: skip
    for action, address, size, frame, cell, back in zip(*columns, strict=True):
        if action == "alloc":
            live[int(address)] = (int(size), frame, cell, back, False)
        elif action == "free_completed":
            live.pop(int(address), None)
    facts["bytes_in_use"] = int(sum(v[0] for v in live.values()))
    facts["seq"] = int(ev["seq"].iloc[stop]) if stop >= 0 else -1
    facts["time_ns"] = float(ev["time_ns"].iloc[stop]) if stop >= 0 else float("nan")
    out = pd.DataFrame(
        [(a, *rest) for a, rest in live.items()], columns=LIVE_COLUMNS
    ).astype({"address": "int64", "bytes": "int64", "frame": "str", "cell_line": "str",
              "backtrace": "str", "before_cell": "bool"})  # fmt: skip
    # made in the cell with no Python frame on its stack (autograd's backward thread, C++):
    # said so, as by_line says it, not a blank row
    out.loc[(out["frame"] == "") & ~out["before_cell"], "frame"] = NO_PYTHON
    out = out.sort_values(["bytes", "address"], ascending=[False, True], kind="stable")
    return out.reset_index(drop=True), facts


def by_line(live: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """The live allocations grouped by the notebook line that led to them (``cell_line``; the
    ``frame`` where no cell line is on the stack; ``before the cell`` for the ones made
    earlier without history; ``NO_PYTHON`` for those made with no Python on the stack):
    ``cell_line, count, bytes, largest_bytes``, most bytes first, ``top`` rows."""
    line = live["cell_line"].where(live["cell_line"] != "", live["frame"])
    unnamed = np.where(live["before_cell"].to_numpy(bool), BEFORE_CELL, NO_PYTHON)
    frame = live.assign(cell_line=line.where(line != "", pd.Series(unnamed, index=live.index)))
    out = frame.groupby("cell_line", sort=False).agg(
        count=("bytes", "size"), bytes=("bytes", "sum"), largest_bytes=("bytes", "max")
    )
    out = out.reset_index().sort_values(["bytes", "cell_line"], ascending=[False, True])
    for c in ("count", "bytes", "largest_bytes"):
        out[c] = out[c].astype("int64")
    return out.head(top).reset_index(drop=True)
