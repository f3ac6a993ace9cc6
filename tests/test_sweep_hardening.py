"""Issue 57 (hardening, round 4) on sweeps: keys that are not hashed (``--sweep "v=[[1, 2],
[3]]"``, dict values, ``x=[1, 1.0, True]`` as three rows), swept names that would leak into later
cells refused before anything runs, a bound on a sweep's size, the magic's line taken as typed,
typed errors for bad arguments and damaged records, a sweep whose every configuration failed
failing its cell, reasons for blank MFU, a shared sweep's re-profile refused in one line, and a
run loaded by a relative path re-profiled. The session tests run the real worker on the CPU
(``session_support.BareBackend``); the folders are real ones from tests/data."""

from __future__ import annotations

import json
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from drill_support import Captured
from session_support import BareBackend

import nsight_magic
from nsight_magic.errors import (
    BadArgumentError,
    DamagedFolderError,
    DamagedFolderWarning,
    EmptyResultWarning,
    MissingVariableError,
    NsightMagicError,
    SweepFailedError,
)
from nsight_magic.results.sweep_run import SweepRun
from nsight_magic.run_folders.run_dir import RunDir, write_json, write_private
from nsight_magic.run_folders.sweep_record import ConfigKey, ConfigRecord, SweepRecord, json_value
from nsight_magic.session.history import SetupRegistry
from nsight_magic.session.manager import SessionManager
from nsight_magic.session.runs.sweep import SweepSpec, parse_sweep_option, run_sweep
from nsight_magic.session.spec import CellRequest, Notebook, RunCallbacks, SweepLimits

DATA = Path(__file__).resolve().parent / "data"
SWEEP_FIXTURE = DATA / "sweep_prefill"


@pytest.fixture
def manager():  # type: ignore[no-untyped-def]
    m = SessionManager(setup=SetupRegistry())
    yield m
    m.stop()


def _sweep(manager: SessionManager, tmp_path: Path, cell: str, spec: SweepSpec,
           ns: dict[str, Any] | None = None) -> tuple[Any, list[str]]:  # fmt: skip
    out: list[str] = []
    request = CellRequest(cell=cell, name="sw", runs_root=tmp_path / "runs", cwd=str(tmp_path))
    run = manager.sweep(request, BareBackend(), spec, notebook=Notebook(user_ns=ns or {}),
                        callbacks=RunCallbacks(output=out.append))  # fmt: skip
    return run, out


def _record(sweep: Any) -> dict[str, Any]:
    return json.loads((sweep.run_dir / RunDir.SWEEP).read_text())


# --- 1. keys by written form, never by hash -----------------------------------------------------
def test_list_values_sweep_and_each_configuration_is_found_by_its_value(
    manager: SessionManager, tmp_path: Path
) -> None:
    """``--sweep "v=[[1, 2], [3]]"`` raised ``TypeError: unhashable type: 'list'`` after the
    first configuration ran, leaving sweep.json pending."""
    spec = SweepSpec((parse_sweep_option("v=[[1, 2], [3]]"),))
    sweep, out = _sweep(manager, tmp_path, "print('ran', sum(v))", spec)
    assert [line for line in out if line.startswith("ran")] == ["ran 3", "ran 3"]
    assert [c["status"] for c in _record(sweep)["configs"]] == ["ok", "ok"]
    assert sweep.configs == [([1, 2],), ([3],)]
    assert sweep.run(v=[1, 2]).bound_values == {"v": [1, 2]}
    assert sweep.run([3]) is sweep.runs[ConfigKey(([3],))]
    # sweep.json keeps a list as a list (it kept its repr, "[1, 2]": a loaded sweep could not
    # find run(v=[1, 2])), and what JSON would change (a tuple) as its repr
    assert [c.values for c in sweep.record.configs] == [{"v": [1, 2]}, {"v": [3]}]
    assert [c["values"] for c in _record(sweep)["configs"]] == [{"v": [1, 2]}, {"v": [3]}]
    assert json_value((1, 2)) == "(1, 2)" and json_value({"a": [1, None]}) == {"a": [1, None]}
    assert json_value({1: "x"}) == "{1: 'x'}"
    assert sweep.frames.axis_scale("v") == "ordinal"


