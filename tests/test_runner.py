"""runner.run with real child processes: process groups, escalation, reaping, logs, errors;
progress parsing on the real profiler logs captured with the fixtures."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from processes import alive

from nsight_magic.errors import (
    CounterPermissionError,
    ProfileInterrupted,
    ProfilerError,
    ProfileTimeout,
)
from nsight_magic.processes import runner
from nsight_magic.processes.progress import ProgressParser, is_profiler_line

PY = sys.executable
GRACE = (0.3, 0.3)

# A parent that ignores SIGINT and spawns a grandchild that also ignores SIGINT, then prints
# the grandchild's pid and sleeps: only SIGTERM (or worse) stops them.
STUBBORN = r"""
import signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal,time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"])
print("grandchild", child.pid, flush=True)
time.sleep(60)
"""

# Ignores SIGINT and SIGTERM: only SIGKILL works.
IMMORTAL = r"""
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""


def test_output_goes_to_log_and_callback_in_order(tmp_path: Path) -> None:
    lines: list[str] = []
    code = (
        "import sys\nprint('one'); sys.stdout.write('bar 1%\\rbar 99%\\r\\n')\n"
        "print('two', file=sys.stderr)"
    )
    res = runner.run([PY, "-c", code], log_path=tmp_path / "log", on_line=lines.append)
    assert res.returncode == 0 and res.outcome == "exited" and res.signals == []
    # each line with its end: a bar's redraws end at "\r", a "\r\n" is one end
    assert lines == ["one\n", "bar 1%\r", "bar 99%\n", "two\n"]
    assert (tmp_path / "log").read_bytes().startswith(b"one\nbar 1%\rbar 99%\r")
    assert res.wall_s > 0 and res.argv[0] == PY


def test_shell_string_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        runner.run("echo hi", log_path=tmp_path / "log")  # type: ignore[arg-type]


def test_timeout_escalates_to_sigterm_and_leaves_no_orphan(tmp_path: Path) -> None:
    with pytest.raises(ProfileTimeout) as info:
        runner.run([PY, "-c", STUBBORN], log_path=tmp_path / "log", timeout=1.5, grace_s=GRACE)
    res = info.value.result
    assert res.outcome == "timeout"
    assert res.signals == ["SIGINT", "SIGTERM"]  # SIGINT was ignored by both
    assert runner.group_members(res.pgid) == []
    grandchild = int((tmp_path / "log").read_text().split()[1])
    assert not alive(grandchild)
    assert res.returncode == -signal.SIGTERM
    assert "timeout" in str(info.value) and str(tmp_path / "log") in str(info.value)


def test_what_a_stopped_run_prints_while_dying_goes_to_the_log_only(tmp_path: Path) -> None:
    """torchrun answers SIGINT with a SignalException traceback; the user gets our one
    message, the log keeps everything."""
    code = (
        "import signal, sys, time\n"
        "def bye(*_):\n    print('Traceback: SignalException got signal 2', flush=True)\n"
        "    sys.exit(1)\n"
        "signal.signal(signal.SIGINT, bye)\nprint('started', flush=True)\ntime.sleep(60)\n"
    )
    lines: list[str] = []
    with pytest.raises(ProfileTimeout):
        runner.run([PY, "-c", code], log_path=tmp_path / "log", timeout=2.0,
                   on_line=lines.append, grace_s=GRACE)  # fmt: skip
    assert lines == ["started\n"]
    assert "SignalException" in (tmp_path / "log").read_text()


def test_cancel_event_escalates_to_sigkill(tmp_path: Path) -> None:
    cancel = threading.Event()
    seen = threading.Event()

    def on_line(line: str) -> None:
        if line.strip() == "ready":
            seen.set()
            cancel.set()  # the picker's Cancel button

    t0 = time.monotonic()
    with pytest.raises(ProfileInterrupted) as info:
        runner.run(
            [PY, "-c", IMMORTAL],
            log_path=tmp_path / "log",
            cancel=cancel,
            on_line=on_line,
            grace_s=GRACE,
        )
    res = info.value.result
    assert seen.is_set() and res.outcome == "cancelled"
    assert res.signals == ["SIGINT", "SIGTERM", "SIGKILL"]
    assert res.returncode == -signal.SIGKILL
    assert runner.group_members(res.pgid) == []
    assert time.monotonic() - t0 < 30


def test_keyboard_interrupt_stops_group_with_sigint_first(tmp_path: Path) -> None:
    # A polite child (default SIGINT handling) stops at the first signal. Both sides set the
    # default handler explicitly: a shell starts background jobs with SIGINT ignored, and an
    # ignored SIGINT is inherited across exec (seen when the suite ran as a background job).
    code = (
        "import signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "print('up', flush=True)\ntime.sleep(60)"
    )

    def on_line(line: str) -> None:
        if line.strip() == "up":  # deliver Ctrl-C to the notebook's main thread
            os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(ProfileInterrupted) as info:
            runner.run([PY, "-c", code], log_path=tmp_path / "log", on_line=on_line, grace_s=GRACE)
    finally:
        signal.signal(signal.SIGINT, previous)
    res = info.value.result
    assert res.outcome == "interrupted" and res.signals == ["SIGINT"]
    assert runner.group_members(res.pgid) == []
    assert isinstance(info.value, KeyboardInterrupt)  # still an interrupt for the caller


def test_leftover_grandchild_is_killed_after_normal_exit(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(p.pid, flush=True)"
    )
    res = runner.run([PY, "-c", code], log_path=tmp_path / "log", grace_s=GRACE)
    assert res.returncode == 0 and res.outcome == "exited"
    leftover = int((tmp_path / "log").read_text().split()[0])
    assert res.leftovers_killed == [leftover]
    assert not alive(leftover) and runner.group_members(res.pgid) == []


