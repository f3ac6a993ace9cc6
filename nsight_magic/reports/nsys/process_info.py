"""What a multi-rank run needs from an nsys export beyond the event frames: thread names (a rank
names its main thread), NVTX payloads (NCCL's ranges carry communicator and message size), the
session's wall-clock start (to put several reports on one clock) and the host name.

Loaders in the style of ``cupti``/``nvtx_events``: one exporter table each, columns typed,
absent table -> empty frame / None. Schemas quoted are export schema 3.20 (Nsight Systems 2025.3).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .columns import Spec, split_global_id, str_series
from .nvtx_events import NVTX_PUSHPOP, NVTX_STARTEND
from .source import ExportSource
from .strings import load_string_table

__all__ = ["load_hostname", "load_nvtx_payloads", "load_session_start_utc_ns", "load_thread_names"]


def load_thread_names(src: ExportSource) -> pd.DataFrame:
    """ThreadNames: ``nameId INTEGER NOT NULL -- StringIds, priority INTEGER,
    globalTid INTEGER`` -> ``pid, tid, name`` (the name a thread last had while traced)."""
    raw = src.read_columns("ThreadNames", {"globalTid": "i", "nameId": "i"})
    pid, tid = split_global_id(raw.ints["globalTid"])
    names = load_string_table(src).take(raw.ints["nameId"])
    return pd.DataFrame({"pid": pid, "tid": tid, "name": str_series(names).to_numpy()})


def load_nvtx_payloads(src: ExportSource) -> pd.DataFrame:
    """NVTX_EVENTS payloads exported as JSON: ``jsonText TEXT`` or ``jsonTextId INTEGER --
    StringIds`` (filled by ``nsys export --include-json=true``; NCCL's ranges carry one) ->
    ``pid, tid, start_ns, payload`` for the ranges that have one; joins ``nvtx()`` rows on
    ``(pid, tid, start_ns)``."""
    kinds = (*NVTX_PUSHPOP, *NVTX_STARTEND)
    spec: Spec = {"start": "i", "globalTid": "i", "jsonText": "s", "jsonTextId": "i"}
    raw = src.read_columns("NVTX_EVENTS", spec, where=("eventType", kinds))
    text = str_series(raw.texts["jsonText"]).to_numpy(dtype=object)
    text_id = raw.ints["jsonTextId"]
    if (text_id >= 0).any():
        by_id = load_string_table(src).take(text_id).to_pylist()
        text = np.where(text_id >= 0, np.asarray(by_id, dtype=object), text)
    keep = np.flatnonzero(text != "")
    pid, tid = split_global_id(raw.ints["globalTid"][keep])
    return pd.DataFrame(
        {
            "pid": pid,
            "tid": tid,
            "start_ns": raw.ints["start"][keep],
            "payload": pd.array(text[keep], dtype="str"),
        }
    )


def load_session_start_utc_ns(src: ExportSource) -> int | None:
    """TARGET_INFO_SESSION_START_TIME: ``utcEpochNs INTEGER`` (the wall clock, ns since the
    Unix epoch, at the session's time 0: every timestamp of the report counts from it)."""
    values = src.read_columns("TARGET_INFO_SESSION_START_TIME", {"utcEpochNs": "i"}).ints[
        "utcEpochNs"
    ]
    return int(values[0]) if len(values) and values[0] >= 0 else None


def load_hostname(src: ExportSource) -> str:
    """TARGET_INFO_SYSTEM_ENV's ``Hostname`` row (``name TEXT, value TEXT``), "" if none."""
    env = src.read("TARGET_INFO_SYSTEM_ENV", {"name": "s", "value": "s"})
    hits = env.loc[env["name"] == "Hostname", "value"]
    return str(hits.iloc[0]) if len(hits) else ""
