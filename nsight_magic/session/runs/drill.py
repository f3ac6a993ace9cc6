"""Drill-downs into a cell the session ran (``results.DrillRunner``): ncu on one kernel the
picker chose, on every kernel of an NVTX range, and ``%%ncu --nvtx``'s range spec.
``DrillDowns`` is ``SessionManager.drills``, a collaborator: it runs each drill-down through
the ``profile`` the manager hands it (warm ncu worker, or a cold re-run of the parent's saved
script)."""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...analysis.range_spec import NvtxRange, matches_spec, resolve_nvtx_range
from ...errors import (
    AmbiguousNvtxRangeError,
    CellFailedError,
    FolderSettingsIgnored,
    MissingVariableError,
    NsightMagicError,
    ProfileInterrupted,
)
from ...processes import deadline
from ...profilers import ncu as ncu_argv
from ...profilers import nsys as nsys_argv
from ...profilers.drill_request import DrillRequest
from ...run_folders import sharing
from ...run_folders.run_dir import RunDir
from ...vocabulary.magic_names import cell_magic
from ...vocabulary.nvtx_names import NVTX_DOMAIN, WARMUP_RANGE
from ..backends import NcuBackend
from ..history import History
from ..run_context import now_utc
from ..spec import CellRequest, Rerun, RunCallbacks
from .saved_run import rerun_settings, saved_meta

# ncu on one rank of a torchrun job: the peers run unprofiled; bound it anyway
MULTI_RANK_TIMEOUT_S = 600.0
# What ncu can read of an NCCL kernel in one pass (more passes replay it while its peers wait)
NCCL_SINGLE_PASS = (
    "gpu__time_duration.sum",
    "launch__grid_size",
    "launch__block_size",
    "launch__registers_per_thread",
)


def window_filters(parent: Any) -> dict[str, Any]:
    """A parent captured with ``%%nsys --nvtx RANGE#K`` saw only that opening of the range, so
    its kernel instances count from there: the drill-down's ncu marks the same opening
    (``nvtx_target`` + ``nvtx_instance``) and counts launches inside it. {} otherwise."""
    options = (getattr(parent, "meta", None) or {}).get("options") or {}
    text = options.get("nvtx_capture") if isinstance(options, dict) else None
    if not isinstance(text, str) or not text:
        return {}
    spec, instance = nsys_argv.split_instance(text)
    return {"nvtx_target": spec, "nvtx_instance": instance}


def range_filters(parent: Any, domain: str, name: str, style: str) -> dict[str, Any]:
    """ncu's filters for every kernel inside the range ``domain:name`` of the cell, warm-up runs
    excluded; when ``parent`` captured only one opening of this same range (``%%nsys --nvtx
    RANGE#K``), that opening alone (the script marks it: ``window_filters``). A range nested
    in such an opening is filtered in every opening (not only K's)."""
    window = window_filters(parent)
    if window and matches_spec(window["nvtx_target"], NvtxRange(domain, name, style)):
        return window
    expression = ncu_argv.nvtx_filter(name, domain=domain or None, push_pop=style == "PushPop")
    return {"nvtx_include": (expression,), "nvtx_exclude": (f"{NVTX_DOMAIN}@{WARMUP_RANGE}/",)}