def test_dict_values_from_python_sweep(manager: SessionManager, tmp_path: Path) -> None:
    spec = SweepSpec.of({"cfg": [{"layers": 2, "d": 8}, {"layers": 4, "d": 8}]})
    sweep, out = _sweep(manager, tmp_path, "print('ran', cfg['layers'])", spec)
    assert [line for line in out if line.startswith("ran")] == ["ran 2", "ran 4"]
    assert sweep.run(cfg={"d": 8, "layers": 4}).bound_values == {"cfg": {"layers": 4, "d": 8}}
    assert [c.status for c in sweep.record.configs] == ["ok", "ok"]


def test_one_one_point_oh_and_true_are_three_configurations(
    manager: SessionManager, tmp_path: Path
) -> None:
    """1, 1.0 and True are equal and hash alike: keyed by value, the ``x=True`` run stood on
    all three rows."""
    spec = SweepSpec((parse_sweep_option("x=[1, 1.0, True]"),))
    sweep, out = _sweep(manager, tmp_path, "print('ran', repr(x))", spec)
    assert [line for line in out if line.startswith("ran")] == ["ran 1", "ran 1.0", "ran True"]
    assert len(sweep.runs) == 3
    for value in (1, 1.0, True):
        bound = sweep.run(x=value).bound_values["x"]
        assert type(bound) is type(value) and bound == value
    assert [type(c.values["x"]) for c in sweep.record.configs] == [int, float, bool]
    assert [c.label for c in sweep.record.configs] == ["x=1", "x=1.0", "x=True"]
    assert sweep.frames.axis_scale("x") == "ordinal"  # three values, not one
    assert len({id(run) for run in sweep.runs.values()}) == 3


def test_a_value_given_twice_is_refused() -> None:
    with pytest.raises(BadArgumentError, match="gives the value 8 twice"):
        SweepSpec((("bs", (1, 8, 8)),))
    SweepSpec((("x", (1, 1.0, True)),))  # three written forms: three values


def test_list_values_in_a_sweep_json_load(tmp_path: Path) -> None:
    from test_sweep_run import write_sweep

    folder = write_sweep(tmp_path, variable="v", values=([1, 2], [3]))
    sweep = nsight_magic.load_run(folder)
    assert isinstance(sweep, SweepRun)
    assert sweep.run(v=[1, 2]).kernel_summary()["total_ns"].sum() > 0
    assert sweep.table()["v"].tolist()[:2] == [[1, 2], [3]]
    sweep.time_chart("v")  # builds: the values are shown as their text


def test_sweep_json_never_stays_pending_after_an_error_that_is_not_ours(tmp_path: Path) -> None:
    calls: list[Any] = []

    def profile(request: Any, backend: Any, **kwargs: Any) -> Any:
        calls.append(request.bind)
        if len(calls) == 2:
            raise TypeError("something inside broke")
        raise SweepFailedError("this configuration failed")  # a typed error: a row

    request = CellRequest(cell="y = bs", name="sw", runs_root=tmp_path / "runs")
    with pytest.raises(TypeError, match="inside broke"):
        run_sweep(profile, request, BareBackend(), SweepSpec((("bs", (1, 2, 3)),)))
    (folder,) = (tmp_path / "runs").iterdir()
    record = json.loads((folder / RunDir.SWEEP).read_text())
    statuses = [c["status"] for c in record["configs"]]
    assert statuses == ["failed", "failed", "cancelled"] and record["finished_utc"]
    assert "TypeError: something inside broke" in record["configs"][1]["error"]


