"""The docs stay true: every python block of README.md and docs/*.md that opens a bundled example
(``nsight_magic.examples``) still runs, and every relative link (and its #anchor) resolves;
every ``make`` target and repository file they name exists, the README lists every notebook,
no link keeps a placeholder, and a column list they give for a frame is that frame's.

Blocks that need a GPU, a profiler or your own run folder (``%%nsys``, ``run.profile_kernel``,
``load_run("nsight-runs/<run>")``) are not run: they do not name ``nsight_magic.examples``. The
blocks of one page run in order in one namespace, as a reader would paste them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Pages written on other branches at the same time (issue 34: training, issue 35: sharing): a
# link to them is allowed to dangle only until they land; once present they are checked as any.
WRITTEN_ELSEWHERE = {REPO / "docs" / "training.md", REPO / "docs" / "sharing.md"}

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
REFERENCE_LINK = re.compile(r"^\[[^\]]+\]:\s*(\S+)", re.M)


def python_blocks(text: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == "python"]


def runnable(block: str) -> bool:
    """Opens a bundled example, and holds no IPython magic (those need a kernel and a GPU)."""
    has_magic = any(line.lstrip().startswith("%") for line in block.splitlines())
    return "nsight_magic.examples" in block and not has_magic


def links(text: str) -> list[str]:
    without_code = FENCE.sub("", text)
    without_code = re.sub(r"`[^`\n]*`", "", without_code)
    return INLINE_LINK.findall(without_code) + REFERENCE_LINK.findall(without_code)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m) for m in re.findall(r"^#+\s+(.*)$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ... : not ours to check offline
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            if resolved not in WRITTEN_ELSEWHERE:
                broken.append(f"{target}: no such file")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    return broken


def test_the_pages_are_found() -> None:
    names = {page.name for page in PAGES}
    assert {"README.md", "sessions.md", "options.md", "numbers.md", "releasing.md"} <= names


def test_readme_is_a_front_page() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_finds_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A heading, with `code`\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-heading-with-code) [gone](missing.md) [bad](other.md#nope)\n"
        "[web](https://example.org/x) `[not a link](nowhere.md)`\n"
        "```sh\n[in code](nowhere.md)\n```\n[ref]: other.md\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nope: no heading #nope in other.md",
    ]


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if any(runnable(b) for b in python_blocks(p.read_text(encoding="utf-8")))],
    ids=lambda p: p.name,
)
def test_python_blocks_on_bundled_examples_run(page: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    ran = 0
    for block in python_blocks(page.read_text(encoding="utf-8")):
        if runnable(block):
            exec(compile(block, f"{page.name} block", "exec"), namespace)
            ran += 1
    assert ran >= 1


def test_enough_blocks_are_checked() -> None:
    # the pages that teach the Python API show it on the bundled runs, so it stays checked
    runnable_pages = {
        p.name for p in PAGES if any(runnable(b) for b in python_blocks(p.read_text("utf-8")))
    }
    assert {"README.md", "options.md", "numbers.md", "workloads.md"} <= runnable_pages


def test_every_page_is_reachable_from_the_readme() -> None:
    """No orphan page: README.md links every page of docs/ (the package index page excepted:
    pyproject.toml names it)."""
    readme = links((REPO / "README.md").read_text(encoding="utf-8"))
    linked = {(REPO / target.partition("#")[0]).resolve() for target in readme}
    orphans = [
        page.name
        for page in PAGES[1:]
        if page.resolve() not in linked and page.name != "index-page.md"
    ]
    assert orphans == []


# --- what the docs name: make targets, files, frame columns (issue 42 item 7) -----------------
MAKE_TARGET = re.compile(r"(?m)^\s*(?:\$\s*)?make ([a-z][\w-]*)")  # a command: line/span start
# a repository path in backticks or a fenced block: one of these folders, then a file name
NAMED_PATH = re.compile(
    r"(?<![\w./-])((?:notebooks|docs|tests|tools|binder|benchmarks|nsight_magic)/[\w./-]*\w)"
)
OUTPUTS = ("build/", "nsight-runs/", "dist/")  # what a command writes, not in a checkout
COLUMN_LIST = re.compile(r"`([a-z][a-z0-9_]*(?:, [a-z][a-z0-9_]*){2,})`")
METHOD = re.compile(r"`(?:[a-z_]+\.)?([a-z_]+)\(\)`")
COLUMN_LIKE = re.compile(r"`([a-z][a-z0-9_]*_(?:ns|ops|bytes|pct))`")


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*)\s*:(?!=)", text, re.M))
    phony = re.search(r"^\.PHONY:(.*)$", text, re.M)
    return targets | set(phony.group(1).split() if phony else [])


def test_every_make_target_the_docs_name_exists() -> None:
    targets = make_targets()
    assert {"demo", "test", "quick", "clean"} <= targets  # the parser reads the Makefile
    missing = [
        f"{page.name}: make {name}"
        for page in PAGES
        for span in code_spans(page.read_text(encoding="utf-8"))
        for name in MAKE_TARGET.findall(span)
        if name not in targets
    ]
    assert not missing, missing


def code_spans(text: str) -> list[str]:
    """The backticked spans and fenced blocks: where a command or a path is written out."""
    return re.findall(r"`([^`\n]+)`", FENCE.sub("", text)) + [b for _, b in FENCE.findall(text)]


def named_paths(text: str) -> list[str]:
    return [p for span in code_spans(text) for p in NAMED_PATH.findall(span)]


def test_every_file_the_docs_name_exists() -> None:
    missing = []
    for page in [*PAGES, REPO / "binder" / "README.md"]:
        for path in named_paths(page.read_text(encoding="utf-8")):
            if path.startswith(OUTPUTS) or "<" in path or "*" in path:
                continue
            if not (REPO / path).exists():
                missing.append(f"{page.name}: {path}")
    assert not missing, missing
    assert "notebooks/01_quickstart.ipynb" in named_paths((REPO / "README.md").read_text())


def test_the_readme_lists_every_notebook() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    notebooks = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
    assert notebooks and [n for n in notebooks if f"notebooks/{n}" not in readme] == []


def test_no_placeholder_is_left_in_a_link() -> None:
    for page in [*PAGES, REPO / "binder" / "README.md"]:
        # a badge's link wraps an image link: read every "](target)", nested or not
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            assert "OWNER" not in target, f"{page.name}: {target}"


@pytest.fixture(scope="module")
def frame_columns() -> dict[str, list[str]]:
    """The columns of the frames whose contracts the docs spell out, read off a real report."""
    import nsight_magic
    from nsight_magic.reports import open_report

    report = open_report(REPO / "tests" / "data" / "nsys_train_step.sqlite")
    names = ("nvtx_phases", "nvtx_gpu_projection", "kernel_summary", "gaps", "gpu_ops")
    columns = {name: list(getattr(report, name)().columns) for name in names}
    # a --repeat run's two frames add their per-repeat columns (docs/repeats.md)
    repeated = nsight_magic.load_run(REPO / "tests" / "data" / "repeat_runs" / "small")
    for name in ("kernel_summary", "nvtx_gpu_projection"):
        extra = getattr(repeated, name)().columns
        columns[name] += [c for c in extra if c not in columns[name]]
    return columns


def column_claims(text: str, frames: dict[str, list[str]]) -> list[str]:
    """What ``text`` says of a frame's columns that the frame does not have: in each paragraph
    (a table row: its own, else the paragraph above the table) that names one of ``frames``'
    methods, every backticked column list must be columns of a method named there, and so
    must every backticked column-like name (``*_ns``, ``*_ops``, ...)."""
    wrong, above = [], ""
    for block in re.split(r"\n\s*\n", FENCE.sub("", text)):
        rows = [ln for ln in block.splitlines() if ln.startswith("|")]
        units = [(row, row) for row in rows] if rows else [(block, block)]
        for unit, _ in units:
            named = [m for m in METHOD.findall(unit) if m in frames]
            if rows and not named:
                named = [m for m in METHOD.findall(above) if m in frames]
            if not named:
                continue
            known = [set(frames[m]) for m in named]
            lists = [item.split(", ") for item in COLUMN_LIST.findall(unit)]
            singles = [[c] for c in COLUMN_LIKE.findall(unit)]
            for columns in lists + singles:
                if not any(set(columns) <= k for k in known):
                    wrong.append(f"{', '.join(columns)} is not a column list of {named}")
        if not rows:
            above = block
    return wrong


def test_the_column_check_finds_a_wrong_claim(frame_columns: dict[str, list[str]]) -> None:
    # what docs/training.md said before issue 42
    old = '`run.nvtx_phases()` shows `proj_total_ns` ("GPU time") and `gpu_ops`.'
    assert len(column_claims(old, frame_columns)) == 2
    table = "`run.nvtx_phases()` shows:\n\n| column |\n|---|\n| `proj_total_ns` |\n"
    assert len(column_claims(table, frame_columns)) == 1
    right = "`run.nvtx_phases()`: `" + ", ".join(frame_columns["nvtx_phases"]) + "`"
    assert column_claims(right, frame_columns) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_column_lists_match_the_frames(page: Path, frame_columns: dict[str, list[str]]) -> None:
    assert column_claims(page.read_text(encoding="utf-8"), frame_columns) == []


def test_training_md_gives_nvtx_phases_columns(frame_columns: dict[str, list[str]]) -> None:
    text = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    assert f"`{', '.join(frame_columns['nvtx_phases'])}`" in " ".join(text.split())


def test_orphans_of_a_watchdog_pair_killed_at_once_are_said_to_be_outside_the_guarantee() -> None:
    """Issue 57: both watchdogs of one child killed at once leave orphans; the guarantee's page
    says so where it states the guarantee, and the architecture and the module point there."""
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "troubleshooting.md").read_text()
    guarantee = page.index("What it guarantees:")
    limit = page.index("**Outside the guarantee:** SIGKILL to *both* watchdog processes")
    assert guarantee < limit < page.index("tests/test_kernel_death.py")
    assert "orphans" in page[limit : limit + 400]
    for path in ("ARCHITECTURE.md", "nsight_magic/processes/child_lifetime.py"):
        text = " ".join((root / path).read_text().split())
        assert "outside the guarantee" in text.lower() and "troubleshooting.md" in text, path


# --- help from one source (issue 58 item 3) ----------------------------------------------------
def test_the_option_tables_are_the_magics_own() -> None:
    """docs/options.md's option and %config tables are generated from the magics' parsers and
    NsightMagic's traits (``python -m nsight_magic.magic.option_docs`` writes them): the page
    says what ``%%nsys?`` says, and an option added to a magic appears in it."""
    from nsight_magic.magic import option_docs

    page = (REPO / "docs" / "options.md").read_text(encoding="utf-8")
    assert option_docs.blocks(page) == ["both", "nsys", "ncu", "session", "config"]
    assert option_docs.render(page) == page, "run: python -m nsight_magic.magic.option_docs"
    for option in ("`--sweep NAME=V1,V2`", "`--warmup N`", "`--launch-count N`", "[--host]",
                   "`NsightMagic.sweep_max_configs`", "`-o NAME` (`--var NAME`)"):  # fmt: skip
        assert option in page
    stale = page.replace("`--sweep NAME=V1,V2`", "`--sweep X`")
    assert option_docs.render(stale) == page
    # the default bounds of docs/troubleshooting.md, from session/bounds.py
    bounds = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    assert option_docs.blocks(bounds) == ["bounds"]
    assert option_docs.render(bounds) == bounds, "run: python -m nsight_magic.magic.option_docs"
    assert "| `nsys export` of one report | 900 s |" in bounds
    # the CHANGELOG's list of the version's options, from the same parsers and traits
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert option_docs.blocks(changelog) == ["option_list"]
    assert option_docs.render(changelog) == changelog, (
        "run: python -m nsight_magic.magic.option_docs"
    )
    assert "`--repeat`" in changelog and "`sweep_max_configs`" in changelog
    assert option_docs.PAGES == [REPO / "docs" / "options.md", REPO / "docs" / "troubleshooting.md",
                                 REPO / "CHANGELOG.md"]  # fmt: skip


def _words(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def test_each_behaviour_is_said_in_one_text_by_the_help_and_the_docs() -> None:
    """What comes back and what a later worker replays: the magics' help and docs/sessions.md
    say it in the same words (``magic/behaviour.py``); the help said the opposite before."""
    from nsight_magic.magic import behaviour
    from nsight_magic.magic.magics import NsightMagic

    sessions = _words((REPO / "docs" / "sessions.md").read_text(encoding="utf-8"))
    for text in (behaviour.STATE, behaviour.WORKERS):
        assert _words(text) in sessions
    assert _words(behaviour.STATE) in _words(NsightMagic.nsys.__doc__ or "")
    assert _words(behaviour.STATE) in _words(NsightMagic.ncu.__doc__ or "")
    session_help = NsightMagic.nsight_session.__doc__ or ""
    assert _words(behaviour.WORKERS) in _words(session_help)
    assert "replays the setup cells and the profiled cells" not in session_help
    assert "%%nsys --host cells use" in session_help  # argparse's "%%" escape kept the two


# every name the docs call on the package or on a result must exist (docs/sweeps.md called
# nsight_magic.list_runs(), which did not): receivers as the pages name them
PACKAGE_NAME = re.compile(r"\bnsight_magic\.([A-Za-z_]\w*)\b(?!\.(?:md|py|ipynb))")
IMPORTED = re.compile(r"from (nsight_magic(?:\.\w+)*) import (?:\(([\w, \n]+)\)|([\w, ]+))")
RESULT_CALL = re.compile(r"\b(run|sw|kernel|top|step|tour|bwd|child)\.([a-z_]\w*)\(")


def _result_classes() -> list[type]:
    from nsight_magic.results import NcuRun, NsysRun
    from nsight_magic.results.sweep_run import SweepRun

    return [NsysRun, NcuRun, SweepRun]


def missing_names(text: str) -> list[str]:
    import importlib

    import nsight_magic

    missing = []
    for span in code_spans(text):
        for name in PACKAGE_NAME.findall(span):
            if name in {"examples", "magic", "analysis", "views", "results", "session", "errors",
                        "phase"}:  # fmt: skip
                continue  # subpackages (checked by their imports below); an NVTX domain
            if not hasattr(nsight_magic, name):
                missing.append(f"nsight_magic.{name}")
        for module, grouped, names in IMPORTED.findall(span):
            mod = importlib.import_module(module)
            names = grouped or names
            missing += [f"{module}.{n}" for n in re.findall(r"\w+", names)
                        if not hasattr(mod, n)]  # fmt: skip
        for _, method in RESULT_CALL.findall(span):
            if not any(hasattr(cls, method) for cls in _result_classes()):
                missing.append(f".{method}()")
    return missing


def test_every_name_the_docs_call_exists() -> None:
    found = {f"{page.name}: {name}" for page in PAGES
             for name in missing_names(page.read_text(encoding="utf-8"))}  # fmt: skip
    assert found == set()


def test_the_name_check_finds_a_name_that_does_not_exist() -> None:
    text = "`nsight_magic.list_runz()` and\n```python\nrun.kernel_sumary()\nsw.table()\n```\n"
    assert missing_names(text) == ["nsight_magic.list_runz", ".kernel_sumary()"]
