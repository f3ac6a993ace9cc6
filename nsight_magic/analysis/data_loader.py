"""A thread waiting for a PyTorch ``DataLoader``, named as such in the Idle tab.

A loop fed by a ``DataLoader`` with worker processes spends its idle time in the main thread's
``poll`` on the loader's queue (measured: 54% of a loader-bound loop's GPU idle time), which the
OS runtime trace alone calls "waiting in poll". nsys's Python samples (``--python-sampling``)
say what the thread was doing there: their backtrace runs through torch's
``torch/utils/data/dataloader.py``. :func:`loader_activity` reads that backtrace and names
the wait: waiting for the next batch (the workers fill the queue), starting the workers,
or stopping them. Pure functions over the sample frames (``reports.nsys.host``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = [
    "LOADER_ACTIVITIES",
    "is_loader_frame",
    "loader_activity",
    "loader_call_frames",
    "loader_frames",
]

_FILE = "dataloader.py:"
WAITING = "waiting for the DataLoader's next batch (its worker processes fill its queue)"
STARTING = "starting the DataLoader's worker processes"
STOPPING = "stopping the DataLoader's worker processes"
LOADER_ACTIVITIES = (WAITING, STARTING, STOPPING)
# dataloader.py functions -> what the thread was doing (checked innermost first)
_FUNCTIONS = {
    "_try_get_data": WAITING,
    "_get_data": WAITING,
    "_next_data": WAITING,
    "__next__": WAITING,
    "_shutdown_workers": STOPPING,
    "__del__": STOPPING,
    "_get_iterator": STARTING,
    "__iter__": STARTING,
    "__init__": STARTING,
}


def loader_activity(backtrace: str) -> str:
    """What a sampled thread was doing in a DataLoader, from its backtrace (innermost first,
    frames ``file:line function`` joined by " < ", as ``host.frames_of`` writes them): one of
    :data:`LOADER_ACTIVITIES`, or "" when no DataLoader frame is on the stack."""
    if _FILE not in backtrace:
        return ""
    for frame in backtrace.split(" < "):
        if frame.startswith(_FILE):
            function = frame.rsplit(" ", 1)[-1]
            if function in _FUNCTIONS:
                return _FUNCTIONS[function]
    return ""


def is_loader_frame(frame: str) -> bool:
    return frame in LOADER_ACTIVITIES


def loader_frames(samples: pd.DataFrame) -> pd.Series:
    """``samples``' ``frame`` with the DataLoader's activity in place of a frame where the
    backtrace runs through the loader (the user's frame is then the loop's line, which says
    less than "waiting for the DataLoader's next batch")."""
    activity = samples["backtrace"].astype(str).map(loader_activity)
    return activity.where(activity != "", samples["frame"].astype(str))


def loader_call_frames(calls: pd.DataFrame, samples: pd.DataFrame | None) -> np.ndarray:
    """For each OS call (``pid, tid, start_ns, end_ns``), the DataLoader activity of the first
    periodic Python sample its thread took during the call ("" when none, or not in a
    loader): a ``poll`` under ``_try_get_data`` is the wait for the loader's queue."""
    out = np.full(len(calls), "", dtype=object)
    if samples is None or samples.empty or calls.empty:
        return out
    activity = samples["backtrace"].astype(str).map(loader_activity)
    mine = samples[(activity != "").to_numpy()].assign(activity=activity[activity != ""])
    if mine.empty:
        return out
    keys = [k for k in ("report", "pid", "tid") if k in calls and k in mine]
    where = calls[keys].reset_index(drop=True)
    for key, sm in mine.sort_values("start_ns").groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        rows = np.flatnonzero(
            np.all([where[k].to_numpy() == v for k, v in zip(keys, key, strict=True)], axis=0)
        )
        if not len(rows):
            continue
        t = sm["start_ns"].to_numpy(np.int64)
        # the first sample at or after each call's start, if it falls before the call's end
        first = np.searchsorted(t, calls["start_ns"].to_numpy(np.int64)[rows], side="left")
        end = calls["end_ns"].to_numpy(np.int64)[rows]
        inside = first < len(t)
        inside[inside] = t[first[inside]] < end[inside]
        out[rows[inside]] = sm["activity"].to_numpy(dtype=object)[first[inside]]
    return out