class DrillDowns:
    """The session's drill-downs (``results.DrillRunner``): ``profile_kernel``,
    ``profile_top``, ``profile_range``, and the ``%%ncu --nvtx`` options. A collaborator of
    ``SessionManager``, which hands it how to profile a cell (``profile``: its own, looked up
    at each call), the notebook's ``history`` and ``nsys_runs`` (cell text -> its last nsys
    run)."""

    def __init__(
        self, profile: Callable[..., Any], history: History, nsys_runs: dict[str, Any]
    ) -> None:
        self.profile = profile
        self.history = history
        self._nsys_runs = nsys_runs

    def ncu_nvtx_options(self, spec: str, cell: str) -> dict[str, Any]:
        """``%%ncu --nvtx SPEC`` as ``NcuOptions`` fields. SPEC is "DOMAIN:RANGE" (":RANGE" = the
        default domain), "DOMAIN:RANGE (STYLE)" or a bare RANGE in any domain, as the NVTX tab
        and ``nsys stats`` print it. The cell script matches it against each range the cell
        opens and marks the matches for ncu (``nvtx_target``): no earlier run is needed to know
        the domain, and the name never has to be escaped for ncu.

        When this notebook profiled the same cell with nsys, SPEC is checked against that run's
        ranges first: a name the cell does not have fails here with the list (nothing runs);
        a range nsys saw but the script cannot (opened from C++ code) gets ncu's own filter,
        spelled with the domain and style nsys found (measured forms: docs/workloads.md)."""
        ncu_argv.parse_range_spec(spec)  # ValueError for an empty name or "DOMAIN:" alone
        spec = spec.strip()
        known = self._nsys_runs.get(cell)
        run = known() if known is not None else None
        if run is None:
            return {"nvtx_target": spec}
        try:
            found = resolve_nvtx_range(run.nvtx(), spec)
        except AmbiguousNvtxRangeError:
            return {"nvtx_target": spec}  # the script marks every match and says so
        # what the cell script saw of that run (None: not known, e.g. a run loaded from disk)
        recorded = (run.meta.get("cell_status") or {}).get("ranges")
        seen = {tuple(map(str, r)) for r in recorded or []}
        if recorded is None or found.domain == NVTX_DOMAIN or tuple(found) in seen:
            return {"nvtx_target": f"{found.label} ({found.style})"}
        expression = ncu_argv.nvtx_filter(found.range, domain=found.domain or None,
                                          push_pop=found.style == "PushPop")  # fmt: skip
        return {"nvtx_include": (expression,)}

    # --- drill-downs (results.DrillRunner) -----------------------------------------------
    def profile_kernel(
        self,
        parent: Any,
        request: DrillRequest,
        *,
        progress: Any = None,
        output: Any = None,
        cancel: threading.Event | None = None,
    ) -> Any:
        """ncu on launches ``request.instance`` .. ``+count`` (0-based, within the cell) of
        ``request.kernel`` (exact name) of the cell ``parent`` ran: in the warm ncu worker when
        this notebook ran that cell, else a cold re-run of the parent's saved script. The child
        run lives in the parent's folder (``ncu/<time>-<kernel>/``) and is listed in its
        meta.json. For a cell that ran as several ranks, ``request.rank`` names the rank ncu
        profiles (the others run unprofiled); an NCCL kernel gets single-pass metrics only:
        replaying a collective on one rank while its peers wait hangs (measured on
        nvidia-h200-x2, tests/data/README.md)."""
        kernel = request.kernel
        if not kernel:
            raise TypeError("profile_kernel needs a DrillRequest with a kernel name")
        record: dict[str, Any] = {"kernel": kernel, "instance": request.instance,
                                  "count": request.count}  # fmt: skip
        if "nccl" in kernel.lower():
            ncu = dataclasses.replace(request.ncu, set=None, sections=(), metrics=NCCL_SINGLE_PASS)
            request = dataclasses.replace(request, ncu=ncu)
            record["note"] = "NCCL kernel: single-pass metrics only"
        filters: dict[str, Any] = dict(kernel_exact=kernel, launch_skip=request.instance,
                                       launch_count=request.count)  # fmt: skip
        filters.update(window_filters(parent))
        callbacks = RunCallbacks(progress=progress, output=output, cancel=cancel)
        return self._drill(parent, kernel, request, filters, record, callbacks)

    def profile_top(
        self,
        parent: Any,
        kernels: Sequence[str],
        request: DrillRequest,
        *,
        progress: Any = None,
        output: Any = None,
        cancel: threading.Event | None = None,
    ) -> Any:
        """ncu on the first launch of each kernel of ``kernels`` (exact names, the parent's
        top-N by total time), in ONE re-run of the cell ``parent`` ran (``--kernel-id`` with
        invocation 1: ``profilers/ncu.first_launches_args``), collecting what ``request``
        says; N drill-downs would re-run it N times. The kernels that filter left out get
        one more re-run together, then one each for any still left out (``_more_passes``)."""
        names = tuple(dict.fromkeys(kernels))
        if not names:
            raise NsightMagicError("profile_top: the run has no kernel to profile.")
        filters: dict[str, Any] = {"first_launch_of": names, **window_filters(parent)}
        record: dict[str, Any] = {"top_kernels": list(names)}
        callbacks = RunCallbacks(progress=progress, output=output, cancel=cancel)
        label = f"top{len(names)}"
        child = self._drill(parent, label, request, filters, record, callbacks)
        left = _not_profiled(child)
        if left:
            child = self._more_passes(parent, child, label, request, left, callbacks)
            left = _not_profiled(child)
        if left and output is not None:  # said at once, not only in top_kernels()'s reasons
            shown = [short for _, short in left]
            output(f"nsight_magic: ncu profiled {len(names) - len(left)} of the {len(names)} "
                   f"kernels; not profiled: {'; '.join(shown)}")  # fmt: skip
        return child

    def _more_passes(self, parent: Any, child: Any, label: str, request: DrillRequest,
                     left: list[tuple[str, str]], callbacks: RunCallbacks) -> Any:  # fmt: skip
        """The kernels ncu's one-pass filter left out, in more passes merged into ``child``:
        on the H100 the filter with 10 names never selected a prefill's LM-head GEMM nor
        cuDNN's SDPA kernel, and a filter naming one of them alone does (docs/sweeps.md).
        Those left out are first asked for together (one more re-run of the cell), then each
        still left out alone (one re-run each). A pass that fails is said and its kernels
        stay not profiled."""
        if callbacks.output is not None:
            callbacks.output(f"nsight_magic: ncu's filter left out {len(left)} of the top "
                             f"kernels; profiling them in more re-run(s) of the cell")  # fmt: skip
        passes: list[Any] = []
        pending = list(left)

        def cancelled() -> bool:
            return callbacks.cancel is not None and callbacks.cancel.is_set()

        if len(left) > 1 and not cancelled():
            together = self._one_pass(parent, label, request, left, 2, callbacks)
            if together is not None:  # those it profiled need no pass of their own
                passes.append(together)
                missed = {name for name, _ in _not_profiled(together)}
                pending = [k for k in left if k[0] in missed]
        for kernel in pending:
            if cancelled():
                break
            done = self._one_pass(parent, label, request, [kernel], len(passes) + 2, callbacks)
            if done is not None:
                passes.append(done)
        if not passes:
            return child
        folder = RunDir(Path(child.run_dir))
        names = [Path(p.run_dir).name for p in passes]
        meta = folder.update_meta(merged_runs=names).to_dict()
        report = type(child.report).merged([child.report, *(p.report for p in passes)])
        return type(child)(report, child.run_dir, meta, parent=child.parent)

    def _one_pass(self, parent: Any, label: str, request: DrillRequest,
                  group: list[tuple[str, str]], number: int,
                  callbacks: RunCallbacks) -> Any | None:  # fmt: skip
        """One more pass of ``profile_top`` on the kernels of ``group``; None when it failed
        (said in the cell's output)."""
        names = tuple(name for name, _ in group)
        filters = {"first_launch_of": names, **window_filters(parent)}
        try:
            return self._drill(parent, f"{label}-pass{number}", request, filters,
                               {"top_kernels": list(names), "pass_of": label},
                               callbacks)  # fmt: skip
        except ProfileInterrupted:
            raise
        except NsightMagicError as exc:
            if callbacks.output is not None:
                shown = "; ".join(short for _, short in group)
                callbacks.output(f"nsight_magic: the pass of {shown} failed: "
                                 f"{exc.one_line()}")  # fmt: skip
            return None

    def profile_range(
        self,
        parent: Any,
        nvtx: NvtxRange,
        request: DrillRequest | None = None,
        *,
        progress: Any = None,
        output: Any = None,
        cancel: threading.Event | None = None,
    ) -> Any:
        """ncu on every kernel launched inside the NVTX range ``nvtx`` of the cell ``parent``
        ran (warm-up runs excluded), collecting what ``request`` says."""
        request = request or DrillRequest()
        filters = range_filters(parent, nvtx.domain, nvtx.range, nvtx.style)
        label = f"{nvtx.domain}:{nvtx.range}"
        callbacks = RunCallbacks(progress=progress, output=output, cancel=cancel)
        return self._drill(parent, label, request, filters,
                           {"nvtx_range": label, "style": nvtx.style}, callbacks)  # fmt: skip

    def _drill(self, parent: Any, label: str, drill: DrillRequest, filters: dict[str, Any],
               record: dict[str, Any], callbacks: RunCallbacks) -> Any:  # fmt: skip
        """Run ``drill`` as a child of ``parent``: every ncu option the request collects
        reaches the child's ``NcuOptions`` (``DrillRequest.ncu_options``), none named here."""
        timeout, rank = drill.timeout, drill.rank
        parent_dir = getattr(parent, "run_dir", None)
        if parent_dir is None:
            raise NsightMagicError(
                "This run was opened from a report file, not profiled here, so there is no saved "
                "cell to re-run under ncu; profile the cell with "
                f"{cell_magic('nsys')} first, or use {cell_magic('ncu')}."
            )
        # absolute: a run loaded by a relative path keeps its place if the cwd changes, and
        # the child's folder (made absolute by the run) lies inside it
        parent_dir = Path(parent_dir).absolute()
        parent_folder = RunDir(parent_dir)
        if not parent_folder.has_saved_cell():
            raise NsightMagicError(
                f"{parent_dir} has no saved cell (script.py, cell.py), so it cannot be re-run; "
                "profile the cell again."
            )
        parent_meta = saved_meta(parent_dir)
        entry = self.history.find_run(parent_dir)
        # a sweep's configuration (session/runs/sweep.py) keeps the values it bound, to bind again
        bound = getattr(parent, "bound_values", None)
        bound = dict(bound) if isinstance(bound, dict) else None
        # a folder profiled in this session is ours (a sweep's configurations too: only this
        # session's sweep sets bound_values); a loaded one is data (saved_run.py)
        trusted = (entry is not None or bool(getattr(parent, "trust_folder", False))
                   or bound is not None)  # fmt: skip
        saved = rerun_settings(parent_dir, parent_meta, trusted=trusted)
        if saved.ignored:
            warnings.warn(saved.notice(parent_dir), FolderSettingsIgnored, stacklevel=3)
        nproc = saved.nproc
        before = None if drill.fresh or entry is None or nproc > 1 else entry.id
        cold = before is None
        # a sweep's configuration: its values bound again, and the re-run leaves the
        # notebook's state as it was, as the configuration's own run did
        repeat = bound is not None and not drill.fresh and nproc == 1
        if repeat:
            cold = False
        if cold:
            _check_saved_values(parent_folder, parent_meta)
        if nproc > 1 and timeout is None:
            timeout = MULTI_RANK_TIMEOUT_S  # a stuck collective must never hang the notebook
        request = CellRequest(
            cell=parent_folder.read_cell(),
            name=saved.name,
            warmup=saved.warmup,
            repeat=saved.repeat,
            python=saved.python,
            cwd=saved.cwd,
            env=saved.env,
            timeout=timeout,
            fresh=cold,
            nproc=nproc,
            rank=rank,
            bind=bound if repeat and bound is not None else {},
            keep_state=repeat,
        )
        backend = NcuBackend(drill.ncu_options(**filters))
        with deadline.run_deadline(timeout):  # its version check within the drill's timeout
            backend.locate()  # a missing ncu is reported before a child folder exists
        run_dir = parent_folder.new_child(label).path
        meta = {"name": f"{request.name}:{label}", "parent_run": str(parent_dir), **record}
        if saved.ignored:
            meta["ignored_from_folder"] = saved.ignored
        if nproc > 1:
            meta["rank"] = rank
        t0 = time.perf_counter()
        child = None
        try:
            rerun = Rerun(parent=parent, before=before, run_dir=run_dir, meta=meta,
                          script=parent_folder.script if cold else None)  # fmt: skip
            child = self.profile(request, backend, callbacks=callbacks, rerun=rerun)
            return child
        except CellFailedError as exc:
            # the cell's own run of it raising in the re-run (not a setup step; not out of
            # GPU memory, which its own message explains)
            if (before is None or repeat or not str(exc).startswith("The profiled cell raised")
                    or "OutOfMemoryError" in exc.exc_type):  # fmt: skip
                raise
            raise _rerun_failed(exc) from None
        finally:
            # after an ncu worker crash the child is the fresh re-run beside the crashed folder
            ran_in = Path(getattr(child, "run_dir", None) or run_dir)
            mode = (getattr(child, "meta", None) or {}).get("mode") or ("fresh" if cold else "warm")
            parent_folder.add_child({"run_dir": str(ran_in.relative_to(parent_dir)),
                                     **record, "set": drill.ncu.set, "mode": mode,
                                     "wall_s": time.perf_counter() - t0,
                                     "started_utc": now_utc()})  # fmt: skip


