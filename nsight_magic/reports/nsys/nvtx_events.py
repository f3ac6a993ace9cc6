"""Loader of NVTX_EVENTS: push/pop and start/end ranges with their domain, text and depth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ...analysis.keyjoin import first_match
from ...analysis.nvtx_nesting import nesting_levels
from .columns import Spec, split_global_id, to_frame
from .cupti import read_keyed, sort_by_start
from .source import ExportSource
from .strings import StringTable, load_string_table, require_names

__all__ = ["NVTX_DOMAIN_CREATE", "NVTX_PUSHPOP", "NVTX_STARTEND", "load_nvtx"]

# NVTX_EVENTS.eventType (ENUM_NSYS_EVENT_TYPE): push/pop and start/end ranges, C and NVTXT.
NVTX_PUSHPOP = (59, 70)
NVTX_STARTEND = (60, 71)
NVTX_DOMAIN_CREATE = 75

_NVTX: Spec = {
    "start": "i",
    "end": "i",
    "eventType": "i",
    "text": "s",
    "textId": "i",
    "globalTid": "i",
    "endGlobalTid": "i",
    "domainId": "i",
}
_STYLES = pa.array(["PushPop", "StartEnd"], pa.large_string())


def load_nvtx(src: ExportSource, strings: StringTable | None = None) -> pd.DataFrame:
    """NVTX_EVENTS ranges::

        start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL (59 push/pop,
        60 start/end, 70/71 NVTXT, 75 domain create), rangeId INTEGER, text TEXT,
        globalTid INTEGER, endGlobalTid INTEGER (set when a start/end range ends on another
        thread), textId INTEGER -- StringIds, domainId INTEGER, payload columns...

    -> ``domain`` ("" = default domain), ``range`` (text or StringIds[textId]), ``style``
    ("PushPop"/"StartEnd"), ``start_ns, end_ns, duration_ns, pid, tid, end_tid`` (thread that
    ended it), ``level`` (0 = outermost; depth among the ranges of the same thread, as nsys's
    projection reports compute it), sorted by start. A range never closed gets the last NVTX
    timestamp as end, as nsys's reports do."""
    table = load_string_table(src) if strings is None else strings
    kinds = (*NVTX_PUSHPOP, *NVTX_STARTEND, NVTX_DOMAIN_CREATE)
    raw = sort_by_start(read_keyed(src, "NVTX_EVENTS", _NVTX, where=("eventType", kinds)))
    ints = raw.ints
    etype, gtid, text_id, domain_id = (
        ints["eventType"],
        ints["globalTid"],
        ints["textId"],
        ints["domainId"],
    )
    texts = require_names(src, table, text_id, "NVTX_EVENTS.textId", blank_ok=True)
    pid, tid = split_global_id(gtid)
    registered = text_id >= 0
    text = raw.texts["text"]
    if registered.any():
        text = pc.if_else(pa.array(registered), table.take(text_id, pos=texts), text)
    # Domains are per process: (pid, domainId) -> name; the first creation wins, like nsys.
    is_dom = etype == NVTX_DOMAIN_CREATE
    rng = ~is_dom
    dom_rows = np.flatnonzero(is_dom)
    dom_code = first_match(pid[dom_rows], domain_id[dom_rows], pid[rng], domain_id[rng])
    dom_names = pa.concat_arrays([text.take(pa.array(dom_rows)), pa.array([""], pa.large_string())])
    domain = dom_names.take(pa.array(np.where(dom_code >= 0, dom_code, len(dom_rows))))

    start, end = ints["start"][rng], ints["end"][rng]
    if len(start):
        last = max(int(start.max()), int(end.max()))
        end = np.where(end < 0, last, end)
    end_gtid = ints["endGlobalTid"][rng]
    _, end_tid = split_global_id(np.where(end_gtid < 0, gtid[rng], end_gtid))
    style = np.where(np.isin(etype[rng], NVTX_PUSHPOP), 0, 1)
    out = to_frame(
        {
            "domain": domain,
            "range": text.take(pa.array(np.flatnonzero(rng))),
            "style": _STYLES.take(pa.array(style)),
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,
            "pid": pid[rng],
            "tid": tid[rng],
            "end_tid": end_tid,
        }
    )
    out["level"] = nesting_levels(out)
    return out
