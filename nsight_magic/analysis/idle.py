"""Why the GPU idles: each GPU idle gap split by what the thread that launched the next GPU op
was doing meanwhile, in total, per statement range and per rank.

A gap is a stretch where no op (kernel, copy, set, graph launch) runs on a device: ``gaps.gaps``
with ``per_stream=False`` on that device's ops. Its time goes, instant by instant, to the first that
applies on the launching thread (the thread whose API call launched the op after the gap):

- ``cuda_sync``: inside a CUDA call that waits for the GPU (``is_sync_call``: a synchronize, a
  blocking copy or set, a free);
- ``cuda_api``: inside any other CUDA runtime/driver call (a launch, a pageable async copy that
  stages through the host, an allocation);
- ``os_wait``: inside an OS runtime call (``--trace=osrt``: poll, a lock, a queue read, sleep);
- ``host``: none of these: the thread ran its own code (Python). With ``--host``, Python's
  periodic samples that fell in such time name the lines (``frame``), shared out in proportion
  to their counts (a sampling estimate, as a profiler's flat profile is).

Several ranks add ``collective_wait``: time a rank's NCCL kernel spent waiting for the last
rank to enter the same collective (``collectives``): the GPU is then busy spinning, not
working, and the straggler is named. Percentages are of the scope's idle + collective wait.

Pure functions: frames in (``NsysReport`` frames), frames out; no I/O.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .data_loader import loader_call_frames
from .gaps import busy_intervals
from .keyjoin import first_match, process_ids, process_keys, take_matched
from .statements import statement_lines

__all__ = [
    "CATEGORIES",
    "IDLE_PIECE_COLUMNS",
    "gpu_idle_gaps",
    "host_calls",
    "idle_pieces",
    "is_sync_call",
    "launch_threads",
    "statement_ranges",
    "statements_of",
]

CATEGORIES = ("cuda_sync", "cuda_api", "os_wait", "host", "collective_wait")
_CALL_CATEGORIES = CATEGORIES[:3]  # priority order: a sync inside an OS wait counts as sync
IDLE_PIECE_COLUMNS = [
    "gap",
    "device_id",
    "pid",
    "tid",
    "start_ns",
    "end_ns",
    "duration_ns",
    "category",
    "call",
    "frame",
    "statement",
]
_BLOCKING_COPY_PREFIXES = ("cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset")
_FREES = {"cudaFree", "cudaFreeHost", "cuMemFree", "cuMemFreeHost", "cudaFreeArray"}


def is_sync_call(name: str) -> bool:
    """A CUDA call that returns only once the GPU got somewhere: ``*Synchronize*``, a copy or
    set without ``Async`` (blocking), a free (frees synchronise the device)."""
    if "Synchronize" in name or name in _FREES:
        return True
    return name.startswith(_BLOCKING_COPY_PREFIXES) and "Async" not in name


def _lane_keys(frame: pd.DataFrame) -> list[str]:
    """A device lane: ``(report, device_id)`` in merged multi-report frames, else device."""
    return ["report", "device_id"] if "report" in frame else ["device_id"]


def launch_threads(ops: pd.DataFrame, cuda_api: pd.DataFrame) -> np.ndarray:
    """tid of the call that launched each op (``pid, correlation_id`` joined with the API
    calls, + ``report`` in merged frames; an op's own ``tid`` where it has one); -1 when
    unknown."""
    own = ops["tid"].to_numpy(np.int64) if "tid" in ops else np.full(len(ops), -1, np.int64)
    row = first_match(
        process_ids(cuda_api),
        cuda_api["correlation_id"].to_numpy(np.int64),
        process_ids(ops),
        ops["correlation_id"].to_numpy(np.int64),
    )
    joined = take_matched(cuda_api["tid"].to_numpy(np.int64), row)
    return np.where(own >= 0, own, joined).astype(np.int64)


def gpu_idle_gaps(ops: pd.DataFrame, min_gap_ns: int = 0) -> pd.DataFrame:
    """Idle gaps per device (no op on any stream), longer than ``min_gap_ns``: ``gap`` (id),
    ``device_id`` (+ ``report``, ``rank``), ``start_ns, end_ns, duration_ns``, and the op after
    the gap: ``next_op`` (name), ``pid, tid`` (its launching thread). ``ops``: ``device_id,
    start_ns, end_ns, name, pid, tid`` (+ ``report, rank``). Sorted by start."""
    keys = _lane_keys(ops)
    extra = [c for c in ("rank",) if c in ops]
    parts = []
    for _, lane in ops.sort_values("start_ns", kind="stable").groupby(keys, sort=True):
        s, e = busy_intervals(lane["start_ns"].to_numpy(), lane["end_ns"].to_numpy())
        if len(s) < 2:
            continue
        gs, ge = e[:-1], s[1:]
        keep = ge - gs > min_gap_ns
        gs, ge = gs[keep], ge[keep]
        # the op after the gap: the first op of the lane starting at the gap's end
        first = np.searchsorted(lane["start_ns"].to_numpy(), ge, side="left")
        after = lane.iloc[first]
        part = pd.DataFrame(
            {k: after[k].to_numpy() for k in keys}
            | {"start_ns": gs, "end_ns": ge, "duration_ns": ge - gs}
            | {"next_op": after["name"].astype(str).to_numpy()}
            | {"pid": after["pid"].to_numpy(np.int64), "tid": after["tid"].to_numpy(np.int64)}
            | {c: after[c].to_numpy() for c in extra}
        )
        parts.append(part)
    cols = [*keys, "start_ns", "end_ns", "duration_ns", "next_op", "pid", "tid", *extra]
    if not parts:
        empty = pd.DataFrame({c: np.array([], dtype=np.int64) for c in ["gap", *cols]})
        return empty.assign(next_op=pd.Series([], dtype="str"))
    out = pd.concat(parts, ignore_index=True).sort_values("start_ns", kind="stable")
    out = out.reset_index(drop=True)
    out.insert(0, "gap", np.arange(len(out), dtype=np.int64))
    return out


def host_calls(
    cuda_api: pd.DataFrame,
    osrt: pd.DataFrame | None,
    cuda_frames: pd.DataFrame | None = None,
    periodic: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The host's calls as ``pid, tid, start_ns, end_ns, name, category`` (``cuda_sync``,
    ``cuda_api``, ``os_wait``) + ``frame`` (the Python line that made a CUDA call, from
    ``--python-backtrace=cuda`` samples ``cuda_frames``: ``pid, tid, start_ns, frame``; the
    sample nsys takes right at the call, within 20 us before its start; for an OS call, the
    DataLoader's activity when a periodic sample ``periodic`` (+ ``backtrace``) taken during
    it runs through the loader: ``data_loader.loader_call_frames``) (+ ``report``)."""
    keys = ["report"] if "report" in cuda_api else []
    api = cuda_api[[*keys, "pid", "tid", "start_ns", "end_ns", "name"]].copy()
    names = api["name"].astype(str)
    sync = {n: is_sync_call(n) for n in names.unique()}
    api["category"] = np.where(names.map(sync).to_numpy(bool), "cuda_sync", "cuda_api")
    api["frame"] = _call_frames(api, cuda_frames)
    parts = [api]
    if osrt is not None and len(osrt):
        os_calls = osrt[[*keys, "pid", "tid", "start_ns", "end_ns", "name"]].copy()
        frames = loader_call_frames(os_calls, periodic)
        parts.append(os_calls.assign(category="os_wait", frame=frames))
    out = pd.concat(parts, ignore_index=True)
    # categories: a few dozen names over up to millions of calls (filters and takes stay cheap)
    for col in ("name", "category", "frame"):
        out[col] = pd.Categorical(out[col].astype(str))
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _call_frames(api: pd.DataFrame, frames: pd.DataFrame | None) -> np.ndarray:
    out = np.full(len(api), "", dtype=object)
    if frames is None or frames.empty or api.empty:
        return out
    by = [*process_keys(api, frames), "tid"]
    left = api[[*by, "start_ns"]].reset_index().sort_values("start_ns")
    right = frames[[*by, "start_ns", "frame"]].sort_values("start_ns")
    hit = pd.merge_asof(left, right, on="start_ns", by=by, direction="backward", tolerance=20_000)
    pos = hit["index"].to_numpy()
    out[pos] = hit["frame"].fillna("").astype(str).to_numpy()
    return out


def statement_ranges(nvtx: pd.DataFrame) -> pd.DataFrame:
    """The cell's statement ranges (domain ``nsight_magic``, ``L<n>: ...``) as ``pid, start_ns,
    end_ns, statement`` (+ ``report``). Time outside every statement range (the ``cell`` range
    alone) has no statement: ``statements_of`` gives it ""."""
    is_statement = statement_lines(nvtx).notna().to_numpy()
    keys = ["report"] if "report" in nvtx else []
    cols = [*keys, "pid", "start_ns", "end_ns"]
    labels = nvtx["range"].astype(str)
    out = nvtx.loc[is_statement, cols].assign(statement=labels[is_statement].to_numpy())
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)


