"""NCCL collectives of a multi-rank run: one row per collective kernel, per-rank totals, and
rank skew (who entered each collective last, and how late).

The GPU side is the truth: each NCCL kernel (``ncclDevKernel_<Kind>_<op>_<dtype>_<algo>_<proto>``)
is one collective on one rank. NCCL's own NVTX range (domain ``NCCL``, e.g. ``ncclAllReduce``)
around the call that launched it adds what the kernel name lacks: its payload (exported by
``nsys export --include-json=true``) holds ``NCCL communicator ID``, ``Message size [bytes]``
(the rank's buffer as NCCL counts it) and the reduction operation.

Instances are matched across ranks by order: the i-th collective of a kind on a communicator is
one instance on every rank (NCCL requires ranks to issue a communicator's collectives in the
same order). Without communicator ids on every row (no ``--include-json`` export) all
collectives count as one communicator. A rank "enters" a collective when its kernel starts on
the GPU; the kernel then waits for the others, so the spread of starts is the skew and the last
rank to start is the straggler. The spread of ends shows how well clocks agree (ranks of an
all-reduce finish together; a broadcast root may finish first).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from .kernels import as_text
from .ranks import rank_blocks

__all__ = [
    "COLLECTIVE_COLUMNS",
    "SKEW_COLUMNS",
    "collective_summary",
    "collectives",
    "is_nccl_kernel",
    "parse_nccl_kernel",
    "rank_skew",
]

NCCL_DOMAIN = "NCCL"
_KERNEL = re.compile(
    r"^nccl(?:Dev)?Kernel_(?P<kind>[A-Za-z]+)"
    r"(?:_(?P<op>Sum|Prod|Max|Min|Avg|PreMulSum|SumPostDiv))?"
    r"(?:_(?P<dtype>bf16|f8e4m3|f8e5m2|[iuf]\d+))?"
    r"(?:_(?P<algorithm>RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|NVLS_TREE|NVLS|PAT))?"
    r"(?:_(?P<protocol>LL128|LL|SIMPLE))?"
)
_PARTS = ("kind", "op", "dtype", "algorithm", "protocol")
_BYTES = "Message size [bytes]"
_COMM = "NCCL communicator ID"

COLLECTIVE_COLUMNS = [
    "rank",
    "pid",
    "device_id",
    "stream_id",
    "communicator",
    "kind",
    "instance",
    "start_ns",
    "end_ns",
    "duration_ns",
    "bytes",
    "op",
    "dtype",
    "algorithm",
    "protocol",
    "name",
]
SKEW_COLUMNS = [
    "communicator",
    "kind",
    "instance",
    "ranks",
    "bytes",
    "first_rank",
    "last_rank",
    "first_start_ns",
    "last_start_ns",
    "skew_ns",
    "end_spread_ns",
]


def is_nccl_kernel(names: pd.Series) -> np.ndarray:
    """True for NCCL's collective/p2p kernels (``ncclDevKernel_*``, older ``ncclKernel_*``)."""
    text = as_text(names).astype(str)
    return (text.str.startswith("ncclDevKernel_") | text.str.startswith("ncclKernel_")).to_numpy()


def parse_nccl_kernel(name: str) -> dict[str, str]:
    """``kind, op, dtype, algorithm, protocol`` from an NCCL kernel name ("" where absent), e.g.
    ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)`` -> AllReduce, Sum, bf16, RING, LL."""
    m = _KERNEL.match(name)
    if not m:
        return dict.fromkeys(_PARTS, "")
    return {k: m.group(k) or "" for k in _PARTS}


def _payload_fields(text: str) -> tuple[str, int | None, str]:
    """(communicator, bytes, reduction op) from an NCCL NVTX payload JSON ("" / None if absent)."""
    if not text:
        return "", None, ""
    try:
        data = json.loads(text)
    except ValueError:
        return "", None, ""
    if not isinstance(data, dict):
        return "", None, ""
    comm = data.get(_COMM)
    size = data.get(_BYTES)
    return (
        "" if comm is None else str(comm),
        int(size) if isinstance(size, (int, float)) else None,
        str(data.get("Reduction operation", "")),
    )


