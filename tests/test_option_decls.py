"""The profilers' options are declared once (``NsysOptions`` / ``NcuOptions`` fields with their
flag, help and choices, ``profilers/options.py``): the magics' flags generated from them accept
and refuse exactly what the hand-written ones did (kept below as the reference), ``%%ncu?``
shows each option once, meta.json's ``options`` round-trips (saved runs of the repository too),
and every option declared drill-able reaches the ncu argv of a drill-down's child run."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from drill_support import Captured
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic_arguments import MagicArgumentParser

from nsight_magic.magic import magics
from nsight_magic.magic.options import split_extra
from nsight_magic.processes.locate import Tool
from nsight_magic.profilers import ncu as ncu_argv
from nsight_magic.profilers import nsys as nsys_argv
from nsight_magic.profilers import options as decl
from nsight_magic.profilers.drill_request import DRILL_OPTIONS, DrillRequest
from nsight_magic.profilers.ncu import NcuOptions
from nsight_magic.profilers.nsys import NsysOptions
from nsight_magic.results import load_run
from nsight_magic.results.nsys_run import NsysRun
from nsight_magic.session.backends import NcuBackend, NsysBackend

REPO = Path(__file__).resolve().parent.parent


# --- the reference: the flags as magic/magics.py declared them by hand before
# ----------------------
def _with_common(name: str) -> MagicArgumentParser:
    """A parser with the options both magics share (unchanged; they decide what an
    abbreviation such as ``--py`` means), as magic/magics.py still declares them."""

    def cell() -> None: ...

    parser = MagicArgumentParser(name)
    for deco in magics._common(cell).decorators[::-1]:
        deco.add_to_parser(parser, None)
    return parser


def _old_ncu_parser() -> MagicArgumentParser:
    p = _with_common("nsight_ncu")
    p.add_argument("--rank", type=int, default=0, metavar="R")
    p.add_argument("--set", dest="set_", default="roofline", metavar="SET")
    p.add_argument("--section", action="append", default=[])
    p.add_argument("--metrics", default="", metavar="M1,M2")
    p.add_argument("--kernel", default=None, metavar="REGEX")
    p.add_argument("--launch-skip", type=int, default=None, metavar="N")
    p.add_argument("--launch-count", type=int, default=None, metavar="N")
    p.add_argument("--nvtx", default=None, metavar="RANGE")
    return p


def _old_ncu(line: str) -> NcuOptions:
    args = _old_ncu_parser().parse_args(split_extra(line)[0])
    for flag in ("launch_skip", "launch_count"):
        if getattr(args, flag) is not None and getattr(args, flag) < 0:
            raise UsageError(f"--{flag.replace('_', '-')} must be >= 0")
    return NcuOptions(
        set=None if args.set_ in ("none", "") else args.set_,
        sections=tuple(args.section),
        metrics=tuple(m.strip() for m in args.metrics.split(",") if m.strip()),
        kernel_regex=args.kernel,
        launch_skip=args.launch_skip,
        launch_count=args.launch_count,
        extra_args=tuple(split_extra(line)[1]),
        nvtx_target=args.nvtx or None,  # (then resolved by MANAGER.drills.ncu_nvtx_options, as now)
    )


_OLD_PYTORCH = {"off": None, "ops": "autograd-nvtx", "shapes": "autograd-shapes-nvtx"}


def _old_nsys(line: str) -> NsysOptions:
    p = _with_common("nsight_nsys")
    p.add_argument("--trace", default="cuda,nvtx")
    p.add_argument("--cuda-graph-trace", choices=["node", "graph"], default="node")
    p.add_argument("--pytorch", choices=sorted(_OLD_PYTORCH), default="off")
    p.add_argument("--host", action="store_true")
    ours, extra = split_extra(line)
    args = p.parse_args(ours)
    try:
        trace = nsys_argv.parse_trace(args.trace)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return NsysOptions(trace=trace, cuda_graph_trace=args.cuda_graph_trace,
                       pytorch=_OLD_PYTORCH[args.pytorch],  # type: ignore[arg-type]
                       extra_args=tuple(extra), host=args.host)  # fmt: skip


def _new(magic: Any, options: type, line: str) -> Any:
    ours, extra = split_extra(line)
    return magics._options(options, magic.parser.parse_args(ours), extra)


def _outcome(call: Any, line: str) -> tuple[str, Any]:
    try:
        return "ok", call(line)
    except UsageError as exc:
        return "UsageError", str(exc)


NCU_LINES = [
    "", "--set full", "--set none", "--set ''", "--set", "--section A --section B", "--section",
    "--metrics 'a, b,,c'", "--metrics ''", "--kernel gemm", "--kernel=a.*b", "--kernel ''",
    "--launch-skip 2 --launch-count 1", "--launch-count notanumber", "--launch-skip -1",
    "--launch-count -3", "--launch-skip 1.5", "--nvtx LLM:prefill", "--nvtx ''", "--nvtx",
    "--bogus", "--set full -- --replay-mode application", "--sections A", "--metric m",
]  # fmt: skip
NSYS_LINES = [
    "", "--trace cuda,nvtx,osrt", "--trace ' cuda , nvtx '", "--trace cudda", "--trace ''",
    "--trace", "--cuda-graph-trace graph", "--cuda-graph-trace bad", "--pytorch ops",
    "--pytorch shapes", "--pytorch off", "--pytorch on", "--host", "--host --trace cuda",
    "--host=1", "--bogus", "-- --sample=cpu", "--cuda-graph", "--py ops",
]  # fmt: skip


@pytest.mark.parametrize("line", NCU_LINES)
def test_generated_ncu_flags_accept_and_refuse_what_the_old_ones_did(line: str) -> None:
    new = _outcome(lambda text: _new(magics.NsightMagic.ncu, NcuOptions, text), line)
    assert new == _outcome(_old_ncu, line)


@pytest.mark.parametrize("line", NSYS_LINES)
def test_generated_nsys_flags_accept_and_refuse_what_the_old_ones_did(line: str) -> None:
    new = _outcome(lambda text: _new(magics.NsightMagic.nsys, NsysOptions, text), line)
    assert new == _outcome(_old_nsys, line)


def test_every_flag_of_the_declarations_is_a_magic_flag_and_no_other() -> None:
    for magic, options in ((magics.NsightMagic.ncu, NcuOptions),
                           (magics.NsightMagic.nsys, NsysOptions)):  # fmt: skip
        flags = {a.option_strings[0] for a in magic.parser._actions}
        declared = {s.flag for _, s in decl.flagged(options)}
        assert declared <= flags
        assert {"--set", "--section", "--metrics", "--kernel", "--launch-skip", "--launch-count",
                "--nvtx"} <= flags or options is NsysOptions  # fmt: skip
    assert {s.flag for _, s in decl.flagged(NsysOptions)} == {
        "--trace", "--cuda-graph-trace", "--pytorch", "--host", "--nvtx", "--memory"}  # fmt: skip


# --- help -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "options"), [("ncu", NcuOptions), ("nsys", NsysOptions)])
def test_help_shows_one_usage_and_each_option_once(
    ip: InteractiveShell, name: str, options: type
) -> None:
    doc = ip.object_inspect(f"%%{name}")["docstring"] or ""
    # the help names the magic as typed (%%nsys? shows %%nsys)
    assert doc.count("Usage::") == 1 and doc.count(f"%%{name} [") == 1
    assert not re.search(rf"(?m)^\s*%nsight_{name}\b", doc)  # IPython's own usage line is gone
    usage, _, rest = doc.partition("Options::")
    for action in getattr(ip.find_cell_magic(name), "parser")._actions:  # noqa: B009
        flag = action.option_strings[0]
        assert len(re.findall(rf"\[{re.escape(flag)}\b", usage)) == 1, flag
        assert len(re.findall(rf"(?m)^\s+{re.escape(flag)}\b", rest)) == 1, flag
    flat = " ".join(rest.split())
    for _, spec in decl.flagged(options):
        assert " ".join(spec.help.split()) in flat, spec.flag
    assert f"[-- extra {name} arguments]" in usage


# --- meta.json ----------------------------------------------------------------------------------
def test_options_meta_keeps_the_keys_saved_runs_have() -> None:
    """The keys the hand-written dicts had (a new option adds its own)."""
    nsys_keys = ["trace", "cuda_graph_trace", "pytorch", "extra_args", "host"]
    ncu_keys = ["set", "sections", "metrics", "kernel", "launch_skip", "launch_count",
                "nvtx_include", "nvtx_exclude", "extra_args", "nvtx_target"]  # fmt: skip
    for keys, meta in ((nsys_keys, NsysBackend().options_meta()),
                       (ncu_keys, NcuBackend().options_meta())):  # fmt: skip
        assert [k for k in meta if k in keys] == keys
        assert json.loads(json.dumps(meta)) == meta  # plain JSON: lists, not tuples
    exact = NcuBackend(NcuOptions(kernel_exact="k", launch_skip=0, launch_count=1))
    assert exact.options_meta()["kernel"] == "k"


@pytest.mark.parametrize(
    "options",
    [
        NsysOptions(),
        NsysOptions(
            trace=("cuda", "osrt"),
            cuda_graph_trace="graph",
            pytorch="autograd-nvtx",
            extra_args=("--sample=cpu",),
            host=True,
        ),
        NcuOptions(),
        NcuOptions(
            set=None,
            sections=("A", "B"),
            metrics=("m1",),
            kernel_regex="gemm.*",
            launch_skip=2,
            launch_count=3,
            nvtx_include=(),
            nvtx_exclude=("d@r/",),
            extra_args=("--cache-control", "none"),
            nvtx_target="LLM:prefill",
        ),
    ],
)
def test_options_meta_round_trips_through_json(options: Any) -> None:
    saved = json.loads(json.dumps(decl.options_meta(options)))
    assert decl.options_from_meta(type(options), saved) == options


def test_saved_runs_options_read_back_the_same() -> None:
    metas = sorted(REPO.glob("notebooks/runs/**/meta.json"))
    checked = 0
    for path in metas:
        meta = json.loads(path.read_text())
        cls = {"nsys": NsysOptions, "ncu": NcuOptions}.get(meta.get("tool"))
        if cls is None or "options" not in meta:
            continue
        saved = meta["options"]
        again = decl.options_meta(decl.options_from_meta(cls, saved))
        assert {k: again[k] for k in saved} == saved
        # keys of options added since: their defaults
        assert {k: v for k, v in again.items() if k not in saved} == {
            k: v for k, v in decl.options_meta(cls()).items() if k not in saved}  # fmt: skip
        checked += 1
    if not checked:
        pytest.skip("no saved run with options in notebooks/runs")
    # a run saved before an option existed reads with that option's default
    assert decl.options_from_meta(NsysOptions, {"trace": ["cuda"]}) == NsysOptions(trace=("cuda",))


# --- drill-downs ------------------------------------------------------------------------------
def _sample(name: str) -> Any:
    """A value other than the default for the drill-able field ``name``, from its type."""
    field = {f.name: f for f in dataclasses.fields(NcuOptions)}[name]
    hint = typing.get_type_hints(NcuOptions)[name]
    kinds = set(typing.get_args(hint)) or {hint}
    if name == "set":
        return "full"
    if isinstance(field.default, tuple):
        return (f"probe_{name}_a", f"probe_{name}_b")
    if bool in kinds:
        return not field.default
    if int in kinds:
        return 7
    return f"probe_{name}"


def test_drill_able_options_are_declared() -> None:
    assert decl.drill_fields(NcuOptions) == DRILL_OPTIONS
    assert {"set", "sections", "metrics"} <= set(DRILL_OPTIONS)


@pytest.mark.parametrize("name", DRILL_OPTIONS)
@pytest.mark.parametrize("how", ["kernel", "range"])
def test_each_drill_able_option_reaches_the_child_runs_ncu_argv(
    drill_manager: Any, saved_parent: Path, tmp_path: Path, name: str, how: str
) -> None:
    """Through the public ``NsysRun.profile_kernel`` / ``profile_range`` and session/runs/drill.py,
    which names no option: the child's NcuOptions carry the value and both argv builders (a
    fresh ncu run, an attach to the warm worker) differ from the default's."""
    manager, seen = drill_manager
    run = load_run(saved_parent, drill_runner=manager.drills)
    value = _sample(name)
    with pytest.raises(Captured):
        if how == "kernel":
            run.profile_kernel(str(run.kernels()["name"].iloc[0]), **{name: value})
        else:
            run.profile_range("LLM", "prefill", **{name: value})
    request, backend, _ = seen[0]
    assert getattr(backend.options, name) == value
    plain = dataclasses.replace(backend.options, **{name: getattr(NcuOptions(), name)})
    tool = Tool(name="ncu", path="ncu")
    for build in (
        lambda o: NcuBackend(o).fresh_argv(tool, tmp_path, request),
        lambda o: ncu_argv.attach_argv("ncu", 49200, tmp_path / "report", o),
    ):
        argv, default_argv = build(backend.options), build(plain)
        assert argv != default_argv, name
        strings = value if isinstance(value, tuple) else (value,)
        for text in (s for s in strings if isinstance(s, str)):
            assert text in " ".join(argv), (name, argv)