def statements_of(
    frame: pd.DataFrame, statements: pd.DataFrame, at: str = "start_ns"
) -> np.ndarray:
    """The statement label each row of ``frame`` (``pid``, ``at``) falls in on its process;
    "" outside every statement (statement ranges of a process do not overlap)."""
    out = np.full(len(frame), "", dtype=object)
    if statements.empty or frame.empty:
        return out
    keys = process_keys(frame, statements)
    where = frame[keys].reset_index(drop=True)
    for key, st in statements.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        rows = np.flatnonzero(
            np.all([where[k].to_numpy() == v for k, v in zip(keys, key, strict=True)], axis=0)
        )
        if not len(rows):
            continue
        t = frame[at].to_numpy()[rows]
        i = _containing(st["start_ns"].to_numpy(), st["end_ns"].to_numpy(), t)
        inside = i >= 0
        out[rows[inside]] = st["statement"].to_numpy()[i[inside]]
    return out


def _containing(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the interval holding each ``t`` among disjoint intervals sorted by start
    (the last one started by ``t``, if it has not ended), -1 if none."""
    if len(starts) == 0:
        return np.full(len(t), -1, dtype=np.int64)
    i = np.searchsorted(starts, t, side="right") - 1
    return np.where((i >= 0) & (ends[np.maximum(i, 0)] > t), i, -1)


def _covering(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index (into the start-sorted arrays) of an interval covering each ``t``, -1 if none:
    among intervals started by ``t``, the one reaching furthest covers ``t`` if any does."""
    if len(starts) == 0:
        return np.full(len(t), -1, dtype=np.int64)
    reach = np.maximum.accumulate(ends)
    best = np.zeros(len(ends), dtype=np.int64)
    grew = np.r_[True, ends[1:] > reach[:-1]]
    best[grew] = np.flatnonzero(grew)
    best = np.maximum.accumulate(best)
    j = np.searchsorted(starts, t, side="right") - 1
    ok = (j >= 0) & (reach[np.maximum(j, 0)] > t)
    return np.where(ok, best[np.maximum(j, 0)], -1)


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` by sorting (numpy 2's hash-based unique was 20x slower on 2M int64s)."""
    v = np.sort(values, kind="stable")
    return v[np.r_[True, v[1:] != v[:-1]]] if len(v) else v


def _thread_pieces(gaps: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """Gaps of one launching thread on one device (disjoint, sorted by start) cut into pieces,
    each with its category and call."""
    gs, ge = gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
    lo, hi = gs.min(), ge.max()
    live = calls[(calls["end_ns"] > lo).to_numpy() & (calls["start_ns"] < hi).to_numpy()]
    points = _sorted_unique(np.concatenate([gs, ge, live["start_ns"].to_numpy(np.int64),
                                            live["end_ns"].to_numpy(np.int64)]))  # fmt: skip
    points = points[(points >= lo) & (points <= hi)]
    left, right = points[:-1], points[1:]
    g = _containing(gs, ge, left)
    in_gap = g >= 0
    left, right, g = left[in_gap], right[in_gap], g[in_gap]
    category = np.full(len(left), "host", dtype=object)
    call = np.full(len(left), "", dtype=object)
    frame = np.full(len(left), "", dtype=object)
    todo = np.ones(len(left), dtype=bool)
    for cat in _CALL_CATEGORIES:
        mine = live[(live["category"] == cat).to_numpy()]
        idx = _covering(
            mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64), left
        )
        hit = todo & (idx >= 0)
        category[hit] = cat
        call[hit] = mine["name"].to_numpy(dtype=object)[idx[hit]]
        frame[hit] = mine["frame"].to_numpy(dtype=object)[idx[hit]]
        todo &= ~hit
    return pd.DataFrame(
        {
            "gap": gaps["gap"].to_numpy()[g],
            "start_ns": left,
            "end_ns": right,
            "category": category,
            "call": call,
            "frame": frame,
        }
    )


def idle_pieces(
    gaps: pd.DataFrame,
    calls: pd.DataFrame,
    statements: pd.DataFrame,
    samples: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(pieces, host_samples). ``pieces``: every gap (``gpu_idle_gaps``) cut where the
    launching thread's calls (``host_calls``) begin and end: ``IDLE_PIECE_COLUMNS`` (+
    ``report, rank``), consecutive pieces of one gap with the same cause merged; ``statement``
    is the statement the thread was in at the piece's start. ``host_samples``: the periodic
    Python samples (``samples``: ``pid, tid, start_ns, frame``) that fell in ``host`` pieces,
    as ``gap, statement, frame`` (+ ``rank``): what the thread ran there."""
    keys = ["report"] if "report" in gaps else []
    parts = []
    thread_keys = [*keys, "pid", "tid"]
    call_groups = dict(list(calls.groupby(thread_keys, sort=False))) if len(calls) else {}
    empty_calls = calls.iloc[:0]
    # per thread AND device: a thread driving two GPUs has two lanes of gaps that overlap in
    # time, and _thread_pieces cuts one lane's disjoint gaps
    for key, g in gaps.groupby([*thread_keys, "device_id"], sort=False):
        piece = _thread_pieces(g, call_groups.get(key[:-1], empty_calls))
        parts.append(piece)
    if parts:
        pieces = pd.concat(parts, ignore_index=True)
    else:
        pieces = pd.DataFrame(
            {c: [] for c in ["gap", "start_ns", "end_ns", "category", "call", "frame"]}
        )
    pieces = _merge_runs(pieces)
    info = [*keys, "gap", "device_id", "pid", "tid", *(["rank"] if "rank" in gaps else [])]
    pieces = pieces.merge(gaps[info], on="gap", how="left")
    pieces["duration_ns"] = (pieces["end_ns"] - pieces["start_ns"]).astype(np.int64)
    pieces["statement"] = statements_of(pieces, statements)
    for col in ("category", "call", "frame", "statement"):
        pieces[col] = pieces[col].astype(str)
    cols = [*keys, *IDLE_PIECE_COLUMNS, *(["rank"] if "rank" in gaps else [])]
    pieces = pieces[cols].sort_values(["start_ns"], kind="stable").reset_index(drop=True)
    return pieces, _host_samples(pieces, samples)


def _merge_runs(p: pd.DataFrame) -> pd.DataFrame:
    if p.empty:
        return p
    p = p.sort_values(["gap", "start_ns"], kind="stable").reset_index(drop=True)
    same = (
        (p["gap"].to_numpy()[1:] == p["gap"].to_numpy()[:-1])
        & (p["category"].to_numpy()[1:] == p["category"].to_numpy()[:-1])
        & (p["call"].to_numpy()[1:] == p["call"].to_numpy()[:-1])
        & (p["end_ns"].to_numpy()[:-1] == p["start_ns"].to_numpy()[1:])
    )
    run = np.cumsum(np.r_[True, ~same])
    return (
        p.groupby(run, sort=False)
        .agg(
            gap=("gap", "first"),
            start_ns=("start_ns", "first"),
            end_ns=("end_ns", "last"),
            category=("category", "first"),
            call=("call", "first"),
            frame=("frame", "first"),
        )
        .reset_index(drop=True)
    )


def _host_samples(pieces: pd.DataFrame, samples: pd.DataFrame | None) -> pd.DataFrame:
    cols = ["gap", "statement", "frame", *(["rank"] if "rank" in pieces else [])]
    if samples is None or samples.empty or pieces.empty:
        return pd.DataFrame({c: pd.Series([], dtype="str") for c in cols})
    host = pieces[(pieces["category"] == "host").to_numpy()]
    rows = []
    keys = [*process_keys(host, samples), "tid"]
    # per device too: a thread's host pieces on two devices overlap in time, and _containing
    # needs disjoint ones; a sample then counts in each device's gap it fell in
    for key, hp in host.groupby([*keys, "device_id"], sort=False):
        mine = np.all([samples[k].to_numpy() == v for k, v in zip(keys, key, strict=False)], axis=0)
        sm = samples[mine]
        if sm.empty:
            continue
        hp = hp.sort_values("start_ns")
        t = sm["start_ns"].to_numpy()
        i = _containing(hp["start_ns"].to_numpy(), hp["end_ns"].to_numpy(), t)
        inside = i >= 0
        hit = hp.iloc[i[inside]]
        rows.append(
            hit[[c for c in cols if c != "frame"]].assign(frame=sm["frame"].to_numpy()[inside])
        )
    if not rows:
        return pd.DataFrame({c: pd.Series([], dtype="str") for c in cols})
    return pd.concat(rows, ignore_index=True)[cols]
