"""Loaders of the host-side tables that ``%%nsys --host`` adds: OS runtime calls (OSRT_API) and
the Python backtraces of ``--python-sampling`` / ``--python-backtrace=cuda`` (NVTX marks whose
extended payload holds the frames). One pure function per exporter table, its schema (export
schema 3.20, Nsight Systems 2025.3) quoted in the docstring; each returns a frame sorted by
start with ``pid, tid``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from .columns import Spec, split_global_id, to_frame
from .cupti import sort_by_start
from .source import ExportSource
from .strings import StringTable, load_string_table, require_names

__all__ = [
    "OSRT",
    "OSRT_CALL_CLASS",
    "PYTHON_DOMAINS",
    "frames_of",
    "load_osrt",
    "load_python_samples",
]

OSRT = "OSRT_API"
# OSRT_API.eventClass (ENUM_NSYS_EVENT_CLASS): a call, and a zero-length "[Unknown]" row nsys
# writes when OS runtime tracing starts (not a call: nsys's osrt_sum leaves it out).
OSRT_CALL_CLASS = 27
_OSRT: Spec = {
    "start": "i",
    "end": "i",
    "eventClass": "i",
    "globalTid": "i",
    "nameId": "i",
    "returnValue": "i",
    "nestingLevel": "i",
    "callchainId": "i",
}


def load_osrt(src: ExportSource, strings: StringTable | None = None) -> pd.DataFrame:
    """OSRT_API (OS runtime library calls nsys traced, ``--trace=osrt``)::

        start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
        globalTid INTEGER, nameId INTEGER NOT NULL -- StringIds (function name),
        returnValue INTEGER NOT NULL, nestingLevel INTEGER (zero-based nesting),
        callchainId INTEGER NOT NULL -- OSRT_CALLCHAINS(id)

    -> ``name, start_ns, end_ns, duration_ns, pid, tid, return_value, nesting_level,
    callchain_id``, sorted by start, calls only (eventClass 27, TRACE_PROCESS_EVENT_OS_RUNTIME);
    empty (same columns) without ``--trace=osrt``. nsys records a call only past
    ``--osrt-threshold`` (default 1 us)."""
    table = load_string_table(src) if strings is None else strings
    keep = ("eventClass", lambda c: c == OSRT_CALL_CLASS)
    raw = sort_by_start(src.read_columns(OSRT, _OSRT, keep=keep))
    ints = raw.ints
    names = require_names(src, table, ints["nameId"], f"{OSRT}.nameId")
    pid, tid = split_global_id(ints["globalTid"])
    return to_frame(
        {
            "name": table.take(ints["nameId"], pos=names),
            "start_ns": ints["start"],
            "end_ns": ints["end"],
            "duration_ns": ints["end"] - ints["start"],
            "pid": pid,
            "tid": tid,
            "return_value": ints["returnValue"],
            "nesting_level": ints["nestingLevel"],
            "callchain_id": ints["callchainId"],
        }
    )


# --- Python backtraces: NVTX marks with an extended payload -------------------------------------
# nsys's Python sampling writes one NVTX mark (eventType 34) per sample in the domain
# "Python Periodic Sampling" (--python-sampling) or "Python Backtrace on CUDA"
# (--python-backtrace=cuda, taken at a CUDA call); the frames are the mark's payload
# (schema "Frames": Function, File, Line), present only in a SQLite export made with
# ``--include-json=true`` (jsonText / jsonTextId); a plain export leaves them NULL.
NVTX_MARK = 34
PYTHON_DOMAINS = {"Python Periodic Sampling": "periodic", "Python Backtrace on CUDA": "cuda"}
_MARKS: Spec = {
    "start": "i",
    "eventType": "i",
    "text": "s",
    "globalTid": "i",
    "domainId": "i",
    "jsonTextId": "i",
    "jsonText": "s",
}
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "<string>")
SAMPLE_COLUMNS = ["kind", "start_ns", "pid", "tid", "frame", "stack"]


def _empty_samples() -> pd.DataFrame:
    return pd.DataFrame(
        {
            c: pd.Series([], dtype="str" if c in ("kind", "frame", "stack") else "int64")
            for c in SAMPLE_COLUMNS
        }
    )


def _frame_text(frame: dict[str, object]) -> str:
    file = str(frame.get("File", "") or "")
    name = file.rsplit("/", 1)[-1] if file.startswith("/") else file
    return f"{name}:{frame.get('Line', '?')} {frame.get('Function', '') or ''}".rstrip()


def frames_of(payload: str) -> tuple[str, str]:
    """(user frame, stack) of one sample's JSON payload: the innermost frame outside
    libraries (site-packages, the standard library), else the innermost one, as
    ``file:line function`` (file by name only); the stack innermost first, " < " between."""
    try:
        data = json.loads(payload)
    except (TypeError, ValueError):
        return "", ""
    frames = _find_frames(data)
    if not frames:
        return "", ""
    texts = [_frame_text(f) for f in frames]
    user = next(
        (
            t
            for f, t in zip(frames, texts, strict=True)
            if not any(m in str(f.get("File", "")) for m in _LIBRARY)
        ),
        texts[0],
    )
    return user, " < ".join(texts)


def _find_frames(data: object) -> list[dict[str, object]]:
    """The list of ``{Function, File, Line}`` dicts anywhere in the payload, innermost first."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "Frames" and isinstance(value, list):
                frames = [f for f in value if isinstance(f, dict)]
                return frames[::-1] if FRAMES_OUTERMOST_FIRST else frames
            found = _find_frames(value)
            if found:
                return found
    if isinstance(data, list):
        for item in data:
            found = _find_frames(item)
            if found:
                return found
    return []