def test_profile_kernel_and_range_take_every_drill_able_option_by_name() -> None:
    """Their keyword-only parameters are explicit (so a wrong name is Python's TypeError);
    this keeps them in step with the declarations."""
    import inspect

    for method in (NsysRun.profile_kernel, NsysRun.profile_range, NsysRun.profile_top):
        keyword_only = {
            p.name
            for p in inspect.signature(method).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        }
        assert set(DRILL_OPTIONS) <= keyword_only, method.__name__


def test_a_drill_request_refuses_what_a_drill_down_does_not_set() -> None:
    with pytest.raises(TypeError, match=r"bogus.*set, sections, metrics"):  # the drill-able
        DrillRequest.create("k", bogus=1)
    with pytest.raises(TypeError, match="kernel_regex"):
        DrillRequest.create("k", kernel_regex="x")  # the drill-down's own filter
    with pytest.raises(TypeError, match="launch_skip"):
        DrillRequest(kernel="k", ncu=NcuOptions(launch_skip=3))
    with pytest.raises(ValueError, match="count"):
        DrillRequest(kernel="k", count=0)
    request = DrillRequest.create("k", instance=2, count=3, set="full", metrics=["m"])
    assert request.ncu == NcuOptions(set="full", metrics=("m",))
    text = DrillRequest.create("k", set="none", sections="SpeedOfLight", metrics="m1, m2")
    assert text.ncu == NcuOptions(set=None, sections=("SpeedOfLight",), metrics=("m1", "m2"))
    collected = request.collect()
    assert set(collected) == set(DRILL_OPTIONS)
    assert {k: collected[k] for k in ("set", "sections", "metrics")} == {
        "set": "full", "sections": (), "metrics": ("m",)}  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.count = 5  # type: ignore[misc]


