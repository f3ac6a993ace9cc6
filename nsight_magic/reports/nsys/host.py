"""Loaders of the host-side tables that ``%%nsys --host`` adds: OS runtime calls (OSRT_API) and
the Python backtraces of ``--python-sampling`` / ``--python-backtrace=cuda`` (NVTX marks whose
extended payload holds the frames). One pure function per exporter table, its schema (export
schema 3.20, Nsight Systems 2025.3) quoted in the docstring; each returns a frame sorted by
start with ``pid, tid``."""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Callable

import numpy as np
import pandas as pd

from ...analysis.keyjoin import first_match
from ...vocabulary.code_files import ANY_CELL_FILE, frame_label
from .columns import Spec, split_global_id, to_frame
from .cupti import sort_by_start
from .nvtx_events import NVTX_DOMAIN_CREATE
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
# (--python-backtrace=cuda, taken at a CUDA call). The frames are the mark's payload, present
# only in a SQLite export made with ``--include-json=true`` (a plain export leaves it NULL).
# Measured (Nsight Systems 2025.3.1, tests/data/idle_*.sqlite), jsonText is
#   {"Python Periodic Sampling": {"Thread state ID": 1, "Thread state": "Running",
#    "Frames count": 3, "Frames": [{"Function": 65, "File": 66, "Line": 65}, ...]}}
# with Function and File as StringIds ids, and the innermost frame first.
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
_CELL_FILE = ANY_CELL_FILE  # any notebook cell's code (code_files)
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "<string>")
SAMPLE_COLUMNS = ["kind", "start_ns", "pid", "tid", "frame", "backtrace"]


def _empty_samples() -> pd.DataFrame:
    return pd.DataFrame(
        {
            c: pd.Series([], dtype="str" if c in ("kind", "frame", "backtrace") else "int64")
            for c in SAMPLE_COLUMNS
        }
    )


def _frames(data: object) -> list[dict[str, object]]:
    """The ``Frames`` list of a payload (under its domain's key), innermost first."""
    if isinstance(data, dict):
        frames = data.get("Frames")
        if isinstance(frames, list):
            return [f for f in frames if isinstance(f, dict)]
        for value in data.values():
            found = _frames(value)
            if found:
                return found
    return []


def frames_of(payload: str, text_of: Callable[[object], str]) -> tuple[str, str]:
    """(user frame, backtrace) of one sample's JSON payload, ``text_of`` resolving the Function
    and File ids. The user frame is the innermost one outside libraries (site-packages, the
    standard library), else the innermost; each frame reads ``file:line function`` (file by
    its name); the backtrace is innermost first, joined by " < "."""
    try:
        frames = _frames(json.loads(payload))
    except (TypeError, ValueError):
        return "", ""
    if not frames:
        return "", ""
    files = [text_of(f.get("File", "")) for f in frames]
    texts = [_frame_text(file, f.get("Line", "?"), text_of(f.get("Function", "")))
             for f, file in zip(frames, files, strict=True)]  # fmt: skip
    user = next(
        (
            t
            for file, t in zip(files, texts, strict=True)
            if not file.startswith(_LIBRARY) and not any(m in file for m in _LIBRARY)
        ),
        texts[0],
    )
    return user, " < ".join(texts)


def _frame_text(file: str, line: object, function: str) -> str:
    """``file:line function`` (the file by its name); code of a notebook cell names that cell
    and line (``vocabulary/code_files.py``): ``cell L3`` (the profiled cell), ``setup 'data'
    L5 __getitem__`` (a setup cell's, replayed or sent by value; a line of a setup cell is never
    a line of the profiled cell), ``In [7] L2 forward`` (an ordinary cell's, sent by value)."""
    return frame_label(file, line, function)


def _resolver(table: StringTable) -> Callable[[object], str]:
    @functools.cache
    def text_of(value: object) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            value = table.take(np.array([value], dtype=np.int64)).to_pylist()[0] or ""
        return html.unescape(str(value))  # nsys stores "&lt;module&gt;"

    return text_of


def load_python_samples(src: ExportSource, strings: StringTable | None = None) -> pd.DataFrame:
    """NVTX_EVENTS marks of nsys's Python sampling::

        start INTEGER NOT NULL, eventType INTEGER NOT NULL (34 = NvtxMark), globalTid INTEGER,
        domainId INTEGER (the domain-create row, eventType 75, names it), jsonTextId INTEGER
        -- StringIds, jsonText TEXT (the payload as JSON, ``--include-json=true`` exports)

    -> ``kind`` ("periodic" | "cuda"), ``start_ns, pid, tid, frame`` (``frames_of``),
    ``backtrace``, sorted by start; empty without Python sampling or payloads."""
    if not src.has("NVTX_EVENTS"):
        return _empty_samples()
    table = load_string_table(src) if strings is None else strings
    raw = src.read_columns(
        "NVTX_EVENTS", _MARKS, where=("eventType", (NVTX_MARK, NVTX_DOMAIN_CREATE))
    )
    ints, texts = raw.ints, raw.texts
    etype, domain_id = ints["eventType"], ints["domainId"]
    all_pid, _ = split_global_id(ints["globalTid"])
    # Domains are per process: (pid, domainId) -> kind. In a report of several processes, one
    # process's id for nsys's Python domain can be another's id for a user domain.
    domain_text = texts["text"].to_pylist()
    dom_rows = np.flatnonzero(etype == NVTX_DOMAIN_CREATE)
    dom_kinds = [PYTHON_DOMAINS.get(domain_text[i] or "", "") for i in dom_rows]
    if not any(dom_kinds):
        return _empty_samples()
    dom = first_match(all_pid[dom_rows], domain_id[dom_rows], all_pid, domain_id)
    kinds = np.array([*dom_kinds, ""], dtype=object)[np.where(dom >= 0, dom, len(dom_rows))]
    keep = (etype == NVTX_MARK) & (kinds != "")
    rows = np.flatnonzero(keep)
    inline: list[str] = [texts["jsonText"][int(i)].as_py() or "" for i in rows]
    ids = ints["jsonTextId"][rows]
    stored = np.asarray(table.take(np.where(ids >= 0, ids, 0)).to_pylist(), dtype=object)
    payloads = [
        p if p else (s if i >= 0 else "") for p, s, i in zip(inline, stored, ids, strict=True)
    ]
    text_of, seen = _resolver(table), {}  # samples repeat: parse each payload once
    parsed = []
    for p in payloads:
        if p not in seen:
            seen[p] = frames_of(p, text_of) if p else ("", "")
        parsed.append(seen[p])
    pid, tid = split_global_id(ints["globalTid"][rows])
    out = pd.DataFrame(
        {
            "kind": pd.array(kinds[rows].tolist(), dtype="str"),
            "start_ns": ints["start"][rows],
            "pid": pid,
            "tid": tid,
            "frame": pd.array([u for u, _ in parsed], dtype="str"),
            "backtrace": pd.array([s for _, s in parsed], dtype="str"),
        }
    )
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)