FRAMES_OUTERMOST_FIRST = False


def load_python_samples(src: ExportSource, strings: StringTable | None = None) -> pd.DataFrame:
    """NVTX_EVENTS marks of nsys's Python sampling::

        start INTEGER NOT NULL, eventType INTEGER NOT NULL (34 = NvtxMark), globalTid INTEGER,
        domainId INTEGER (the domain-create row, eventType 75, names it), jsonTextId INTEGER
        -- StringIds, jsonText TEXT (the payload as JSON, ``--include-json=true`` exports)

    -> ``kind`` ("periodic" | "cuda"), ``start_ns, pid, tid, frame`` (``frames_of``),
    ``stack``, sorted by start; empty without Python sampling or payloads."""
    if not src.has("NVTX_EVENTS"):
        return _empty_samples()
    table = load_string_table(src) if strings is None else strings
    raw = src.read_columns("NVTX_EVENTS", _MARKS, where=("eventType", (NVTX_MARK, 75)))
    ints, texts = raw.ints, raw.texts
    etype = ints["eventType"]
    domain_text = texts["text"].to_pylist()
    domains = {
        int(d): PYTHON_DOMAINS[t]
        for d, t, e in zip(ints["domainId"], domain_text, etype, strict=True)
        if e == 75 and t in PYTHON_DOMAINS
    }
    if not domains:
        return _empty_samples()
    kinds = np.array([domains.get(int(d), "") for d in ints["domainId"]], dtype=object)
    keep = (etype == NVTX_MARK) & (kinds != "")
    rows = np.flatnonzero(keep)
    inline: list[str] = [texts["jsonText"][int(i)].as_py() or "" for i in rows]
    ids = ints["jsonTextId"][rows]
    stored = np.asarray(table.take(np.where(ids >= 0, ids, 0)).to_pylist(), dtype=object)
    payloads = [
        p if p else (s if i >= 0 else "") for p, s, i in zip(inline, stored, ids, strict=True)
    ]
    parsed = [frames_of(p) if p else ("", "") for p in payloads]
    pid, tid = split_global_id(ints["globalTid"][rows])
    out = pd.DataFrame(
        {
            "kind": pd.array(kinds[rows].tolist(), dtype="str"),
            "start_ns": ints["start"][rows],
            "pid": pid,
            "tid": tid,
            "frame": pd.array([u for u, _ in parsed], dtype="str"),
            "stack": pd.array([s for _, s in parsed], dtype="str"),
        }
    )
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)