# --- 2. swept names that would leak ------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    ["__name__", "In", "Out", "_", "__", "_i", "_3", "__builtins__", "__doc__",
     "__nsight_magic_shared__", "_exit_code", "get_ipython", "True"],
)  # fmt: skip
def test_a_name_later_cells_rely_on_cannot_be_swept(
    name: str, ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ``--sweep __name__=1,2`` a later cell saw ``__name__ == 2``; sweeping
    ``__builtins__`` broke every later cell. Refused before anything runs, by the magic and by
    ``nsight_magic.sweep`` alike."""
    from IPython.core.error import UsageError

    from nsight_magic.session import manager as manager_module

    seen: list[Any] = []
    monkeypatch.setattr(manager_module.MANAGER, "sweep", lambda *a, **k: seen.append(a))
    with pytest.raises(BadArgumentError, match=f"{name} cannot be swept"):
        SweepSpec(((name, (1, 2)),))
    with pytest.raises(BadArgumentError, match="cannot be swept"):
        nsight_magic.sweep("y = 1", {name: [1, 2]})
    with pytest.raises(UsageError, match="cannot be swept"):
        ip.run_cell_magic("nsight_nsys", f"--sweep {name}=1,2", "y = 1")
    assert seen == []


# --- 4. bounds, and the line as typed -----------------------------------------------------------
def test_a_sweep_over_its_bound_is_refused_before_anything_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10 variables x 10 values were built as one list of 10**10 configurations first."""
    from nsight_magic.session import manager as manager_module

    seen: list[Any] = []
    monkeypatch.setattr(manager_module.MANAGER, "sweep", lambda *a, **k: seen.append(a))
    values = {f"v{i}": list(range(10)) for i in range(10)}
    t0 = time.perf_counter()
    with pytest.raises(BadArgumentError, match=r"10,000,000,000 configurations.*sweep_max_configs"):
        nsight_magic.sweep("y = 1", values, runs_root=str(tmp_path / "runs"))
    with pytest.raises(BadArgumentError, match="10,000,000,000 configurations"):
        run_sweep(lambda *a, **k: None, CellRequest(cell="y = 1", runs_root=tmp_path / "runs"),
                  BareBackend(), SweepSpec.of(values))  # fmt: skip
    assert time.perf_counter() - t0 < 5
    assert seen == [] and not (tmp_path / "runs").exists()
    with pytest.raises(BadArgumentError, match="sweep_max_values"):
        SweepSpec.of({"bs": range(20_000)}).check(SweepLimits())
    SweepSpec.of({"bs": range(4)}).check(SweepLimits(max_configs=4))


def test_the_bounds_are_configurable_and_the_magic_checks_them_first(
    ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.core.error import UsageError
    from traitlets import TraitError

    from nsight_magic.session import manager as manager_module

    seen: list[Any] = []
    monkeypatch.setattr(manager_module.MANAGER, "sweep",
                        lambda request, backend, spec, **k: seen.append(k["limits"]))  # fmt: skip
    magics = ip.magics_manager.registry["NsightMagic"]
    try:
        ip.run_line_magic("config", "NsightMagic.sweep_max_configs = 5")
        with pytest.raises(UsageError, match=r"3 bs x 2 s are 6 configurations.*bound of 5"):
            ip.run_cell_magic("nsight_nsys", "--sweep bs=1,2,3 --sweep s=1,2", "y = bs")
        with pytest.raises(BadArgumentError, match="bound of 5"):
            nsight_magic.sweep("y = bs", {"bs": [1, 2, 3], "s": [1, 2]})
        ip.run_cell_magic("nsight_nsys", "--sweep bs=1,2,3,4,5", "y = bs")
        assert seen == [SweepLimits(max_configs=5)]
        with pytest.raises(TraitError, match=">= 1"):
            magics.sweep_max_configs = 0
    finally:
        magics.sweep_max_configs = SweepLimits().max_configs


def test_a_line_of_100000_values_is_refused_at_once_not_expanded(
    ip: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IPython's $var/{var} expansion of the magic line is quadratic: 8,000 values took 12 s,
    100,000 hung. The line is taken as typed (``@no_var_expand``)."""
    from IPython.core.error import UsageError

    from nsight_magic.session import manager as manager_module

    seen: list[Any] = []
    monkeypatch.setattr(manager_module.MANAGER, "sweep",
                        lambda request, backend, spec, **k: seen.append(request))  # fmt: skip
    line = "--sweep x=" + ",".join(str(i) for i in range(100_000))
    t0 = time.perf_counter()
    with pytest.raises(UsageError, match=r"100,000 values.*sweep_max_values"):
        ip.run_cell_magic("nsight_nsys", line, "y = x")
    assert time.perf_counter() - t0 < 10
    result = ip.run_cell("%%nsys --sweep x=" + ",".join(map(str, range(100_000))) + "\ny = x")
    assert isinstance(result.error_in_exec, UsageError)
    assert time.perf_counter() - t0 < 20
    ip.user_ns["label"] = "expanded"
    ip.run_cell_magic("nsight_nsys", "--sweep x=1 --name {label}", "y = x")
    assert seen[-1].name == "{label}"  # as typed (docs/options.md)


# --- 5. arguments, damaged records, failures ----------------------------------------------------
@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("y = bs", {1: [1, 2]}), {}, "variable name 1 is not a string"),
        ((5, {"bs": [1]}), {}, "cell is 5"),
        ((None, {"bs": [1]}), {}, "cell is None"),
        (("y = bs", None), {}, "values is None"),
        (("y = bs", [1, 2]), {}, "values is"),
        (("y = bs", {"bs": [1]}), {"warmup": -1}, "warmup is -1"),
        (("y = bs", {"bs": [1]}), {"warmup": 10**6}, "warmup is 1000000"),
        (("y = bs", {"bs": [1]}), {"timeout": "x"}, "timeout is 'x'"),
        (("y = bs", {"bs": [1]}), {"timeout": -1.0}, "timeout is -1.0"),
        (("y = bs", {"bs": [1]}), {"name": 3}, "name is 3"),
        (("y = bs", {"bs": [1]}), {"fresh": "yes"}, "fresh is 'yes'"),
        (("y = bs", {"bs": [1]}), {"cancel": 1}, "cancel is 1"),
        (("y = bs", {"bs": [1]}), {"output": "x"}, "output is 'x'"),
        (("y = bs", {"bs": []}), {}, "bs has no values"),
        (("y = bs", {"bs": 8}), {}, "as a list"),
    ],
)
def test_sweep_arguments_are_typed_errors(
    args: tuple[Any, ...], kwargs: dict[str, Any], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nsight_magic.session import manager as manager_module

    monkeypatch.setattr(manager_module.MANAGER, "sweep", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(BadArgumentError, match=match):
        nsight_magic.sweep(*args, **kwargs)


def _all_failed(tmp_path: Path) -> SweepRun:
    record = SweepRecord(name="sw", variables=["bs"], configs=[
        ConfigRecord(0, {"bs": 1}, "", "failed", "The profiled cell raised OutOfMemoryError"),
        ConfigRecord(1, {"bs": 2}, "", "failed", "The profiled cell raised OutOfMemoryError"),
    ])  # fmt: skip
    return SweepRun(record, tmp_path, {})


def test_mfu_of_a_sweep_whose_every_configuration_failed_says_why_it_is_blank(
    tmp_path: Path,
) -> None:
    sweep = _all_failed(tmp_path)
    with pytest.warns(EmptyResultWarning, match="no configuration of this sweep has a report"):
        frame = sweep.mfu()
    assert frame.empty and "2 failed" in frame.attrs["reason"]
    assert {"config", "bs", "mfu_frac", "reason"} <= set(frame.columns)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyResultWarning)
        chart = sweep.mfu_chart()  # raised KeyError: 'domain'
    assert "blank" in json.dumps(chart.to_dict()["title"])


def test_mfu_without_flops_says_why_it_is_empty(tmp_path: Path) -> None:
    from test_sweep_run import write_sweep

    sweep = nsight_magic.load_run(write_sweep(tmp_path))
    with pytest.warns(EmptyResultWarning, match="No MFU in any configuration") as warned:
        frame = sweep.mfu()
    assert frame.empty and frame.attrs["reason"].startswith("No MFU in any configuration")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reason = sweep.run("naive").mfu().attrs["reason"]  # the configuration's own
    # ours among the warnings (an old pandas adds numpy's DeprecationWarning beside it)
    (ours,) = [w for w in warned if issubclass(w.category, EmptyResultWarning)]
    assert reason in frame.attrs["reason"] and str(ours.message) == frame.attrs["reason"]


@pytest.mark.parametrize("index", ["a", -1, 1.5, True, [0]])
def test_a_damaged_index_in_sweep_json_is_a_damaged_folder(tmp_path: Path, index: Any) -> None:
    from test_sweep_run import write_sweep

    folder = write_sweep(tmp_path)
    data = json.loads((folder / RunDir.SWEEP).read_text())
    data["configs"][1]["index"] = index
    (folder / RunDir.SWEEP).write_text(json.dumps(data))
    with pytest.raises(DamagedFolderError, match="index"):
        nsight_magic.load_run(folder)


def test_a_sweep_whose_every_configuration_failed_fails_its_cell(
    manager: SessionManager, tmp_path: Path
) -> None:
    """docs/troubleshooting.md: a failed profile fails its cell (Run All stops there); a
    sweep of failures returned a SweepRun as if it had worked."""
    cell = "raise MemoryError(f'bs {bs} does not fit')"
    with pytest.raises(SweepFailedError, match=r"Every configuration of the sweep failed") as err:
        _sweep(manager, tmp_path, cell, SweepSpec((("bs", (1, 2)),)))
    sweep = err.value.run
    assert isinstance(sweep, SweepRun)
    assert [c["status"] for c in _record(sweep)["configs"]] == ["failed", "failed"]
    assert "bs 1 does not fit" in str(err.value)
    # one configuration that worked is a sweep that worked
    ok, _ = _sweep(manager, tmp_path, "if bs == 2:\n    " + cell, SweepSpec((("bs", (1, 2)),)))
    assert [c.status for c in ok.record.configs] == ["ok", "failed"]


def test_the_magic_shows_and_keeps_a_sweep_that_failed(
    ip: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from nsight_magic.session import manager as manager_module

    failed = _all_failed(tmp_path)

    def sweep(*args: Any, **kwargs: Any) -> Any:
        raise SweepFailedError("Every configuration of the sweep failed", run=failed)

    monkeypatch.setattr(manager_module.MANAGER, "sweep", sweep)
    result = ip.run_cell("%%nsight_nsys --sweep bs=1,2 -o sw_failed\ny = bs")
    assert isinstance(result.error_in_exec, SweepFailedError)
    assert ip.user_ns.pop("sw_failed") is failed and nsight_magic.last_run() is failed


def _config_folder(tmp_path: Path) -> Path:
    """The real sweep fixture's bs=4 configuration (its report, meta.json and vars.pkl) with
    a cell and a script (the fixture, a shared copy, keeps neither)."""
    sweep = tmp_path / "prefill"
    shutil.copytree(SWEEP_FIXTURE, sweep, ignore=shutil.ignore_patterns("ncu"))
    for config in ("01-bs_1", "02-bs_4"):
        write_private(RunDir(sweep / config).cell, "logits = model(ids[:bs])\n")
        write_private(RunDir(sweep / config).script, "print('saved script')\n")
    return sweep


@pytest.mark.filterwarnings("ignore::nsight_magic.errors.FolderSettingsIgnored")
def test_a_shared_sweeps_configuration_cannot_be_re_profiled_and_says_why(
    tmp_path: Path, drill_manager: Any
) -> None:
    """share() leaves vars.pkl out, so a cold re-run of a configuration's script stopped at
    ``NameError: bs`` after ncu started."""
    manager, seen = drill_manager
    sweep = _config_folder(tmp_path)
    assert (sweep / "02-bs_4" / RunDir.VARS).exists()
    copy = nsight_magic.share(sweep, tmp_path / "shared")
    assert not (copy / "02-bs_4" / RunDir.VARS).exists()
    from nsight_magic.results.loading import load_run

    loaded = load_run(copy, drill_runner=manager.drills)
    config = loaded.run(bs=4)
    kernel = str(config.kernel_summary()["name"].iloc[0])
    with pytest.raises(MissingVariableError, match=r"reads bs.*shared copy") as err:
        config.profile_kernel(kernel)
    assert err.value.names == ["bs"] and seen == []
    assert not (copy / "02-bs_4" / "ncu").exists()
    # the original folder, with its vars.pkl, still re-runs (as far as this fake goes)
    with pytest.raises(Captured):
        load_run(sweep / "02-bs_4", drill_runner=manager.drills).profile_kernel(kernel)


# --- 3. a run loaded by a relative path ---------------------------------------------------------
@pytest.mark.filterwarnings("ignore::nsight_magic.errors.FolderSettingsIgnored")
def test_a_run_loaded_by_a_relative_path_is_re_profiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ncu_reports: dict[str, Path]
) -> None:
    """``load_run("nsight-runs/<run>")`` then ``profile_kernel``/``profile_top`` raised
    ``ValueError ... is not in the subpath`` after the ncu run (the child's folder is made
    absolute, the parent's stayed relative), and the child was lost from the parent's
    children. The fake profile hands back a real ncu report (there is no ncu here)."""
    from nsight_magic.processes.locate import Tool
    from nsight_magic.reports.ncu.report import NcuReport
    from nsight_magic.results import NcuRun
    from nsight_magic.results.loading import load_run
    from nsight_magic.session.backends import NcuBackend

    manager = SessionManager()

    def profile(request: Any, backend: Any, **kwargs: Any) -> Any:
        run_dir = Path(kwargs["rerun"].run_dir)
        shutil.copy(ncu_reports["ncu_sweep_top"], run_dir / "report.ncu-rep")
        write_json(RunDir(run_dir).meta, {"tool": "ncu", **kwargs["rerun"].meta})
        return NcuRun(NcuReport.open(run_dir / "report.ncu-rep"), run_dir,
                      dict(kwargs["rerun"].meta), parent=kwargs["rerun"].parent)  # fmt: skip

    monkeypatch.setattr(manager, "profile", profile)
    monkeypatch.setattr(NcuBackend, "locate", lambda self: Tool(name="ncu", path="ncu"))
    sweep = _config_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    run = load_run("prefill/02-bs_4", drill_runner=manager.drills)
    assert run.run_dir == tmp_path / "prefill" / "02-bs_4" and run.run_dir.is_absolute()
    kernel = str(run.kernel_summary()["name"].iloc[0])
    child = run.profile_kernel(kernel)
    top = run.profile_top(1)
    for made in (child, top):
        assert Path(made.run_dir).parent == sweep / "02-bs_4" / "ncu"
    children = (RunDir(sweep / "02-bs_4").read_meta().children or [])[-2:]
    assert [Path(c["run_dir"]).name for c in children] == [child.run_dir.name, top.run_dir.name]
    assert not any(Path(c["run_dir"]).is_absolute() for c in children)
    sweep_run = nsight_magic.load_run("prefill")
    assert sweep_run.run_dir == sweep and sweep_run.run(bs=4).run_dir.is_absolute()


def _damaged_sweep(tmp_path: Path) -> Path:
    """The bundled two-configuration sweep, copied, with its second configuration's run
    folder deleted (sweep.json still says it ran ok)."""
    sweep = tmp_path / "runs" / "sw"
    shutil.copytree(SWEEP_FIXTURE, sweep, ignore=shutil.ignore_patterns("ncu"))
    shutil.rmtree(sweep / "02-bs_4")
    return sweep


def test_a_sweep_missing_a_configuration_folder_says_so_everywhere_alike(tmp_path: Path) -> None:
    """list_runs called it ok while load_run and share() raised ReportNotFoundError (and share
    left its destination half written): now all three open what is there and say the rest is
    damaged: list_runs' status, load_run's DamagedFolderWarning and table(), and the copy,
    whose own record says that configuration failed and why."""
    sweep = _damaged_sweep(tmp_path)
    (row,) = nsight_magic.list_runs(tmp_path / "runs").itertuples()
    assert row.status == "1 ok, 1 failed (damaged)"
    with pytest.warns(DamagedFolderWarning, match=r"damaged: 1 configuration.*bs=4"):
        loaded = nsight_magic.load_run(sweep)
    assert isinstance(loaded, SweepRun) and list(loaded.runs) == [ConfigKey((1,))]
    table = loaded.table()
    assert table["status"].tolist() == ["ok", "failed"]
    assert "'02-bs_4' is missing" in table["error"].iloc[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedFolderWarning)  # the copy is whole as it is
        out = nsight_magic.share(sweep, tmp_path / "out")
        copy = nsight_magic.load_run(out)
    assert (out / RunDir.SWEEP_PAGE).is_file() and not (out / "02-bs_4").exists()
    assert json.loads((out / "share.json").read_text())["left_out"] == ["02-bs_4"]
    assert [c.status for c in copy.record.configs] == ["ok", "failed"]
    assert "'02-bs_4' is missing" in (copy.record.configs[1].error or "")
    listed = nsight_magic.list_runs(tmp_path).set_index("run_dir")["status"]
    assert listed[str(tmp_path / "out")] == "1 ok, 1 failed"


def test_a_sweep_share_that_fails_leaves_nothing_and_can_be_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The share page was written after the copy was renamed into place: a failure there (a
    full disk, here) left the destination without index.html, and the retry was
    FolderExistsError. The page is now part of the copy before it appears."""
    from nsight_magic.views import sweep_view

    sweep = tmp_path / "sw"
    shutil.copytree(SWEEP_FIXTURE, sweep, ignore=shutil.ignore_patterns("ncu"))
    dest = tmp_path / "out"

    def full_disk(*args: Any, **kwargs: Any) -> str:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(sweep_view, "share_page_html", full_disk)
        for share in (nsight_magic.share, lambda s, d: nsight_magic.load_run(s).share(d)):
            with pytest.raises(OSError, match="No space left"):
                share(sweep, dest)
            assert sorted(p.name for p in tmp_path.iterdir()) == ["sw"]  # no copy, no scratch
    assert (nsight_magic.share(sweep, dest) / RunDir.SWEEP_PAGE).is_file()


def test_a_shared_sweeps_page_names_no_path_for_a_report_it_cannot_read(tmp_path: Path) -> None:
    """A configuration whose report cannot be read (its string table deleted) is copied as it
    is; the page says why its numbers are missing without the copy's path (it named the
    scratch folder, or the destination's absolute path)."""
    sweep = tmp_path / "sw"
    shutil.copytree(SWEEP_FIXTURE, sweep, ignore=shutil.ignore_patterns("ncu"))
    (sweep / "02-bs_4" / "report_pq" / "StringIds.parquet").unlink()
    page = (nsight_magic.share(sweep, tmp_path / "out") / RunDir.SWEEP_PAGE).read_text()
    assert "StringIds" in page and str(tmp_path) not in page and ".sharing" not in page


def test_every_error_here_is_ours() -> None:
    for error in (SweepFailedError, DamagedFolderError, MissingVariableError, BadArgumentError):
        assert issubclass(error, NsightMagicError)