def _rerun_failed(exc: CellFailedError) -> CellFailedError:
    """The cell raised in a drill-down's re-run, which runs it from the notebook's state of
    now, after the cell ran (a copy in the ncu worker: the notebook keeps its own): say so,
    since the cell did not raise in the notebook and "the profiled cell raised" alone reads as
    if it had."""
    said = str(exc).replace("The profiled cell raised", "The drill-down's re-run of the cell "
                            "raised", 1)  # fmt: skip
    said, sep, folder = said.rpartition("\n(run folder: ")
    return CellFailedError(
        f"{said}\nA drill-down runs the cell again under ncu, from the notebook's state as it is "
        "now, after the cell ran; a cell that uses up what it reads (next(it), .pop(), del, a "
        "file it moves) can fail there. Your notebook's state is unchanged. Profile the cell "
        f"itself with {cell_magic('ncu')} (--kernel REGEX or --nvtx RANGE picks the kernels) "
        f"instead, or make it able to run twice.{sep}{folder}",
        traceback=exc.traceback,
        exc_type=exc.exc_type,
        run=exc.run,
    )


def _check_saved_values(folder: RunDir, meta: Any) -> None:
    """A cold re-run of a folder's script binds the values its run was sent by value (a sweep
    configuration's swept values, ``--vars``) from its ``vars.pkl``; a shared copy has none
    (``share()`` copies no pickle), and the script would stop at ``NameError: bs`` after ncu
    started. ``MissingVariableError`` naming them, before anything runs."""
    if folder.vars.exists():
        return
    sweep = meta.sweep if isinstance(meta.sweep, dict) else {}
    swept = sweep.get("values")
    names = [*(map(str, swept) if isinstance(swept, dict) else ()), *(meta.vars or [])]
    names = list(dict.fromkeys(n for n in names if isinstance(n, str)))
    if not names:
        return
    shared = (folder.path / sharing.MANIFEST).exists()
    why = ("it is a shared copy: share() leaves the pickled values out"
           if shared else "its vars.pkl is gone")  # fmt: skip
    raise MissingVariableError(
        f"{folder.path} cannot be re-profiled: its cell reads {', '.join(names)}, which its run "
        f"was sent by value, and {why}. Nothing ran. Profile the cell again where those values "
        "are (a sweep: run the sweep again, or set them and profile the cell itself).",
        names=names,
    )


def _not_profiled(child: Any) -> list[tuple[str, str]]:
    """(name, short name) of each kernel a top-N run asked for that ncu profiled no launch of
    (``NcuRun.top_kernels``' rows without a launch); [] when it cannot tell."""
    try:
        rows = child.top_kernels()
    except Exception:  # a report without what the table needs: the run itself stands
        return []
    gone = rows[rows["launch"].isna()]
    shorts = gone["short_name"].fillna(gone["name"])
    return [(str(n), str(s)) for n, s in zip(gone["name"], shorts, strict=True)]