def test_an_nccl_kernel_gets_single_pass_metrics_whatever_was_asked(
    drill_manager: Any, saved_parent: Path
) -> None:
    manager, seen = drill_manager
    run = load_run(saved_parent, drill_runner=manager.drills)
    with pytest.raises(Captured):
        run.profile_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", set="full", sections=("A",))
    options = seen[0][1].options
    assert options.set is None and options.sections == () and "nccl" in options.kernel_exact
    assert options.metrics == ("gpu__time_duration.sum", "launch__grid_size",
                               "launch__block_size", "launch__registers_per_thread")  # fmt: skip


# --- the generator on a declaration of every kind ---------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Every:
    mode: typing.Literal["a", "b"] = decl.option("a", "--mode", "a or b.")
    count: int | None = decl.option(None, "--count", "A count.", metavar="N")
    seconds: float = decl.option(1.5, "--seconds", "Seconds.")
    quiet: bool = decl.option(False, "--quiet", "Say less.")
    tags: tuple[str, ...] = decl.option((), "--tag", "A tag (repeatable).", repeat=True)
    level: str | None = decl.option(None, "--level", "Level.", cli={"off": None, "hi": "high"})
    first: str | None = decl.option(None, "--first", "First.", meta_key="both")
    second: str | None = decl.option(None, meta_key="both")


