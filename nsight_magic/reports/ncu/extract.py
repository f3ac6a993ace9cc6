"""Read a ``.ncu-rep`` with NVIDIA's ``ncu_report`` in a CHILD process and save it as plain data.

``python -m nsight_magic.reports.ncu.extract REPORT OUT`` loads REPORT and pickles (protocol 5)
one dict of builtins only (dict/list/tuple/str/float/int/None) to OUT, written to ``OUT.part``
first and then renamed, so OUT exists only when complete. ``NcuReport.open`` runs this and
reads OUT back.

Why a child: ``ncu_report`` is native code that calls ``abort()`` on some damaged files, which
would take the user's Jupyter kernel down with it. Here the crash only kills the child, and the
parent turns the signal into a ``CorruptReportError``.

Keep this module light: stdlib + ``ncu_report`` only (no pandas, no other nsight_magic module),
so the child starts in ~0.1 s. Exit status: 0 done, 2 usage, 3 ``ncu_report`` not importable,
4 ``ncu_report`` raised (message on stderr); death by a signal when it crashed.

Saved layout (``FORMAT`` = 2)::

    {"format": 2,
     "units": {metric name: unit},        # numeric metrics, once per report (unit() ~50 us)
     "rules_supported": bool,             # False: this ncu_report cannot give rule results
     "launches": [                        # report order: ranges, then actions
        {"function": str, "demangled": str, "mangled": str,
         "metrics": {name: float | str},  # metric_names() order; numbers (FLOAT/DOUBLE/UINT32/
                                          # UINT64, as_double) and strings; other kinds left out
         "sections": [(display name, [metric names, breakdown:/group: lists expanded])],
         "nvtx": [(domain, style, level, range)],  # domain "" = default domain
         "rules": [{"rule": identifier, "name": str, "section": section identifier,
                    "section_name": its display name, "title": str, "message": str (ncu's
                    markup kept), "type": MsgType int, "speedup": float | None,
                    "speedup_type": SpeedupType int, "focus": [(metric, value, guidance)]}]},
        ...]}
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

FORMAT = 2
MODULE = "nsight_magic.reports.ncu.extract"  # run as ``python -m MODULE REPORT OUT``
EXIT_USAGE = 2
EXIT_NO_MODULE = 3
EXIT_UNREADABLE = 4

# ncu_report.IMetric.ValueKind: FLOAT=3, DOUBLE=4, UINT32=5, UINT64=6 are numbers; 2 a string.
NUMERIC_KINDS = frozenset({3, 4, 5, 6})
STRING_KIND = 2

# Metrics report.py reads by name; saved even if a report lists them only through metric_by_name.
_READ_BY_NAME = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
    "launch__grid_dim_x",
    "launch__grid_dim_y",
    "launch__grid_dim_z",
    "launch__block_dim_x",
    "launch__block_dim_y",
    "launch__block_dim_z",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__device_id",
    "launch__stream_id",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "device__attribute_compute_capability_major",
    "device__attribute_compute_capability_minor",
    "device__attribute_multiprocessor_count",
    "device__attribute_display_name",
    "device__attribute_clock_rate",
)


def extract(path: str) -> dict[str, Any]:
    """Everything ``NcuReport`` reads from the report at ``path``, as builtins."""
    import ncu_report

    context = ncu_report.load_report(path)
    names: dict[str, str] = {}  # one str object per metric name: pickle then stores it once
    units: dict[str, str] = {}
    launches = []
    rules_supported = True
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for i in range(rng.num_actions()):
            action = rng.action_by_idx(i)
            rules_supported = rules_supported and hasattr(action, "rule_results_as_dicts")
            launches.append(_launch(ncu_report, action, names, units))
    return {
        "format": FORMAT,
        "units": units,
        "rules_supported": rules_supported,
        "launches": launches,
    }


def _launch(ncu_report: Any, action: Any, names: dict[str, str], units: dict[str, str]) -> dict:
    metrics: dict[str, float | str] = {}

    def add(name: str) -> None:
        metric = action.metric_by_name(name)
        if metric is None:
            return
        kind = metric.kind()
        name = names.setdefault(name, name)
        if kind in NUMERIC_KINDS:
            metrics[name] = float(metric.as_double())
        elif kind == STRING_KIND:
            metrics[name] = str(metric.as_string())

    for name in action.metric_names():
        add(name)
    sections = []
    section_names: dict[str, str] = {}  # section identifier -> display name, for the rules
    # IAction.sections() is newer than some ncu_report modules (Nsight Compute 2025.3's own
    # extras/python lacks it): without it, sections are the raw metric families, as ncu's raw
    # page groups them ("dram", "sm", "launch", ...).
    if not hasattr(action, "sections"):
        sections = raw_metric_families(metrics)
    for section in action.sections() if hasattr(action, "sections") else ():
        listed: list[str] = []
        for metric in (*section.header_metrics(), *section.body_metrics()):
            name = metric.name()
            if metric.kind() == STRING_KIND and name.startswith(("breakdown:", "group:")):
                listed.extend(n for n in metric.as_string().split(",") if n)
            else:
                listed.append(name)
        listed = list(dict.fromkeys(listed))
        for name in listed:
            if name not in metrics:
                add(name)
        sections.append((str(section.name()), [names.get(n, n) for n in listed]))
        if hasattr(section, "identifier"):
            section_names[str(section.identifier())] = str(section.name())
    for name in _READ_BY_NAME:
        if name not in metrics:
            add(name)
    # Units last: ncu_report infers some ``derived__`` units lazily, and only once the string
    # metrics were read do they match the CLI's (``thread``, not ``inst``, for the _x2 FLOPs).
    for name, value in metrics.items():
        if name not in units and isinstance(value, float):
            units[name] = action.metric_by_name(name).unit() or ""
    return {
        # A launch whose record was cut has no name: None, saved as "" (never "None").
        "function": _text(action.name(ncu_report.IAction.NameBase_FUNCTION)),
        "demangled": _text(action.name(ncu_report.IAction.NameBase_DEMANGLED)),
        "mangled": _text(action.name(ncu_report.IAction.NameBase_MANGLED)),
        "metrics": metrics,
        "sections": sections,
        "nvtx": _nvtx_entries(action),
        **_rules(action, section_names),
    }


def _rules(action: Any, section_names: dict[str, str]) -> dict[str, Any]:
    """``{"rules": [...]}``: ncu's rule results for one launch (``IAction.rule_results_as_dicts``,
    computed by ncu when it profiled; reading them costs ~1 ms a launch), as builtins; [] when
    this ncu_report module cannot give them. If reading them fails, the launch keeps its
    metrics and ``"rules_error"`` says why."""
    if not hasattr(action, "rule_results_as_dicts"):
        return {"rules": []}
    try:
        results = action.rule_results_as_dicts()
    except Exception as exc:  # damaged rule data must not cost the launch's metrics
        return {"rules": [], "rules_error": f"{type(exc).__name__}: {exc}"}
    rules = []
    for result in results:
        message = result.get("rule_message") or {}
        speedup = result.get("speedup_estimation") or {}
        section = str(result.get("section_identifier", ""))
        rules.append(
            {
                "rule": str(result.get("rule_identifier", "")),
                "name": str(result.get("name", "")),
                "section": section,
                "section_name": section_names.get(section, ""),
                "title": str(message.get("title", "")),
                "message": str(message.get("message", "")),
                "type": int(message.get("type", 0)),
                "speedup": _float(speedup["speedup"]) if "speedup" in speedup else None,
                "speedup_type": int(speedup.get("type", 0)),
                "focus": [
                    (str(f.get("name", "")), _float(f.get("value")), str(f.get("info", "")))
                    for f in result.get("focus_metrics", ())
                ],
            }
        )
    return {"rules": rules}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def raw_metric_families(metrics: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Sections for an ncu_report without ``IAction.sections()``: one per metric family
    (the part before ``__``), as ncu's raw page groups them."""
    families: dict[str, list[str]] = {}
    for name in metrics:
        families.setdefault(name.split("__", 1)[0], []).append(name)
    return [(f"Raw metrics: {family}", names) for family, names in sorted(families.items())]


