"""The closing line of ``make test``: one line for the runs that went side by side, read from
their JUnit XML (pytest ``--junitxml``), so CI and a person read one verdict, not two pytest
summaries with different counts. Before it, one line when the browser tests were skipped, with
how to get them. Exit status 1 when any run failed or wrote no result.

    python tools/test_summary.py "main suite=build/test-results/main.xml" "GPU-image tier=..."
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

BROWSER = "tests.browser."  # the classname prefix of tests/browser's tests
BROWSER_HINT = "make test runs them once that is fixed (.ci/run installs Chromium as root)"


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    browser_skips: list[str] = field(default_factory=list)  # their skip reasons

    def words(self) -> str:
        parts = [f"{self.passed} passed"]
        parts += [f"{self.failed} failed"] if self.failed else []
        parts += [f"{self.skipped} skipped"] if self.skipped else []
        return ", ".join(parts)


def read(path: Path) -> Counts:
    """Counts of one JUnit XML file: a case with <failure>/<error> failed, <skipped> skipped
    (pytest writes an xfail as a skip), else passed."""
    counts = Counts()
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
    for suite in suites:
        counts.seconds += float(suite.get("time") or 0)
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                counts.failed += 1
            elif (skip := case.find("skipped")) is not None:
                counts.skipped += 1
                if (case.get("classname") or "").startswith(BROWSER):
                    counts.browser_skips.append(skip.get("message") or "")
            else:
                counts.passed += 1
    return counts


def summary(runs: list[tuple[str, Path]]) -> tuple[list[str], bool]:
    """The lines to print and whether everything passed."""
    parts, ok, browser = [], True, []
    for label, path in runs:
        if not path.is_file():
            parts.append(f"{label}: no result (it did not run to the end)")
            ok = False
            continue
        counts = read(path)
        ok = ok and counts.failed == 0
        browser += counts.browser_skips
        parts.append(f"{label} {counts.words()} in {counts.seconds / 60:.1f} min")
    lines = []
    if browser:
        reason = max(set(browser), key=browser.count)  # e.g. "no Chromium at ... (apt-get ...)"
        lines.append(f"{len(browser)} browser tests skipped: {reason}. {BROWSER_HINT}.")
    lines.append(f"make test: {'PASSED' if ok else 'FAILED'} ({'; '.join(parts)})")
    return lines, ok


def main(argv: list[str]) -> int:
    runs = []
    for arg in argv:
        label, sep, path = arg.partition("=")
        if not sep:
            raise SystemExit(f"expected LABEL=PATH, got {arg!r}")
        runs.append((label, Path(path)))
    lines, ok = summary(runs)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
