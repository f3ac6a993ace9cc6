"""What a multi-rank run needs from an nsys export beyond the event frames: thread names (a rank
names its main thread), NVTX payloads (NCCL's ranges carry communicator and message size), the
session's wall-clock start (to put several reports on one clock) and the host name.

Loaders in the style of ``tables``: one exporter table each, columns typed, absent table ->
empty frame / None. Schemas quoted are export schema 3.20 (Nsight Systems 2025.3).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import tables

__all__ = ["load_hostname", "load_nvtx_payloads", "load_session_start_utc_ns", "load_thread_names"]


def load_thread_names(src: tables.ExportSource) -> pd.DataFrame:
    """ThreadNames: ``nameId INTEGER NOT NULL -- StringIds, priority INTEGER,
    globalTid INTEGER`` -> ``pid, tid, name`` (the name a thread last had while traced)."""
    raw = src.read_columns("ThreadNames", {"globalTid": "i", "nameId": "i"})
    pid, tid = tables.split_global_id(raw["globalTid"])  # type: ignore[arg-type]
    names = tables.load_string_table(src).take(raw["nameId"])  # type: ignore[arg-type]
    return pd.DataFrame({"pid": pid, "tid": tid, "name": tables.str_series(names).to_numpy()})


def load_nvtx_payloads(src: tables.ExportSource) -> pd.DataFrame:
    """NVTX_EVENTS payloads exported as JSON: ``jsonText TEXT`` or ``jsonTextId INTEGER --
    StringIds`` (filled by ``nsys export --include-json=true``; NCCL's ranges carry one) ->
    ``pid, tid, start_ns, payload`` for the ranges that have one; joins ``nvtx()`` rows on
    ``(pid, tid, start_ns)``."""
    kinds = (*tables.NVTX_PUSHPOP, *tables.NVTX_STARTEND)
    spec: tables.Spec = {"start": "i", "globalTid": "i", "jsonText": "s", "jsonTextId": "i"}
    raw = src.read_columns("NVTX_EVENTS", spec, where=("eventType", kinds))
    text = tables.str_series(raw["jsonText"]).to_numpy(dtype=object)  # type: ignore[arg-type]
    text_id: np.ndarray = raw["jsonTextId"]  # type: ignore[assignment]
    if (text_id >= 0).any():
        by_id = tables.load_string_table(src).take(text_id).to_pylist()
        text = np.where(text_id >= 0, np.asarray(by_id, dtype=object), text)
    keep = np.flatnonzero(text != "")
    pid, tid = tables.split_global_id(raw["globalTid"][keep])  # type: ignore[index]
    return pd.DataFrame(
        {
            "pid": pid,
            "tid": tid,
            "start_ns": raw["start"][keep],  # type: ignore[index]
            "payload": pd.array(text[keep], dtype="str"),
        }
    )


def load_session_start_utc_ns(src: tables.ExportSource) -> int | None:
    """TARGET_INFO_SESSION_START_TIME: ``utcEpochNs INTEGER`` (the wall clock, ns since the
    Unix epoch, at the session's time 0: every timestamp of the report counts from it)."""
    cols = src.read_columns("TARGET_INFO_SESSION_START_TIME", {"utcEpochNs": "i"})
    values: np.ndarray = cols["utcEpochNs"]  # type: ignore[assignment]
    return int(values[0]) if len(values) and values[0] >= 0 else None


def load_hostname(src: tables.ExportSource) -> str:
    """TARGET_INFO_SYSTEM_ENV's ``Hostname`` row (``name TEXT, value TEXT``), "" if none."""
    env = src.read("TARGET_INFO_SYSTEM_ENV", {"name": "s", "value": "s"})
    hits = env.loc[env["name"] == "Hostname", "value"]
    return str(hits.iloc[0]) if len(hits) else ""
