"""The docs' tables, generated from what the code declares: docs/options.md's options of
``%%nsys`` and ``%%ncu`` from their parsers (so from the option declarations in ``profilers/``,
the same text ``%%nsys?`` prints) and its ``%config`` settings from ``NsightMagic``'s traits;
docs/troubleshooting.md's default bounds from ``session/bounds.BOUNDS``; the CHANGELOG's list of
the version's options from the same parsers and traits. A page holds each
table between ``<!-- generated: KEY -->`` and ``<!-- end generated -->``;
``python -m nsight_magic.magic.option_docs`` writes them, a test checks they are current, so the
code and the pages cannot say different things."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
_DOCS = _ROOT / "docs"
# the pages with generated blocks
PAGES = [_DOCS / "options.md", _DOCS / "troubleshooting.md", _ROOT / "CHANGELOG.md"]
_BLOCK = re.compile(r"(<!-- generated: (\w+) -->\n).*?(<!-- end generated -->)", re.S)


def _flag(action: argparse.Action) -> str:
    """``--warmup N``, ``--pytorch off|ops|shapes``, ``-o NAME`` (``--var NAME``)."""
    if action.choices:
        value = "|".join(str(c) for c in action.choices)
    elif action.nargs == 0:
        value = ""
    else:
        value = str(action.metavar or action.dest.upper())
    spelled = [f"{s} {value}".rstrip() for s in action.option_strings]
    short = [s for s in spelled if not s.startswith("--")]
    main = (short or spelled)[0]
    rest = [s for s in spelled if s != main]
    text = f"`{main}`".replace("|", "\\|")
    return text + "".join(f" (`{s}`)" for s in rest).replace("|", "\\|")


def _help(text: str | None, *, argparse_text: bool = False) -> str:
    """A help text as one table cell; argparse's as it prints it (``%%%%`` is ``%%``)."""
    text = (text or "").replace("%%", "%") if argparse_text else text or ""
    return " ".join(text.split()).replace("|", "\\|")


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def option_tables() -> dict[str, str]:
    """``both`` (the options the two magics share, same help), ``nsys`` and ``ncu`` (each
    magic's own), as markdown tables in the parsers' order."""
    from .magics import NsightMagic

    nsys = _options(NsightMagic.nsys.parser)
    ncu = _options(NsightMagic.ncu.parser)
    shared = [d for d in nsys if d in ncu and nsys[d].help == ncu[d].help]
    header = ("option", "what it does")

    def rows(actions: dict[str, argparse.Action], names: Iterable[str]) -> list[tuple[str, ...]]:
        return [(_flag(actions[n]), _help(actions[n].help, argparse_text=True)) for n in names]

    return {
        "both": _table(header, rows(nsys, shared)),
        "nsys": _table(header, rows(nsys, [d for d in nsys if d not in shared])),
        "ncu": _table(header, rows(ncu, [d for d in ncu if d not in shared])),
    }


def _usage(name: str, parser: argparse.ArgumentParser) -> str:
    """``%nsight_session [status|start|...] [nsys|ncu] [--host]``: positionals first."""
    words = []
    for action in sorted(parser._actions, key=lambda a: bool(a.option_strings)):
        if action.dest == "help":
            continue
        if not action.option_strings:
            words.append("[" + "|".join(str(c) for c in action.choices or [action.dest]) + "]")
            continue
        value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
        words.append(f"[{action.option_strings[-1]}{value}]")
    return " ".join([name, *words])


def session_usage() -> str:
    """The setup and session magics' usage lines, as a code block."""
    from .magics import NsightMagic

    lines = [
        _usage("%%nsight_setup", NsightMagic.nsight_setup.parser),
        _usage("%nsight_session", NsightMagic.nsight_session.parser),
    ]
    return "```\n" + "\n".join(lines) + "\n```\n"


def _default(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1 << 20:
        return f"`{value}` ({value / (1 << 20):,.0f} MiB)"
    return f"`{value!r}`"


def config_table() -> str:
    """Every ``%config NsightMagic`` setting: its default and help."""
    from .magics import NsightMagic

    traits = NsightMagic.class_own_traits(config=True)
    rows = [
        (f"`NsightMagic.{name}`", _default(trait.default_value), _help(trait.help))
        for name, trait in sorted(traits.items())
    ]
    return _table(("setting", "default", "what it does"), rows)


def bounds_table() -> str:
    """Every default bound a cell waits under (``session/bounds.BOUNDS``)."""
    from ..session.bounds import BOUNDS

    return _table(("step", "default bound"), [(b.step, b.text()) for b in BOUNDS])


def option_list() -> str:
    """The CHANGELOG's list of this version's options: each magic's flags and the ``%config``
    settings, by name (their help is docs/options.md's)."""
    from .magics import NsightMagic

    def flags(parser: argparse.ArgumentParser) -> str:
        return ", ".join(f"`{max(a.option_strings, key=len)}`" for a in _options(parser).values())

    traits = sorted(NsightMagic.class_own_traits(config=True))
    return "\n".join([
        f"- `%%nsys`: {flags(NsightMagic.nsys.parser)}",
        f"- `%%ncu`: {flags(NsightMagic.ncu.parser)}",
        f"- `%config NsightMagic.`: {', '.join(f'`{t}`' for t in traits)}",
    ]) + "\n"  # fmt: skip


def generated() -> dict[str, str]:
    return {**option_tables(), "config": config_table(), "session": session_usage(),
            "bounds": bounds_table(), "option_list": option_list()}  # fmt: skip


def render(page: str) -> str:
    """``page`` with every generated block replaced by its current text."""
    tables = generated()

    def fill(match: re.Match[str]) -> str:
        key = match.group(2)
        if key not in tables:
            raise KeyError(f"a page names a generated block {key!r} that does not exist")
        return match.group(1) + tables[key] + match.group(3)

    return _BLOCK.sub(fill, page)


def blocks(page: str) -> list[str]:
    """The keys of the generated blocks a page holds, in order."""
    return [m.group(2) for m in _BLOCK.finditer(page)]


def main(argv: list[str] | None = None) -> int:
    """Write the generated blocks of the pages named (default: every page that has some)."""
    paths = [Path(a) for a in (argv or sys.argv[1:])] or PAGES
    for path in paths:
        text = path.read_text(encoding="utf-8")
        path.write_text(render(text), encoding="utf-8")
        print(f"{path}: {', '.join(blocks(text))} written")
    return 0


if __name__ == "__main__":  # pragma: no cover - the test calls render()
    raise SystemExit(main())
