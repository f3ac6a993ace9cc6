"""The docs stay true: every python block of README.md and docs/*.md that opens a bundled example
(``nsight_magic.examples``) still runs, and every relative link (and its #anchor) resolves.

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
