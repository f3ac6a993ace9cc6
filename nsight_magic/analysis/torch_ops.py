"""PyTorch op ranges: which op launched each kernel, and the ops that cost the most GPU time.

``nsys profile --pytorch=autograd-shapes-nvtx`` (and ``torch.autograd.profiler.emit_nvtx(
record_shapes=True)``) put one push/pop NVTX range around every ATen op call, in the default
domain, with text such as::

    aten::addmm, op_id = 61, sizes = [[1024], [64, 1024], [1024, 256], [], []], input_op_ids = ...

(``seq = N`` instead of or before ``op_id`` when autograd records a sequence number). Ops nest:
``aten::linear`` calls ``aten::matmul`` calls ``aten::mm``, and each range encloses the kernels
its callees launched.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .attribution import Calls, enclosed_any_thread, innermost_enclosing, launch_calls
from .model_flops import GEMM_OPS, gemm_flops
from .nvtx_nesting import nesting_levels

__all__ = [
    "BACKWARD_LINK_COLUMNS",
    "KERNEL_OP_COLUMNS",
    "OP_SUMMARY_COLUMNS",
    "OpRange",
    "backward_links",
    "has_op_ranges",
    "is_backward_op",
    "kernel_ops",
    "op_range_mask",
    "op_ranges",
    "op_summary",
    "ops_by_kernel_name",
    "parse_op_range",
    "parse_shapes",
    "range_model_flops",
]

_HEAD = re.compile(r"^(?P<op>[A-Za-z_]\w*(?:::[A-Za-z_][\w.]*)+)(?P<rest>(?:, .*)?)$", re.S)
# Autograd's ranges on its own thread: ``MmBackward0, seq = 378, op_id = ...`` (a backward node;
# ``seq`` is its forward op's), ``autograd::engine::evaluate_function: MmBackward0, op_id = ...``
# (the engine running it), and other bare names with PyTorch's fields (``detach, op_id = ...``,
# ``Optimizer.step#AdamW.step, op_id = ...``): any name before ", seq|op_id = N".
_NAMED = re.compile(r"^(?P<op>[^,\n]+?)(?P<rest>, (?:seq|op_id) = -?\d+.*)$", re.S)
_BACKWARD = re.compile(r"(Backward\d*|AccumulateGrad)$")
EVALUATE_FUNCTION = "autograd::engine::evaluate_function: "
_FIELD = re.compile(r", (?P<key>seq|op_id) = (?P<value>-?\d+)")
_SIZES = ", sizes = "


@dataclass(frozen=True)
class OpRange:
    """One op range's text, parsed: ``shapes`` is the ``sizes`` list as PyTorch printed it
    ("" when not recorded); ``op_id``/``seq`` None when absent."""

    op: str
    op_id: int | None
    seq: int | None
    shapes: str


def _bracketed(text: str, start: int) -> str:
    """The balanced ``[...]`` that begins at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "[":
            depth += 1
        elif text[i] == "]":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return text[start:]


def has_op_ranges(nvtx: pd.DataFrame) -> bool:
    """Whether any NVTX range is a PyTorch op's (``parse_op_range``): without one, every op
    frame is empty, and a view can say so without building them."""
    return any(parse_op_range(str(text)) is not None for text in pd.unique(nvtx["range"]))


def parse_op_range(text: str) -> OpRange | None:
    """``"aten::mm, op_id = 638, sizes = [[64, 256], [256, 768]], ..."`` -> OpRange("aten::mm",
    638, None, "[[64, 256], [256, 768]]"); None for a range that is not an op's. A text counts
    as an op's when it is ``namespace::name`` with PyTorch's fields, or a bare ``aten::`` name."""
    m = _HEAD.match(text) or _NAMED.match(text)
    if m is None:
        return None
    op, rest = m.group("op"), m.group("rest")
    fields = {f.group("key"): int(f.group("value")) for f in _FIELD.finditer(rest)}
    at = rest.find(_SIZES)
    shapes = _bracketed(rest, at + len(_SIZES)) if at >= 0 else ""
    if not fields and not shapes and (rest or not op.startswith("aten::")):
        return None  # "ns::name, something else" or another namespace: a user's range
    return OpRange(op, fields.get("op_id"), fields.get("seq"), shapes)


def is_backward_op(op: str) -> bool:
    """Whether an op range's name is autograd's backward work (a ``...Backward0`` node, the
    engine's ``evaluate_function`` around one, ``AccumulateGrad``)."""
    return op.startswith(EVALUATE_FUNCTION) or bool(_BACKWARD.search(op))


