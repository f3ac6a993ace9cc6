"""Our charts skip altair's validation outside the tests (``views.chart_specs``), and the
user's altair setting is as it was afterwards, even when two builds overlap in two threads."""

from __future__ import annotations

import threading

from altair.utils import schemapi

from nsight_magic.views import chart_specs


def test_validation_is_off_only_while_our_builds_run(monkeypatch) -> None:
    monkeypatch.delenv(chart_specs.STRICT_ENV, raising=False)
    assert schemapi.DEBUG_MODE is True
    with chart_specs.unvalidated():
        assert schemapi.DEBUG_MODE is False
    assert schemapi.DEBUG_MODE is True


def test_overlapping_builds_put_the_users_setting_back(monkeypatch) -> None:
    """The order that leaves two naive save/restore blocks stuck off: the first build ends
    while the second still runs, then the second ends."""
    monkeypatch.delenv(chart_specs.STRICT_ENV, raising=False)
    second_in, first_done = threading.Event(), threading.Event()

    def second() -> None:
        with chart_specs.unvalidated():
            second_in.set()
            first_done.wait(10)
            assert schemapi.DEBUG_MODE is False  # still ours while this build runs

    with chart_specs.unvalidated():
        thread = threading.Thread(target=second)
        thread.start()
        second_in.wait(10)
    first_done.set()
    thread.join(10)
    assert schemapi.DEBUG_MODE is True


def test_strict_runs_validate(monkeypatch) -> None:
    monkeypatch.setenv(chart_specs.STRICT_ENV, "1")
    with chart_specs.unvalidated():
        assert schemapi.DEBUG_MODE is True
