"""``SweepRun``: what a sweep returns (``%%nsys --sweep``, ``nsight_magic.sweep``, ``load_run`` of
a sweep folder): one ``NsysRun`` per configuration that has a report, the sweep's record (values,
status, error of each configuration) and the tables and charts across configurations."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..analysis import mfu as utilisation
from ..errors import BadArgumentError, DamagedFolderWarning, EmptyResultWarning, ReportError
from ..run_folders import sharing
from ..run_folders.ownership import expand
from ..run_folders.run_dir import RunDir
from ..run_folders.sweep_layout import check_config_folders, mark_missing, missing_runs
from ..run_folders.sweep_record import ConfigKey, SweepRecord, config_label
from ..views import sweep_view
from .base import WIDGET_MIME, in_kernel
from .comparison import Comparison, compare
from .drill_protocols import DrillRunner
from .ncu_run import NcuRun
from .nsys_run import NsysRun
from .run_loading import load_one
from .sweep_frames import SweepFrames

FlopsOf = Callable[[dict[str, Any]], Mapping[Any, float] | None]


class SweepRun:
    """A sweep: ``runs`` maps each configuration with a report (a tuple of its values, in the
    order of ``variables``) to its ``NsysRun``; ``configs`` lists every configuration in the
    sweep's order, failed and cancelled ones too (``record`` says how each ended, ``table()``
    shows it); ``run_dir`` is the sweep folder (``sweep.json`` and one run folder per
    configuration)."""

    kind = "sweep"

    def __init__(
        self,
        record: SweepRecord,
        run_dir: str | Path | None,
        runs: Mapping[Any, NsysRun],
        *,
        keys: Sequence[tuple[Any, ...]] | None = None,
    ) -> None:
        self.record = record
        self.run_dir = Path(run_dir) if run_dir is not None else None
        names = record.variables
        given = (
            list(keys)
            if keys is not None
            else [tuple(c.values.get(n) for n in names) for c in record.configs]
        )
        # keys compare by the values' written form (sweep_record.ConfigKey): 1, 1.0 and True
        # are three configurations, a list value is one
        self.configs: list[ConfigKey] = [ConfigKey(key) for key in given]
        if len(self.configs) != len(record.configs):
            raise BadArgumentError("a SweepRun needs one key per configuration of its record")
        self.runs: dict[ConfigKey, NsysRun] = {ConfigKey(k): run for k, run in runs.items()}
        self._html: str | None = None

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def variables(self) -> list[str]:
        """The swept variables, in the order given (the order of each configuration's key)."""
        return list(self.record.variables)

    @functools.cached_property
    def frames(self) -> SweepFrames:
        """What the view shows, computed (``results.sweep_frames``)."""
        folder = str(self.run_dir) if self.run_dir is not None else None
        return SweepFrames(self.record, self.configs, self.runs, folder)

    # --- one configuration -----------------------------------------------------------------
    def key(self, config: tuple[Any, ...] | Mapping[str, Any] | Any) -> ConfigKey:
        """A configuration's key from its tuple, a {variable: value} dict, or the bare value
        of a sweep of one variable; BadArgumentError naming the configurations otherwise. Values
        match by their written form (``sweep_record.canonical``): ``run(x=1)`` is not the
        ``x=True`` configuration."""
        if isinstance(config, Mapping):
            if set(config) != set(self.variables):
                raise BadArgumentError(
                    f"name every swept variable ({', '.join(self.variables)}), not "
                    f"{', '.join(map(str, config)) or 'none'}"
                )
            config = tuple(config[name] for name in self.variables)
        elif not isinstance(config, tuple) or (len(self.variables) == 1 and len(config) != 1):
            config = (config,)
        key = ConfigKey(config)
        for known in self.configs:
            if known == key:
                return known
        listed = ", ".join(config_label(dict(zip(self.variables, k, strict=True)))
                           for k in self.configs[:10])  # fmt: skip
        shown = repr(config)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise BadArgumentError(f"{shown} is no configuration of this sweep ({listed})")

    def _index(self, key: ConfigKey) -> int:
        """The place of a key ``key()`` returned (one of ``configs`` itself)."""
        return next(i for i, known in enumerate(self.configs) if known is key)

    def run(
        self, config: tuple[Any, ...] | Mapping[str, Any] | Any = None, **values: Any
    ) -> NsysRun:
        """The ``NsysRun`` of one configuration: ``sweep.run(bs=8, seq=2048)``,
        ``sweep.run((8, 2048))`` or ``sweep.run(8)`` for a sweep of one variable.
        BadArgumentError with its error for a configuration that failed or did not run."""
        key = self.key(values if config is None else config)
        found = self.runs.get(key)
        if found is None:
            entry = self.record.configs[self._index(key)]
            raise BadArgumentError(
                f"configuration {entry.label} has no run: it {entry.status}"
                + (f" ({entry.error})" if entry.error else "")
            )
        return found

    def compare(self, a: Any, b: Any) -> Comparison:
        """``compare()`` of two configurations' runs (keys as :meth:`run` takes them)."""
        run_a, run_b = self.run(a), self.run(b)
        label_a = self.record.configs[self._index(self.key(a))].label
        label_b = self.record.configs[self._index(self.key(b))].label
        return compare(run_a, run_b, label_a, label_b)

    # --- across configurations -------------------------------------------------------------
    def table(self) -> pd.DataFrame:
        """One row per configuration, in the sweep's order (``analysis.sweep.sweep_table``):
        ``config`` (its label), one column per swept variable, ``status`` ("ok", "failed",
        "cancelled"), ``error``, ``cell_wall_ns`` (the cell body's wall time), ``run_wall_ns``
        (the configuration's whole run), ``gpu_time_ns`` (sum of kernel time),
        ``gpu_busy_pct``, ``top_kernel, top_kernel_short, top_kernel_pct`` (the kernel with the
        most time and its share of the kernel time), ``peak_memory_bytes`` (with
        ``--memory``). The swept variables' columns are listed in
        ``attrs["named_by_user"]``."""
        return self.frames.table()

    def kernels(self) -> pd.DataFrame:
        """Kernel x configuration total time (ns): ``name, short_name``, one column per
        configuration with a report (its label: ``attrs["named_by_user"]``), ``total_ns``;
        most time first."""
        return self.frames.kernels()

    def mfu(
        self,
        flops: FlopsOf | None = None,
        *,
        dtype: str = "bf16",
        peak_flops: float | None = None,
    ) -> pd.DataFrame:
        """MFU per (configuration, NVTX phase): ``flops`` is a function of a configuration's
        values (a dict: ``lambda cfg: {"prefill": transformer_flops(..., batch=cfg["bs"])}``)
        giving that run's ``NsysRun.mfu(flops=...)``; None derives them from the PyTorch GEMM
        op ranges (``--pytorch shapes``). Columns: ``config``, the swept variables, then
        ``domain, range, model_flops, model_flops_source, backward_flops, time_ns,
        time_source, dtype, peak_flops_per_s, peak_source, model_flops_per_s, mfu_frac,
        reason`` (``analysis.mfu.model_mfu``)."""
        if flops is not None and not callable(flops):
            raise BadArgumentError(
                "SweepRun.mfu(): flops is a function of a configuration (a dict of its values) "
                "that returns {range: FLOPs}, e.g. flops=lambda cfg: {'prefill': 2 * n * "
                "cfg['bs']}"
            )

        reasons: dict[str, str] = {}

        def one(row: Any) -> pd.DataFrame | None:
            run = self.runs[self.key(tuple(row.values[name] for name in self.variables))]
            given = flops(dict(row.values)) if flops is not None else None
            with warnings.catch_warnings():  # an empty configuration is said by its absence
                warnings.simplefilter("ignore")
                frame = run.mfu(given, dtype=dtype, peak_flops=peak_flops)
            if frame.empty:
                reasons[row.label] = str(frame.attrs.get("reason") or "no NVTX phase to measure")
            return frame[[c for c in utilisation.MODEL_MFU_COLUMNS if c in frame.columns]]

        frame = self.frames.mfu(one)
        if frame.empty:
            frame = frame.reindex(
                columns=[
                    *frame.columns,
                    *(c for c in utilisation.MODEL_MFU_COLUMNS if c not in frame.columns),
                ]
            )
            frame.attrs["reason"] = self._no_mfu_reason(reasons)
            warnings.warn(frame.attrs["reason"], EmptyResultWarning, stacklevel=2)
        return frame

    def _no_mfu_reason(self, reasons: Mapping[str, str]) -> str:
        """Why ``mfu()`` has no row: no configuration has a report, or each one's own reason
        (``NsysRun.mfu``'s ``attrs["reason"]``), said once when all say the same."""
        if not self.runs:
            counts = ", ".join(f"{n} {status}" for status, n in self.record.counts().items())
            return (
                f"No MFU: no configuration of this sweep has a report ({counts}); each failed "
                "configuration's error is in table()."
            )
        distinct = list(dict.fromkeys(reasons.values()))
        if len(distinct) == 1:
            return f"No MFU in any configuration: {distinct[0]}"
        each = "; ".join(f"{label}: {why}" for label, why in reasons.items())
        return f"No MFU in any configuration: {each}"

    def profile_top(self, n: int = 10, *, set: str | None = "roofline",
                    **options: Any) -> dict[ConfigKey, NcuRun]:  # fmt: skip
        """``NsysRun.profile_top`` on each configuration that has a run: one ncu re-run of
        the cell per configuration, its values bound again."""
        return {key: run.profile_top(n, set=set, **options) for key, run in self.runs.items()}

    # --- charts ----------------------------------------------------------------------------
    def time_chart(self, variable: str | None = None) -> Any:
        """GPU time (and the cell's wall time) against ``variable`` (default: the first swept
        one); a log2 axis when its values are powers of two. An altair chart."""
        name = self._variable(variable)
        return sweep_view.time_chart(self.frames, name)

    def mfu_chart(self, flops: FlopsOf | None = None, variable: str | None = None,
                  **kwargs: Any) -> Any:  # fmt: skip
        """MFU per NVTX phase against ``variable`` (:meth:`mfu`'s arguments). An altair chart."""
        name = self._variable(variable)
        with warnings.catch_warnings():  # an empty frame's reason is the chart's title
            warnings.simplefilter("ignore", EmptyResultWarning)
            frame = self.mfu(flops, **kwargs)
        return sweep_view.mfu_chart(frame, name, self.frames.axis_scale(name))

    def _variable(self, variable: str | None) -> str:
        if variable is None:
            return self.variables[0]
        if variable not in self.variables:
            raise BadArgumentError(
                f"{variable!r} is not swept here; the swept variables: {', '.join(self.variables)}"
            )
        return variable

    @classmethod
    def open(
        cls, path: str | Path, drill_runner: DrillRunner | None = None, *, trust: bool = False
    ) -> SweepRun:
        """A sweep folder (``sweep.json`` and one run folder per configuration) as a
        ``SweepRun``: each configuration that ran ``ok`` loaded as a run; a record that names a
        configuration folder outside the sweep folder, or one folder twice, is refused before
        any is read (``DamagedFolderError``: the check ``share()`` makes too). A configuration
        recorded ``ok`` whose run is missing or cannot be loaded (a damaged bundle) is shown
        failed, its error saying why, and the rest load: one ``DamagedFolderWarning`` names
        them (``list_runs`` counts them failed too)."""
        run_dir = expand(path).absolute()
        record = RunDir(run_dir).read_sweep()
        if record is None:
            raise ReportError(f"{RunDir(run_dir).sweep} is no sweep record (damaged or foreign).")
        check_config_folders(run_dir, record)
        damaged = mark_missing(missing_runs(run_dir, record))
        runs = {}
        # keyed by the values' written form: a list value in sweep.json has no hash
        keys = [ConfigKey(c.values.get(n) for n in record.variables) for c in record.configs]
        for key, config in zip(keys, record.configs, strict=True):
            if config.status == "ok" and config.folder:
                try:
                    runs[key] = load_one(run_dir / config.folder, drill_runner, trust=trust)
                except ReportError as exc:  # its report is damaged: the others still load
                    config.status, config.error = "failed", f"its run cannot be loaded: {exc}"
                    damaged.append(config)
        if damaged:
            warnings.warn(
                f"{run_dir} is damaged: {len(damaged)} configuration(s) recorded ok have no run "
                f"that loads ({', '.join(c.label for c in damaged)}); they show as failed, "
                "table()'s error says why. The other configurations are loaded.",
                DamagedFolderWarning,
                stacklevel=4,  # load_run's caller (nsight_magic.load_run -> results.load_run)
            )
        return cls(record, run_dir, runs, keys=keys)

    def share(
        self, dest: str | Path, *, redact: Sequence[str] = (), keep_nsys_rep: bool = False
    ) -> SweepRun:
        """A share-safe copy of this sweep's folder in ``dest`` (a new folder): each
        configuration's run folder as ``nsight_magic.share`` copies a run, ``sweep.json``, and
        ``index.html``, one page of the table, the charts and each configuration's top kernels
        (no script). Returns the copy, loaded."""
        if self.run_dir is None:
            raise BadArgumentError("share(): this sweep has no folder to copy (run_dir is None)")
        out = sharing.share(self.run_dir, dest, redact=redact, keep_nsys_rep=keep_nsys_rep,
                            finish=share_page_into)  # fmt: skip
        return SweepRun.open(out)

    def write_share_page(self) -> None:
        """This (shared) sweep's one-page ``index.html`` in its folder, built from this copy,
        so it names nothing the copy does not (its folder is the page's own: ".")."""
        if self.run_dir is not None:
            frames = SweepFrames(self.record, self.configs, self.runs, ".")
            # an error shown in place of a configuration's numbers names its report's path
            page = sweep_view.share_page_html(frames).replace(str(self.run_dir), ".")
            RunDir(self.run_dir).write_copy(RunDir.SWEEP_PAGE, page)

    # --- display ---------------------------------------------------------------------------
    def widget(self) -> Any:
        """The live view (ipywidgets): the table, the charts, the kernel matrix."""
        return sweep_view.sweep_widget(self.frames)

    def to_html(self) -> str:
        """The static form (tables, charts as PNG), built once."""
        if self._html is None:
            self._html = sweep_view.sweep_static_html(self.frames)
        return self._html

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        data: dict[str, Any] = {"text/plain": repr(self), "text/html": self.to_html()}
        if in_kernel():
            with contextlib.suppress(Exception):  # a broken widget must not hide the findings
                data[WIDGET_MIME] = self.widget()._repr_mimebundle_()[WIDGET_MIME]
        if include:
            data = {k: v for k, v in data.items() if k in include}
        if exclude:
            data = {k: v for k, v in data.items() if k not in exclude}
        return data

    def __repr__(self) -> str:
        counts = self.record.counts()
        failed = counts.get("failed", 0)
        where = f", run_dir={str(self.run_dir)!r}" if self.run_dir else ""
        return (
            f"<SweepRun {self.name!r}: {len(self.record.configs)} configurations of "
            f"{', '.join(self.variables)}, {counts.get('ok', 0)} ok"
            + (f", {failed} failed" if failed else "")
            + f"{where}>"
        )


def share_page_into(copy: Path) -> None:
    """The one-page ``index.html`` of the shared sweep in ``copy`` (``share()``'s copy, still in
    its scratch folder: the page is written before the copy is renamed into place, so a
    failure leaves nothing behind), built from that copy, so it names nothing the copy does
    not. A copy that holds no sweep record (its folder changed under us) is a ``ReportError``;
    a configuration whose run does not load shows as failed on the page."""
    if RunDir(copy).read_sweep() is None:
        raise ReportError(f"share(): the copy of the sweep folder holds no sweep record ({copy})")
    with warnings.catch_warnings():  # the scratch folder's name is no one's business
        warnings.simplefilter("ignore", DamagedFolderWarning)
        SweepRun.open(copy).write_share_page()