def op_range_mask(nvtx: pd.DataFrame) -> np.ndarray:
    """Which rows of a frame with a ``range`` column are PyTorch op ranges (parsed once per
    distinct text)."""
    texts = nvtx["range"].astype(str)
    ops = [t for t in pd.unique(texts) if parse_op_range(t) is not None]
    return texts.isin(ops).to_numpy()


def parse_shapes(shapes: str) -> list[object]:
    """The ``sizes`` text as lists (``"[[64, 256], []]"`` -> ``[[64, 256], []]``); [] when
    empty or unreadable."""
    if not shapes:
        return []
    try:
        value = ast.literal_eval(shapes)
    except (ValueError, SyntaxError):
        return []
    return value if isinstance(value, list) else []


def op_ranges(nvtx: pd.DataFrame) -> pd.DataFrame:
    """The op ranges of an ``nvtx()`` frame (same index): its columns plus ``op, op_id, seq,
    shapes`` (Int64 ids, <NA> when absent). Texts are parsed once per distinct text."""
    texts = nvtx["range"].astype(str)
    parsed = {t: parse_op_range(t) for t in pd.unique(texts)}
    found = {t: p for t, p in parsed.items() if p is not None}
    keep = texts.isin(list(found)).to_numpy()
    out = nvtx.loc[keep].copy()
    rows = [found[t] for t in texts[keep]]
    out["op"] = pd.Series([r.op for r in rows], index=out.index, dtype=str)
    out["op_id"] = pd.array([r.op_id for r in rows], dtype="Int64")
    out["seq"] = pd.array([r.seq for r in rows], dtype="Int64")
    out["shapes"] = pd.Series([r.shapes for r in rows], index=out.index, dtype=str)
    return out


BACKWARD_LINK_COLUMNS = ["forward_op", "forward_shapes", "forward_nvtx_row", "forward_flops"]


def backward_links(nvtx: pd.DataFrame) -> pd.DataFrame:
    """Each backward node range (``MmBackward0, seq = N, ...``, ``is_backward_op``; not the
    engine's ``evaluate_function`` wrapper) joined to its forward op: the op range of the same
    process with the same ``seq`` (autograd gives a node its forward op's sequence number),
    preferring the op the node's name spells (``AddmmBackward0`` -> ``aten::addmm``; an
    ``aten::linear`` and its ``aten::addmm`` share a seq) else the first to start. Index: the
    node's row in ``nvtx``; columns ``forward_op, forward_shapes, forward_nvtx_row`` and
    ``forward_flops`` (the forward GEMM's 2*M*N*K, NaN for other ops). Nodes without a
    forward op in the report (it ran before the capture) are left out."""
    ops = op_ranges(nvtx)
    empty = pd.DataFrame(
        {
            "forward_op": pd.Series([], dtype=str),
            "forward_shapes": pd.Series([], dtype=str),
            "forward_nvtx_row": pd.Series([], dtype=np.int64),
            "forward_flops": pd.Series([], dtype=np.float64),
        }
    )
    if ops.empty:
        return empty
    backward = np.array([is_backward_op(o) for o in ops["op"]], dtype=bool)
    wrapper = ops["op"].str.startswith(EVALUATE_FUNCTION).to_numpy()
    has_seq = ops["seq"].notna().to_numpy()
    nodes = ops[backward & ~wrapper & has_seq]
    forward = ops[~backward & has_seq].copy()
    if nodes.empty or forward.empty:
        return empty
    # the op the node differentiates: the one its name spells (AddmmBackward0 -> aten::addmm,
    # ToCopyBackward0 -> aten::_to_copy), else the first to start with its seq
    nodes = nodes.assign(_key=[_squash(_BACKWARD.sub("", o)) for o in nodes["op"]])
    forward["_key"] = [_squash(o.rsplit("::", 1)[-1]) for o in forward["op"]]
    forward = forward.rename_axis("forward_nvtx_row").reset_index()
    ordered = forward.sort_values("start_ns", kind="stable")
    by_name = ordered.drop_duplicates(["pid", "seq", "_key"])
    first = ordered.drop_duplicates(["pid", "seq"]).drop(columns="_key")
    keys = nodes[["pid", "seq", "_key"]].rename_axis("_row").reset_index()
    named = keys.merge(by_name, on=["pid", "seq", "_key"], how="inner")
    rest = keys[~keys["_row"].isin(named["_row"])].drop(columns="_key")
    other = rest.merge(first, on=["pid", "seq"], how="inner")
    # only a GEMM its node names carries FLOPs: a cast (ToCopyBackward0) shares its linear's seq
    named["forward_flops"] = [
        np.nan if (f := gemm_flops(o, parse_shapes(sh))) is None else f
        for o, sh in zip(named["op"], named["shapes"], strict=True)
    ]
    other["forward_flops"] = np.nan
    joined = pd.concat([named, other], ignore_index=True).set_index("_row").rename_axis(None)
    out = joined.rename(columns={"op": "forward_op", "shapes": "forward_shapes"})
    return out[BACKWARD_LINK_COLUMNS].astype({"forward_nvtx_row": np.int64}).sort_index()