def _nvtx_entries(action: Any) -> list[tuple[str, str, int, str]]:
    """(domain, style, level, range) for the ranges open around one launch."""
    state = action.nvtx_state()
    if state is None:
        return []
    entries = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        dname = str(domain.name())
        dname = "" if dname == "<default domain>" else dname
        for level, name in enumerate(domain.push_pop_ranges()):
            entries.append((dname, "PushPop", level, str(name)))
        for name in domain.start_end_ranges():
            entries.append((dname, "StartEnd", 0, str(name)))
    return entries


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m nsight_magic.reports.ncu.extract REPORT OUT", file=sys.stderr)
        return EXIT_USAGE
    report, out = argv
    try:  # a crash must not leave a multi-GB core file behind
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):  # pragma: no cover - non-POSIX
        pass
    try:
        import ncu_report  # noqa: F401
    except ImportError as exc:
        print(f"cannot import ncu_report ({exc})", file=sys.stderr)
        return EXIT_NO_MODULE
    try:
        data = extract(report)
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    part = out + ".part"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # 0600 under any umask
    with os.fdopen(fd, "wb") as fh:
        pickle.dump(data, fh, protocol=5)
    os.replace(part, out)
    return 0


if __name__ == "__main__":
    # Jupyter interrupts a cell with SIGINT to the kernel's whole process group, where this
    # child stays (so the kernel's shutdown still ends it): a read for a background profile is
    # not that cell, and died ("damaged"). The parent stops a read by SIGKILL (timeout, Ctrl-C).
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(main(sys.argv[1:]))