def _enclosing_range(calls: pd.DataFrame, ranges: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Row in ``ranges`` of the innermost range (latest start) on the same thread that holds
    each call's start; -1 where none does."""
    out = np.full(len(calls), -1, dtype=np.int64)
    if calls.empty or ranges.empty:
        return out
    thread = [*keys, "tid"]
    r = ranges.assign(_row=np.arange(len(ranges)), _t=ranges["start_ns"].astype(np.int64))
    c = calls.assign(_i=np.arange(len(calls)), _t=calls["call_start_ns"].astype(np.int64))
    found = pd.merge_asof(
        c.sort_values("_t", kind="stable"),
        r[[*thread, "_t", "_row", "end_ns"]].sort_values("_t", kind="stable"),
        on="_t",
        by=thread,
        direction="backward",
    )
    ok = found["_row"].notna().to_numpy() & (
        found["end_ns"].to_numpy(dtype=np.float64) >= found["_t"].to_numpy(dtype=np.float64)
    )
    out[found["_i"].to_numpy()[ok]] = found["_row"].to_numpy()[ok].astype(np.int64)
    return out


def collectives(
    kernels: pd.DataFrame,
    launches: pd.DataFrame | None = None,
    nccl_ranges: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per NCCL kernel: ``rank, pid, device_id, stream_id, communicator, kind,
    instance, start_ns, end_ns, duration_ns, bytes, op, dtype, algorithm, protocol, name``
    (+ ``report`` when the frames are merged), sorted by start.

    ``kernels``: ``kernels()`` with ``rank`` (see ``analysis.ranks.add_rank``; NA when absent).
    ``launches``: the launching calls (``start_ns, correlation_id, pid, tid``) and
    ``nccl_ranges``: NCCL's NVTX ranges (``range, start_ns, end_ns, pid, tid, payload``) are
    optional: without them ``communicator`` is "" and ``bytes`` NA. ``instance`` numbers each
    process's collectives per (communicator, kind) in start order (see the module docstring)."""
    keys = ["report", "pid"] if "report" in kernels else ["pid"]
    k = kernels[is_nccl_kernel(kernels["name"])]
    k = k.sort_values(["start_ns", *keys], kind="stable").reset_index(drop=True)
    names = as_text(k["name"]).astype(str)
    parsed = pd.DataFrame([parse_nccl_kernel(n) for n in names], columns=list(_PARTS))
    comm = np.full(len(k), "", dtype=object)
    size = pd.array([None] * len(k), dtype="Int64")
    op = parsed["op"].to_numpy(dtype=object)
    if launches is not None and nccl_ranges is not None and len(k):
        calls = k[[*keys, "correlation_id"]].merge(
            launches[[*keys, "correlation_id", "tid", "start_ns"]]
            .drop_duplicates([*keys, "correlation_id"])
            .rename(columns={"start_ns": "call_start_ns"}),
            on=[*keys, "correlation_id"],
            how="left",
        )
        calls = calls.assign(tid=calls["tid"].fillna(-1).astype(np.int64))
        calls["call_start_ns"] = calls["call_start_ns"].fillna(-1).astype(np.int64)
        ranges = nccl_ranges.reset_index(drop=True)
        row = _enclosing_range(calls, ranges, keys)
        hit = np.flatnonzero(row >= 0)
        if "payload" in ranges and len(hit):
            texts = ranges["payload"].to_numpy(dtype=object)[row[hit]]
            fields = {t: _payload_fields(str(t)) for t in set(texts)}  # once per distinct text
            comm[hit] = [fields[t][0] for t in texts]
            size[hit] = pd.array([fields[t][1] for t in texts], dtype="Int64")
            op[hit] = [o or fields[t][2] for o, t in zip(op[hit], texts, strict=True)]
        generic = hit[parsed["kind"].to_numpy()[hit] == "Generic"]  # fused launch: range names it
        named = ranges["range"].to_numpy(dtype=object)[row[generic]]
        parsed.loc[generic, "kind"] = [str(n).removeprefix("nccl") for n in named]
    rank = k["rank"] if "rank" in k else pd.Series(pd.NA, index=k.index)
    out = pd.DataFrame(
        {
            **({"report": k["report"].to_numpy()} if "report" in k else {}),
            "rank": pd.array(rank, dtype="Int64"),
            "pid": k["pid"].to_numpy(),
            "device_id": k["device_id"].to_numpy(),
            "stream_id": k["stream_id"].to_numpy(),
            "communicator": pd.array(comm, dtype="str"),
            "kind": pd.array(parsed["kind"].to_numpy(dtype=object), dtype="str"),
            "start_ns": k["start_ns"].to_numpy(),
            "end_ns": k["end_ns"].to_numpy(),
            "duration_ns": k["duration_ns"].to_numpy(),
            "bytes": size,
            "op": pd.array(op, dtype="str"),
            "dtype": pd.array(parsed["dtype"].to_numpy(dtype=object), dtype="str"),
            "algorithm": pd.array(parsed["algorithm"].to_numpy(dtype=object), dtype="str"),
            "protocol": pd.array(parsed["protocol"].to_numpy(dtype=object), dtype="str"),
            "name": names.to_numpy(),
        }
    )
    out["name"] = out["name"].astype("str")
    match = _match_key(out)
    out.insert(
        out.columns.get_loc("start_ns"),
        "instance",
        out.groupby([*keys, match, "kind"], sort=False).cumcount().astype(np.int64),
    )
    return out[[*(["report"] if "report" in out else []), *COLLECTIVE_COLUMNS]]


def _match_key(coll: pd.DataFrame) -> pd.Series:
    """The communicator collectives are matched within: its id when every row has one."""
    if len(coll) and (coll["communicator"] != "").all():
        return coll["communicator"]
    return pd.Series("", index=coll.index, dtype="str")


def rank_skew(coll: pd.DataFrame) -> pd.DataFrame:
    """One row per collective instance seen on two or more ranks: ``communicator, kind,
    instance, ranks, bytes, first_rank, last_rank`` (the straggler), ``first_start_ns,
    last_start_ns, skew_ns`` (last minus first kernel start), ``end_spread_ns`` (last minus
    first kernel end), sorted by first start. Rows without a rank are left out."""
    c = coll[coll["rank"].notna().to_numpy()].copy()
    c["_match"] = _match_key(c).to_numpy()
    c["rank"] = c["rank"].astype(np.int64)
    group = ["_match", "kind", "instance"]
    g = c.groupby(group, sort=False)
    first = c.loc[g["start_ns"].idxmin(), [*group, "rank"]].rename(columns={"rank": "first_rank"})
    last = c.loc[g["start_ns"].idxmax(), [*group, "rank"]].rename(columns={"rank": "last_rank"})
    agg = g.agg(
        communicator=("communicator", "first"),
        ranks=("rank", "nunique"),
        bytes=("bytes", "max"),
        first_start_ns=("start_ns", "min"),
        last_start_ns=("start_ns", "max"),
        first_end_ns=("end_ns", "min"),
        last_end_ns=("end_ns", "max"),
    ).reset_index()
    out = agg.merge(first, on=group).merge(last, on=group)
    out = out[out["ranks"] >= 2]
    out["skew_ns"] = out["last_start_ns"] - out["first_start_ns"]
    out["end_spread_ns"] = out["last_end_ns"] - out["first_end_ns"]
    out["bytes"] = pd.array(out["bytes"], dtype="Int64")
    out["communicator"] = out["communicator"].astype("str")
    out["kind"] = out["kind"].astype("str")
    for col in ("instance", "ranks", "first_rank", "last_rank"):
        out[col] = out[col].astype(np.int64)
    out = out.sort_values(["first_start_ns", "kind"], kind="stable").reset_index(drop=True)
    return out[SKEW_COLUMNS]


def collective_summary(coll: pd.DataFrame, skew: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (rank, kind): ``rank, kind, instances, total_ns, avg_ns, max_ns, bytes`` (sum of
    known sizes, NA if none), ``wait_ns`` (time its kernels spent waiting for the last rank to
    start: last start minus its own start, summed) and ``times_last`` (instances where it was
    the straggler); sorted by rank, then total time descending. ``skew`` defaults to
    :func:`rank_skew` of ``coll``."""
    skew = rank_skew(coll) if skew is None else skew
    c = coll.copy()
    c["_match"] = _match_key(c).to_numpy()
    s = skew.assign(_match=_match_key(skew).to_numpy())
    joined = c.merge(
        s[["_match", "kind", "instance", "last_start_ns", "last_rank"]],
        on=["_match", "kind", "instance"],
        how="left",
    )
    wait = (joined["last_start_ns"] - joined["start_ns"]).clip(lower=0).fillna(0)
    joined["_wait"] = wait.astype(np.int64)
    joined["_last"] = (joined["last_rank"] == joined["rank"]).fillna(False).astype(np.int64)
    joined["rank"] = joined["rank"].astype("Int64").fillna(-1).astype(np.int64)
    out = (
        joined.groupby(["rank", "kind"], sort=False)
        .agg(
            instances=("start_ns", "size"),
            total_ns=("duration_ns", "sum"),
            avg_ns=("duration_ns", "mean"),
            max_ns=("duration_ns", "max"),
            bytes=("bytes", lambda b: b.sum() if b.notna().any() else pd.NA),
            wait_ns=("_wait", "sum"),
            times_last=("_last", "sum"),
        )
        .reset_index()
        .sort_values(["total_ns", "kind"], ascending=[False, True], kind="stable")
    )
    out = rank_blocks(out)
    out["bytes"] = pd.array(out["bytes"], dtype="Int64")
    out["kind"] = out["kind"].astype("str")
    for col in ("instances", "total_ns", "max_ns", "wait_ns", "times_last"):
        out[col] = out[col].astype(np.int64)
    cols = ["rank", "kind", "instances", "total_ns", "avg_ns", "max_ns", "bytes", "wait_ns"]
    return out[[*cols, "times_last"]].reset_index(drop=True)