def _squash(name: str) -> str:
    """An op name compared without case or underscores: ``_to_copy`` ~ ``ToCopy``."""
    return name.replace("_", "").lower()


KERNEL_OP_COLUMNS = ["op", "op_id", "shapes", "op_nvtx_row"]


def kernel_ops(kernels: pd.DataFrame, launches: pd.DataFrame, nvtx: pd.DataFrame) -> pd.DataFrame:
    """The PyTorch op that launched each kernel: ``op, op_id, shapes, op_nvtx_row`` with the
    index of ``kernels`` (any GPU-op frame with ``pid, correlation_id``). The op is the
    innermost op range enclosing the kernel's launching call on the same thread (nsys's
    attribution rule, ``attribution.innermost_enclosing``): for a linear layer that is
    ``aten::mm``/``aten::addmm``, not ``aten::linear``. ``op_nvtx_row`` is the range's row in
    ``nvtx`` (its index label); kernels outside every op range get "", <NA>, "", -1."""
    ops = op_ranges(nvtx)
    out = pd.DataFrame(
        {
            "op": pd.Series("", index=kernels.index, dtype=str),
            "op_id": pd.array([pd.NA] * len(kernels), dtype="Int64"),
            "shapes": pd.Series("", index=kernels.index, dtype=str),
            "op_nvtx_row": np.full(len(kernels), -1, dtype=np.int64),
        },
        index=kernels.index,
    )
    if ops.empty or kernels.empty:
        return out
    calls = launch_calls(kernels, launches)
    inner = innermost_enclosing(calls, ops)
    found = inner >= 0
    rows, which = calls.row[found], inner[found]
    out.iloc[rows, out.columns.get_loc("op")] = ops["op"].to_numpy()[which]
    out.iloc[rows, out.columns.get_loc("op_id")] = ops["op_id"].to_numpy()[which]
    out.iloc[rows, out.columns.get_loc("shapes")] = ops["shapes"].to_numpy()[which]
    out.iloc[rows, out.columns.get_loc("op_nvtx_row")] = ops.index.to_numpy()[which]
    return out