def test_the_generator_on_every_kind_of_field() -> None:
    parser = MagicArgumentParser("every")
    for flags, kwargs in decl.argument_specs(_Every):
        parser.add_argument(*flags, **kwargs)
    line = "--mode b --count 3 --seconds 0.25 --quiet --tag x --tag y --level hi --first f"
    parsed = decl.from_args(_Every, parser.parse_args(line.split()))
    assert parsed == _Every(mode="b", count=3, seconds=0.25, quiet=True, tags=("x", "y"),
                            level="high", first="f")  # fmt: skip
    assert decl.from_args(_Every, parser.parse_args([])) == _Every()
    for bad in ("--mode c", "--count x", "--seconds x", "--level on", "--second s"):
        with pytest.raises(UsageError):
            parser.parse_args(bad.split())
    meta = decl.options_meta(_Every(second="s"))
    assert meta["both"] == "s" and meta["tags"] == [] and "second" not in meta
    assert decl.options_meta(_Every(first="f", second="s"))["both"] == "f"
    assert decl.options_from_meta(_Every, meta) == _Every(first="s")  # a shared key: the first


@pytest.mark.parametrize("typed", ["nsys", "ncu", "nsight_nsys", "nsight_ncu"])
def test_each_options_text_keeps_to_its_column(ip: InteractiveShell, typed: str) -> None:
    """``%%nsys?`` (the help respelled for the short name) wrapped every option's text 7
    columns left of where ``%%nsight_nsys?`` has it: each line of an option's text, the first
    and every continuation, starts at one column."""
    doc = ip.object_inspect(f"%%{typed}")["docstring"] or ""
    options = doc.partition("Options::\n\n")[2].split("\n\n")[0].splitlines()
    assert len(options) > 10, doc
    columns = set()
    for line in options:
        if line.startswith("  -"):  # flags, then (two spaces on) the text when it fits there
            text = re.search(r"\S  +(\S)", line)
            if text is not None:
                columns.add(text.start(1))
        else:  # a continuation, or the text under flags too long to leave room for it
            columns.add(len(line) - len(line.lstrip(" ")))
    assert len(columns) == 1, (columns, "\n".join(options))