def test_nonzero_exit_raises_profiler_error_with_error_lines(tmp_path: Path) -> None:
    code = (
        "import sys\nprint('==PROF== Connected')\n"
        "print('==ERROR== Failed to prepare kernel')\nsys.exit(3)"
    )
    res = runner.run([PY, "-c", code], log_path=tmp_path / "log")
    assert res.returncode == 3
    with pytest.raises(ProfilerError) as info:
        runner.raise_for_profiler(res, "ncu")
    msg = str(info.value)
    assert "code 3" in msg and "==ERROR== Failed to prepare kernel" in msg
    assert str(tmp_path / "log") in msg and PY in msg
    assert "Connected" not in msg.split("argv:")[0]  # only the ERROR lines, not the whole log


def test_counter_permission_error_explains_fixes(tmp_path: Path) -> None:
    code = (
        "print('==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access '"
        "'NVIDIA GPU Performance Counters on the target device 0.')"
    )
    res = runner.run([PY, "-c", code], log_path=tmp_path / "log")
    with pytest.raises(CounterPermissionError) as info:
        runner.raise_for_profiler(res, "ncu")
    msg = str(info.value)
    assert "NVreg_RestrictProfilingToAdminUsers=0" in msg and "SYS_ADMIN" in msg and "root" in msg
    assert isinstance(info.value, PermissionError)


def test_zero_exit_passes(tmp_path: Path) -> None:
    res = runner.run([PY, "-c", "pass"], log_path=tmp_path / "log")
    runner.raise_for_profiler(res, "nsys")


# --- progress, on the real logs of the fixture captures ----------------------------------
NCU_LOG = """==PROF== Connected to process 1173 (/usr/bin/python3.12)
==PROF== Profiling "nvjet_sm90_tst_128x128_64x6_2..." - 0: 0%....50%....100% - 17 passes
==PROF== Profiling "sm80_xmma_gemm_f32f32_f32f32_..." - 1: 0%....50%....100% - 17 passes
done gemm
==PROF== Disconnected from process 1173
==PROF== Report: /tmp/tmp.ZAP8F9wt44/ncu_gemm_roofline.ncu-rep
"""

NSYS_LOG = (
    "Capture range started in the application.\nCapture range ended in the application.\n"
    "Generating '/tmp/nsys-report-a33c.qdstrm'\n\r[1/2] [0%                          ] "
    "nsys_small.nsys-rep\r[1/2] [===========50%              ] nsys_small.nsys-rep\r"
    "[1/2] [========================100%] nsys_small.nsys-rep\n"
    "checksum 20.26 512.0\nGenerated:\n\t/tmp/x/nsys_small.nsys-rep\n"
)


def _lines(text: str) -> list[str]:
    return text.replace("\r", "\n").split("\n")


def test_ncu_progress_counts_kernels_and_passes() -> None:
    p = ProgressParser("ncu")
    phases = []
    for line in _lines(NCU_LOG):
        if p.feed(line):
            phases.append(p.state.phase)
    st = p.state
    assert st.kernels_profiled == 2 and st.passes == 17
    assert st.current_kernel == "sm80_xmma_gemm_f32f32_f32f32_..."
    assert phases[:2] == ["running", "capturing"] and phases[-1] == "exporting"
    assert "2 kernel(s) profiled" in p.state.describe()


def test_nsys_progress_phases_and_percent() -> None:
    p = ProgressParser("nsys")
    seen = []
    for line in _lines(NSYS_LOG):
        p.feed(line)
        seen.append((p.state.phase, p.state.percent))
    assert ("capturing", None) in seen and ("exporting", 50.0) in seen
    assert ("exporting", 100.0) in seen and p.state.phase == "loading"


def test_profiler_lines_are_told_apart_from_cell_output() -> None:
    assert is_profiler_line('==PROF== Profiling "k" - 0: 0%....100% - 4 passes')
    assert is_profiler_line("[2/2] [==20%     ] nsys_gemm.sqlite")
    assert is_profiler_line("Capture range started in the application.")
    assert not is_profiler_line("checksum 20.26 512.0")
    assert not is_profiler_line("done gemm")


def test_real_fixture_logs_parse(tmp_path: Path) -> None:
    log = Path("/tmp/fx/ncu_small_full.log")
    if not log.exists():
        pytest.skip("fixture capture logs not on this machine")
    p = ProgressParser("ncu")
    for line in _lines(log.read_text()):
        p.feed(line)
    assert p.state.kernels_profiled == 3 and p.state.passes == 38


def test_a_logs_frames_read_as_text_in_a_profilers_error(tmp_path: Path) -> None:
    """A fresh script's stderr (a traceback) and displays are frames on its stdout, in the
    log: a profiler's error shows them as the text they are (runner's marks are the script's)."""
    from nsight_magic.script import display_frames

    assert (runner.STDERR_MARK, runner.DISPLAY_MARK) == (display_frames.STDERR_MARK,
                                                         display_frames.DISPLAY_MARK)  # fmt: skip
    code = (
        "import os\nfrom nsight_magic.script.display_frames import display_frame, stderr_frame\n"
        "os.write(1, (stderr_frame('Traceback\\nValueError: \"bad\"\\n')"
        " + display_frame({'text/plain': 'x'})).encode())\nraise SystemExit(3)"
    )
    res = runner.run([PY, "-c", code], log_path=tmp_path / "log")
    with pytest.raises(ProfilerError) as info:
        runner.raise_for_profiler(res, "nsys")
    shown = str(info.value)
    assert 'ValueError: "bad"' in shown and "[a display]" in shown and "nsight_magic-" not in shown