def ops_by_kernel_name(kernels: pd.DataFrame, ops_of_kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name, the PyTorch op that launched it: ``name, op`` (the op, from
    :func:`kernel_ops`, under which the name ran the most GPU time), ``ops`` (how many
    different ops launched it; a generic elementwise kernel serves many). Names launched
    outside every op range are left out."""
    frame = pd.DataFrame(
        {
            "name": kernels["name"].astype(str).to_numpy(),
            "op": ops_of_kernels["op"].astype(str).to_numpy(),
            "duration_ns": kernels["duration_ns"].to_numpy(np.int64),
        }
    )
    frame = frame[frame["op"] != ""]
    time = frame.groupby(["name", "op"], sort=False)["duration_ns"].sum().reset_index()
    time = time.sort_values(["name", "duration_ns", "op"], ascending=[True, False, True])
    top = time.drop_duplicates("name")[["name", "op"]]
    count = time.groupby("name")["op"].size().rename("ops")
    out = top.join(count, on="name").reset_index(drop=True)
    out["ops"] = out["ops"].astype(np.int64)
    return out[["name", "op", "ops"]]


OP_SUMMARY_COLUMNS = [
    "op",
    "shapes",
    "calls",
    "top_level_calls",
    "gpu_ops",
    "gpu_time_ns",
    "avg_gpu_time_ns",
    "cpu_time_ns",
    "kernels",
    "kernel_time_ns",
    "model_flops",
    "forward_op",
]


def op_summary(
    trace: pd.DataFrame,
    kernels: pd.DataFrame | None = None,
    ops_of_kernels: pd.DataFrame | None = None,
    nvtx: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The ops that cost the most GPU time, one row per (op, shapes), most GPU time first.

    ``trace``: the NVTX GPU projection per range (``NsysReport.nvtx_gpu_trace()``, nsys's
    ``nvtx_gpu_proj_trace``). Columns:

    - ``calls``: op ranges with GPU work; ``top_level_calls``: those not inside another op.
    - ``gpu_ops`` and ``gpu_time_ns``: summed over the calls as nsys projects each range (an
      op's time includes its callees': ``aten::linear`` holds its ``aten::mm``'s kernels, so
      compare ops of one level, e.g. those with ``top_level_calls``, or use ``kernel_time_ns``).
      ``avg_gpu_time_ns`` per call; ``cpu_time_ns``: summed range (CPU) durations.
    - ``kernels``, ``kernel_time_ns``: kernels whose innermost op is this one and their summed
      durations (from ``kernels`` and its :func:`kernel_ops` frame; 0 when not given): no
      kernel is counted twice across rows.
    - ``model_flops``: 2*M*N*K per call summed (``model_flops.gemm_flops``) for GEMM ops; for
      a backward node of a GEMM (``MmBackward0``, ``AddmmBackward0``, ...) twice its forward
      op's (the gradients of both operands: two GEMMs of the forward's size; the ``aten::mm``
      calls inside the node carry the same FLOPs by their own shapes); NaN for others.
    - ``forward_op``: for a backward node, the forward op it differentiates, joined by
      ``seq`` (:func:`backward_links`, over ``nvtx``: ``nvtx()``, else the ranges in
      ``trace``); "" for other ops.
    """
    text = trace["range"].astype(str)
    parsed = {t: parse_op_range(t) for t in pd.unique(text)}
    found = {t: p for t, p in parsed.items() if p is not None}
    is_op = text.isin(list(found)).to_numpy()
    ops = trace.loc[is_op]
    op = pd.Series([found[t].op for t in text[is_op]], index=ops.index, dtype=str)
    shapes = pd.Series([found[t].shapes for t in text[is_op]], index=ops.index, dtype=str)
    nested = ops["parent"].isin(ops.index).to_numpy()
    links = backward_links(trace if nvtx is None else nvtx)
    link = links.reindex(ops.index)
    frame = pd.DataFrame(
        {
            "op": op,
            "shapes": shapes,
            "forward_op": link["forward_op"].fillna("").astype(str).to_numpy(),
            "backward_flops": 2.0 * link["forward_flops"].to_numpy(np.float64),
            "top": ~nested,
            "gpu_ops": ops["gpu_ops"].to_numpy(np.int64),
            "gpu_time_ns": ops["proj_duration_ns"].to_numpy(np.int64),
            "cpu_time_ns": ops["duration_ns"].to_numpy(np.int64),
        }
    )
    keys = ["op", "shapes"]
    out = (
        frame.groupby(keys, sort=False)
        .agg(
            calls=("gpu_ops", "size"),
            top_level_calls=("top", "sum"),
            gpu_ops=("gpu_ops", "sum"),
            gpu_time_ns=("gpu_time_ns", "sum"),
            cpu_time_ns=("cpu_time_ns", "sum"),
            # the forward op most of the calls differentiate; their FLOPs, summed
            forward_op=("forward_op", lambda s: s.mode().iloc[0] if len(s) else ""),
            backward_flops=("backward_flops", lambda s: s.sum(min_count=len(s))),
        )
        .reset_index()
    )
    out["avg_gpu_time_ns"] = out["gpu_time_ns"] / out["calls"]
    out["kernels"] = np.int64(0)
    out["kernel_time_ns"] = np.int64(0)
    if kernels is not None and ops_of_kernels is not None and len(kernels):
        own = pd.DataFrame(
            {
                "op": ops_of_kernels["op"].to_numpy(),
                "shapes": ops_of_kernels["shapes"].to_numpy(),
                "duration_ns": kernels["duration_ns"].to_numpy(np.int64),
            }
        )
        own = (
            own[own["op"] != ""]
            .groupby(keys)
            .agg(k=("duration_ns", "size"), t=("duration_ns", "sum"))
        )
        joined = out.join(own, on=keys)
        out["kernels"] = joined["k"].fillna(0).astype(np.int64).to_numpy()
        out["kernel_time_ns"] = joined["t"].fillna(0).astype(np.int64).to_numpy()
    per_call = [
        gemm_flops(o, parse_shapes(s)) for o, s in zip(out["op"], out["shapes"], strict=True)
    ]
    out["model_flops"] = np.array([np.nan if f is None else f for f in per_call]) * out["calls"]
    out["model_flops"] = out["model_flops"].fillna(out.pop("backward_flops"))
    for col in ("top_level_calls", "calls", "gpu_ops", "gpu_time_ns", "cpu_time_ns"):
        out[col] = out[col].astype(np.int64)
    out = out.sort_values(["gpu_time_ns", "op", "shapes"], ascending=[False, True, True])
    return out.reset_index(drop=True)[OP_SUMMARY_COLUMNS]


def _in_backward(calls: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Which op calls (``pid, tid, start_ns, end_ns``) run inside a backward op range of their
    thread (a ``...Backward0`` node or the engine's ``evaluate_function``)."""
    backward = ops[[is_backward_op(o) for o in ops["op"]]]
    if backward.empty or calls.empty:
        return np.zeros(len(calls), dtype=bool)
    order = np.lexsort((calls["start_ns"].to_numpy(), calls["tid"].to_numpy(),
                        calls["pid"].to_numpy()))  # fmt: skip
    pid, tid, start, end = (
        calls[c].to_numpy(np.int64)[order] for c in ("pid", "tid", "start_ns", "end_ns")
    )
    sorted_calls = Calls(pid, tid, start, end, order)
    inside = np.zeros(len(calls), dtype=bool)
    inside[order] = innermost_enclosing(sorted_calls, backward) >= 0
    return inside


def range_model_flops(nvtx: pd.DataFrame) -> pd.DataFrame:
    """Model FLOPs of the GEMM op calls inside each NVTX range that is not itself an op's:
    ``domain, range, model_flops, backward_flops`` (the part done inside autograd's backward
    nodes), ``gemm_calls`` (ranges without GEMM calls left out), summed
    over the range's instances. A call belongs to a range of its process that encloses it,
    on any thread (the phase rule, ``attribution.enclosed_any_thread``): autograd runs the
    backward GEMMs on its own thread, and they are the range's work as much as the forward's.
    Only the outermost GEMM call of a nest counts (``aten::linear`` > ``aten::matmul`` >
    ``aten::mm`` is one multiply); a backward node (``MmBackward0``) is no GEMM op itself, so
    the two ``aten::mm`` calls inside it both count. Other ops (attention kernels,
    elementwise) add nothing: this is the matmul part of a model's FLOPs, which is most of a
    transformer's."""
    ops = op_ranges(nvtx)
    pairs = ops.loc[ops["op"].isin(GEMM_OPS), ["op", "shapes"]].drop_duplicates()
    per_call = {(o, sh): gemm_flops(o, parse_shapes(sh)) for o, sh in pairs.itertuples(index=False)}
    flops = np.array(
        [per_call.get((o, sh)) or np.nan for o, sh in zip(ops["op"], ops["shapes"], strict=True)]
    )
    gemm = ops.loc[~np.isnan(flops)].assign(_flops=flops[~np.isnan(flops)])
    outer = gemm.loc[nesting_levels(gemm) == 0] if len(gemm) else gemm
    outer = outer.sort_values(["pid", "start_ns"], kind="stable")
    user = nvtx.drop(index=ops.index)
    g_flops = outer["_flops"].to_numpy(np.float64)
    g_backward = np.where(_in_backward(outer, ops), g_flops, 0.0)
    model_flops = np.zeros(len(user))
    backward_flops = np.zeros(len(user))
    gemm_calls = np.zeros(len(user), dtype=np.int64)
    pid, start, end = (outer[c].to_numpy(np.int64) for c in ("pid", "start_ns", "end_ns"))
    for i, inside in enclosed_any_thread(pid, start, end, user):
        model_flops[i] = g_flops[inside].sum()
        backward_flops[i] = g_backward[inside].sum()
        gemm_calls[i] = len(inside)
    frame = pd.DataFrame(
        {
            "domain": user["domain"].to_numpy(),
            "range": user["range"].to_numpy(),
            "model_flops": model_flops,
            "backward_flops": backward_flops,
            "gemm_calls": gemm_calls,
        }
    )
    out = frame.groupby(["domain", "range"], sort=False, as_index=False).sum()
    return out[out["gemm_calls"] > 0].reset_index(drop=True)
