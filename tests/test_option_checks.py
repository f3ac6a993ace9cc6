"""Options that correct you: a mistyped option or value is refused before any profiler is looked
for (no nsys/ncu on this machine: a check that came too late would say "not found" instead), with
the nearest valid spelling; messages name the flag and the magic the user typed."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from nsight_magic.magic import options as magic_options
from nsight_magic.profilers.ncu import listed_identifiers
from nsight_magic.session.manager import MANAGER
from nsight_magic.vocabulary.magic_names import renamed


@pytest.fixture
def runs_dir(ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    ip.run_line_magic("config", f'NsightMagic.runs_dir = "{root}"')
    monkeypatch.setenv("PATH", "/nonexistent")  # no profiler to find: a late check would say so
    for var in ("NSIGHT_MAGIC_NSYS", "NSIGHT_MAGIC_NCU"):
        monkeypatch.delenv(var, raising=False)
    ip.run_line_magic("config", 'NsightMagic.nsys_path = ""')
    ip.run_line_magic("config", 'NsightMagic.ncu_path = ""')
    MANAGER.clear_setup()
    yield root
    MANAGER.clear_setup()
    assert not root.exists() or not any(root.iterdir())  # a refused cell leaves no run folder


def _refused(ip: InteractiveShell, magic: str, line: str) -> str:
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic(magic, line, "x = 1")
    message = str(info.value)
    assert "\n" not in message  # one line
    return message


@pytest.mark.parametrize(
    ("magic", "line", "expected"),
    [
        ("nsys", "--warmpu 1", "%%nsys has no option --warmpu; did you mean --warmup?"),
        ("nsys", "--nprc 2", "did you mean --nproc?"),
        ("ncu", "--lauch-count 1", "did you mean --launch-count?"),
        ("nsys", "--pytorch shape", "%%nsys --pytorch 'shape': did you mean shapes?"),
        ("nsys", "--cuda-graph-trace=grpah", "did you mean graph?"),
        ("ncu", "--set fulll", "%%ncu --set 'fulll': did you mean full?"),
        ("ncu", "--set Roofline", "did you mean roofline?"),
        ("ncu", "--section SpeedOfLite", "did you mean SpeedOfLight?"),
    ],
)
def test_a_typo_gets_the_nearest_spelling(
    ip: InteractiveShell, runs_dir: Path, magic: str, line: str, expected: str
) -> None:
    assert expected in _refused(ip, magic, line)


@pytest.mark.parametrize("count", ["0", "-2", "1001"])
def test_a_repeat_count_out_of_range_is_one_line(
    ip: InteractiveShell, runs_dir: Path, count: str
) -> None:
    message = _refused(ip, "nsys", f"--repeat {count}")
    assert f"--repeat {count}: must be 1..1000" in message
    assert "has no option --repeat" in _refused(ip, "ncu", "--repeat 2")  # an nsys option


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "500"])
def test_a_settle_temperature_out_of_range_is_one_line(
    ip: InteractiveShell, runs_dir: Path, value: str
) -> None:
    assert f"--settle {float(value)}: give a temperature in °C" in _refused(
        ip, "nsys", f"--settle {value}"
    )
    assert "give a temperature" in _refused(ip, "ncu", f"--settle {value}")


def test_an_option_nothing_is_near_lists_where_to_look(
    ip: InteractiveShell, runs_dir: Path
) -> None:
    message = _refused(ip, "nsys", "--zzzzzz 1")
    assert "did you mean" not in message
    assert "%%nsys? lists them" in message and "after --" in message


def test_a_bad_kernel_regex_is_refused_with_the_regex_error(
    ip: InteractiveShell, runs_dir: Path
) -> None:
    message = _refused(ip, "ncu", "--kernel '(['")
    assert "--kernel '([' is not a valid regex" in message
    assert "unterminated character set" in message  # re's own words


@pytest.mark.parametrize("flag", ["-o", "--var"])
def test_the_result_variable_message_names_the_flag_typed(
    ip: InteractiveShell, runs_dir: Path, flag: str
) -> None:
    message = _refused(ip, "nsys", f"{flag} 1x")
    assert message.startswith(f"{flag} '1x' is not a valid variable name")
    other = "--var" if flag == "-o" else "-o "
    assert other not in message


def test_o_with_a_list_points_at_vars(ip: InteractiveShell, runs_dir: Path) -> None:
    message = _refused(ip, "nsys", "-o a,b")
    assert "-o NAME stores the result" in message and "--vars a,b" in message


def test_valid_spellings_pass_the_checks(ip: InteractiveShell) -> None:
    parser = ip.find_cell_magic("nsight_nsys").parser
    for tokens in (
        ["--warm", "1"],  # a unique prefix: argparse's own abbreviation
        ["-orun", "--warmup=1"],
        ["--name", "-x"],  # a value that looks like an option
        ["--timeout", "-1"],
        ["--pytorch", "shapes"],
    ):
        magic_options.check_flags(parser, tokens, "%%nsys")
    # a set or section far from every known one may be a newer ncu's or a --section-folder's:
    # the session asks the ncu it finds
    magic_options.check_ncu_values("my_set", ["MySection"], r"gemm\(", "%%ncu")
    magic_options.check_ncu_values("detailed", ["SpeedOfLight"], None, "%%ncu")
    magic_options.check_ncu_values("none", [], "^ampere_.*gemm$", "%%ncu")
    # a section folder of the user's own: its sets are for ncu to check
    magic_options.check_ncu_values("fulll", [], None, "%%ncu", ["--section-folder", "mine"])
    magic_options.check_ncu_values("fulll", [], None, "%%ncu", ["--section-folder=mine"])


def test_known_sets_and_sections_are_ncus_own(data_dir: Path) -> None:
    lists = data_dir / "ncu_lists"
    assert set(magic_options.NCU_SETS) == listed_identifiers((lists / "sets.txt").read_text())
    sections = listed_identifiers((lists / "sections.txt").read_text())
    assert set(magic_options.NCU_SECTIONS) == sections


def test_help_names_the_magic_typed(ip: InteractiveShell) -> None:
    short = ip.object_inspect("%%nsys")["docstring"]
    long = ip.object_inspect("%%nsight_nsys")["docstring"]
    assert "%%nsys [--name NAME]" in short and "%%nsight_nsys" not in short
    assert "%%nsys --warmup 1 -o run" in short  # the example too
    assert "%%nsight_nsys [--name NAME]" in long
    assert "%%ncu [--name NAME]" in ip.object_inspect("%%ncu")["docstring"]


def test_the_short_name_runs_the_same_magic(ip: InteractiveShell, runs_dir: Path) -> None:
    assert "did you mean --warmup?" in _refused(ip, "nsys", "--warmpu 1")
    assert "did you mean --warmup?" in _refused(ip, "nsight_nsys", "--warmpu 1")


def test_renamed_moves_the_wrapped_usage_lines() -> None:
    doc = (
        "Usage::\n\n  %%nsight_nsys [--name NAME]\n                    [--python PYTHON]\n"
        "      [-- extra nsys arguments]\n\nExample::\n\n    %%nsight_nsys -o run\n"
    )
    assert renamed(doc, "nsight_nsys", "nsys") == (
        "Usage::\n\n  %%nsys [--name NAME]\n             [--python PYTHON]\n"
        "      [-- extra nsys arguments]\n\nExample::\n\n    %%nsys -o run\n"
    )
