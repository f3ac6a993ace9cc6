"""nsight_magic next to other extensions, in a real IPython InteractiveShell: the short magic
names are taken only when free (NVIDIA's jupyterlab-nvidia-nsight 1.0.1 registers %nsys, %ncu,
%%nsys and %%ncu in every kernel), and loading changes none of the user's settings.

Each case runs in its own Python process: `%load_ext` runs once per process, and the foreign
magics must be registered BEFORE nsight_magic loads, as in a kernel where both are installed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A stand-in for another extension's kernel side: line and cell magics named nsys and ncu,
# registered before nsight_magic loads. It records what it ran, so the test can tell who ran.
_FOREIGN = """
import io, json, contextlib
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_cell_magic, magics_class

ran = []

@magics_class
class OtherNsight(Magics):
    @line_cell_magic
    def nsys(self, line, cell=None):
        ran.append(("other", "nsys", line))

    @line_cell_magic
    def ncu(self, line, cell=None):
        ran.append(("other", "ncu", line))

ip = InteractiveShell.instance()
if FOREIGN:
    ip.register_magics(OtherNsight(shell=ip))

def run(code):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ip.run_cell(code)
    return out.getvalue()

def owner(kind, name):
    magic = ip.magics_manager.magics[kind].get(name)
    if magic is None:
        return None
    return type(magic.__self__).__module__.split(".")[0]

def observe():
    from nsight_magic.vocabulary.magic_names import cell_magic
    return {
        "cell_nsys": owner("cell", "nsys"), "cell_ncu": owner("cell", "ncu"),
        "line_nsys": owner("line", "nsys"),
        "long_nsys": owner("cell", "nsight_nsys"), "long_ncu": owner("cell", "nsight_ncu"),
        "spelled": cell_magic("nsys"), "spelled_ncu": cell_magic("ncu"),
    }
"""


def _run(body: str, foreign: bool) -> dict:
    script = f"FOREIGN = {foreign!r}\n" + _FOREIGN + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_free_names_are_taken_silently() -> None:
    seen = _run(
        """
        load = run("%load_ext nsight_magic")
        print(json.dumps({"load": load, **observe()}))
        """,
        foreign=False,
    )
    assert seen["load"] == ""  # nothing to say when the names are free
    assert seen["cell_nsys"] == seen["cell_ncu"] == "nsight_magic"
    assert seen["long_nsys"] == seen["long_ncu"] == "nsight_magic"
    assert seen["spelled"] == "%%nsys"


def test_held_names_are_left_alone_and_said_once() -> None:
    seen = _run(
        """
        load = run("%load_ext nsight_magic")
        again = run("%load_ext nsight_magic")
        state = observe()
        run("%%nsys --name x\\ny = 1")
        help_text = ip.find_cell_magic("nsight_nsys").__doc__
        status = run("%nsight_session")
        print(json.dumps({"load": load, "again": again, **state, "ran": ran,
                          "help": help_text, "status": status}))
        """,
        foreign=True,
    )
    # the other extension keeps both forms; ours are under the long names
    assert seen["cell_nsys"] == seen["cell_ncu"] == seen["line_nsys"] == "__main__"
    assert seen["long_nsys"] == seen["long_ncu"] == "nsight_magic"
    assert seen["ran"] == [["other", "nsys", "--name x"]]
    # said once, on load, with the names to use and how to take the short ones
    assert seen["load"].count("\n") == 1 and "%%nsys and %%ncu belong to __main__" in seen["load"]
    assert "%%nsight_nsys and %%nsight_ncu" in seen["load"]
    assert "claim_short_names = True" in seen["load"]
    assert "already loaded" in seen["again"] and "belong to" not in seen["again"]
    # messages and help name the magic this user has
    assert seen["spelled"] == "%%nsight_nsys" and seen["spelled_ncu"] == "%%nsight_ncu"
    assert "%%nsight_nsys --warmup 1 -o run" in seen["help"]
    assert "the next %%nsight_nsys / %%nsight_ncu cell" in seen["status"]


def test_claim_short_names_takes_them_and_gives_them_back() -> None:
    seen = _run(
        """
        run("%load_ext nsight_magic")
        claimed_msg = run("%config NsightMagic.claim_short_names = True")
        claimed = observe()
        back_msg = run("%config NsightMagic.claim_short_names = False")
        back = observe()
        run("%%nsys\\ny = 1")
        run("%reload_ext nsight_magic")
        reloaded = observe()
        print(json.dumps({"claimed_msg": claimed_msg, "claimed": claimed, "back_msg": back_msg,
                          "back": back, "ran": ran, "reloaded": reloaded}))
        """,
        foreign=True,
    )
    assert seen["claimed"]["cell_nsys"] == seen["claimed"]["cell_ncu"] == "nsight_magic"
    assert seen["claimed"]["spelled"] == "%%nsys"
    assert "%%nsys and %%ncu are nsight_magic's" in seen["claimed_msg"]
    # False gives the other extension's magics back, the very objects it registered
    assert seen["back"]["cell_nsys"] == seen["back"]["cell_ncu"] == "__main__"
    assert seen["back"]["spelled"] == "%%nsight_nsys" and "belong to" in seen["back_msg"]
    assert seen["ran"] == [["other", "nsys", ""]]
    # a reload is one NsightMagic again, and still leaves the held names alone
    assert seen["reloaded"]["cell_nsys"] == "__main__"


def test_an_extension_loaded_later_takes_the_names_and_messages_follow() -> None:
    seen = _run(
        """
        free = run("%load_ext nsight_magic")
        before = observe()
        ip.register_magics(OtherNsight(shell=ip))   # NVIDIA's extension, loaded after ours
        after = observe()
        print(json.dumps({"free": free, "before": before, "after": after}))
        """,
        foreign=False,
    )
    assert seen["free"] == "" and seen["before"]["spelled"] == "%%nsys"
    assert seen["after"]["cell_nsys"] == "__main__"  # whoever registers last holds a name
    assert seen["after"]["long_nsys"] == "nsight_magic"
    assert seen["after"]["spelled"] == "%%nsight_nsys"  # messages name what still works


def test_claim_short_names_from_config_before_load() -> None:
    seen = _run(
        """
        ip.config.NsightMagic.claim_short_names = True   # as ipython_config.py would set it
        load = run("%load_ext nsight_magic")
        print(json.dumps({"load": load, **observe()}))
        """,
        foreign=True,
    )
    assert seen["load"] == ""
    assert seen["cell_nsys"] == "nsight_magic" and seen["spelled"] == "%%nsys"
    assert seen["line_nsys"] == "__main__"  # we have no line form; theirs stays


def test_loading_leaves_the_altair_renderer_alone() -> None:
    seen = _run(
        """
        import altair as alt
        before = alt.renderers.active
        run("%load_ext nsight_magic")
        from nsight_magic.examples import llm
        from nsight_magic.results.comparison import compare
        run_ = llm()
        chart = compare(run_, run_).chart()
        bundle = ip.display_formatter.format(chart)[0]
        print(json.dumps({"before": before, "after": alt.renderers.active,
                          "mimes": sorted(bundle)}))
        """,
        foreign=False,
    )
    assert seen["after"] == seen["before"] == "default"
    # a chart we return still carries its own PNG (for nbconvert, GitHub, nbviewer)
    assert "image/png" in seen["mimes"]
    assert any(m.startswith("application/vnd.vegalite") for m in seen["mimes"])
