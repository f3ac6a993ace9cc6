"""The differential cases (README.md): each a list of cells run plainly and through the
magics, compared after every cell. ``across`` makes one case per way a cell is profiled.

A case the product fails today names why in ``known_difference`` (one of the reasons below,
so the suite's report groups them); a fix turns it into an XPASS, and the mark comes off."""

from __future__ import annotations

from collections.abc import Iterable

from diff_harness import Case

# --- the ways a cell is profiled ------------------------------------------------------------------
# each: the cells a profiled BODY becomes (a drill-down: the nsys cell, then the picker's
# re-run of it under ncu)
NVTX_TWICE = "import nvtx\nfor _k in range(2):\n    with nvtx.annotate('step'):\n        if _k:\n"


def _indent(body: str, by: str) -> str:
    return "\n".join(by + line for line in body.splitlines())


PATHS = {
    "nsys": lambda body: [f"%%nsys\n{body}"],
    "warmup": lambda body: [f"%%nsys --warmup 2\n{body}"],
    "repeat": lambda body: [f"%%nsys --repeat 3\n{body}"],
    "ncu": lambda body: [f"%%ncu\n{body}"],
    "host": lambda body: [f"%%nsys --host\n{body}"],
    "nvtx": lambda body: [f"%%ncu --nvtx step#2\n{NVTX_TWICE}{_indent(body, ' ' * 12)}"],
    "drill": lambda body: [f"%%nsys\n{body}", "#!drill kernel gemm"],
    "range": lambda body: [f"%%nsys\n{body}", "#!drill range :step"],
    "top": lambda body: [f"%%nsys\n{body}", "#!drill top 3"],
}
ALL = tuple(PATHS)
MAIN = ("nsys", "warmup", "ncu", "host")
ONE = ("nsys",)

# --- why a case fails today (grouped in the report) -----------------------------------------------
# (none today: the reasons issue 56 fixed went with their marks; what the product cannot
# carry, process state and module globals, is declared: one line says so)


def across(name: str, before: Iterable[str], body: str, after: Iterable[str] = (),
           paths: Iterable[str] = MAIN, known: str | dict[str, str] | None = None,
           files: dict[str, str] | None = None, again: bool = True,
           torch: bool = False, declared: str | None = None) -> list[Case]:  # fmt: skip
    """One case per path: ``before`` (ordinary cells), BODY profiled that way (twice when
    ``again``: a second profiled run sees the first one's results), then ``after``.
    ``known``: the reason every path fails today, or path -> reason for some."""
    paths, before = tuple(paths), tuple(before)
    reasons = dict.fromkeys(paths, known) if isinstance(known, str) else dict(known or {})
    cases = []
    for path in paths:
        profiled = PATHS[path](body) * (2 if again else 1)
        said = (len(tuple(before)), declared) if declared else None
        cases.append(Case(id=f"{name}-{path}", cells=(*before, *profiled, *after),
                          files=files or {}, known_difference=reasons.get(path),
                          torch=torch, declared=said))  # fmt: skip
    return cases


# --- training history -----------------------------------------------------------------------------
STEP = "hits = []\ndef step():\n    hits.append(1)\n    return len(hits)"
COUNTER = "step = 0\ndef bump():\n    global step\n    step += 1\n    return step"

TRAINING = [
    *across(
        "history-step",
        [STEP],
        "n = step()",
        ["print(len(hits), n)"],
        paths=ALL,
    ),
    *across(
        "history-step-in-setup",
        [f"%%nsight_setup\n{STEP}"],
        "n = step()",
        ["print(len(hits), n)"],
        paths=ALL,
    ),
    *across(
        "history-global-step",
        [COUNTER],
        "k = bump()",
        ["print(step, k)"],
        paths=ALL,
    ),
    *across(
        "history-direct-append", ["hits = []"], "hits.append(len(hits))", ["print(hits)"], paths=ALL
    ),
    Case(
        "history-warmup-3-then-plain",
        (STEP, "%%nsys --warmup 3\nn = step()", "m = step()"),
    ),
    Case(
        "history-loop-in-cell",
        (STEP, "%%nsys --warmup 1\nfor _k in range(3):\n    n = step()", "print(hits)"),
    ),
]

# --- a dict subclass that forbids update (transformers' ModelOutput) ------------------------------
MODEL_OUTPUT = ("class ModelOutput(dict):\n    def update(self, *args, **kwargs):\n"
                "        raise RuntimeError('no update')")  # fmt: skip

DICT_SUBCLASS = [
    *across(
        "model-output-bound-twice",
        [MODEL_OUTPUT],
        "out = ModelOutput(a=1)",
        ["print(type(out).__name__, dict(out))"],
        paths=("nsys", "warmup", "ncu", "host"),
    ),
    *across(
        "model-output-changed",
        [MODEL_OUTPUT, "out = ModelOutput(a=1)"],
        "out['b'] = 2",
        ["print(dict(out))"],
        paths=("nsys", "ncu"),
        again=False,
    ),
    Case(
        "model-output-isinstance",
        (MODEL_OUTPUT, "%%nsys\nout = ModelOutput(a=1)", "ok = isinstance(out, ModelOutput)"),
    ),
]

# --- rebinding vs mutation ------------------------------------------------------------------------
REBINDING = [
    *across(
        "rebind-list",
        ["c = [5]\nd = c"],
        "c = [6]",
        ["print(c is d, d)"],
        paths=("nsys", "warmup", "ncu", "host", "drill"),
        again=False,
    ),
    *across(
        "rebind-dict",
        ["cfg = {'lr': 1}\nalias = cfg"],
        "cfg = dict(cfg, lr=2)",
        paths=("nsys", "ncu"),
        again=False,
    ),
    *across(
        "rebind-dict-literal",
        ["cfg = {'lr': 1}\nalias = cfg"],
        "cfg = {'lr': 2}",
        paths=("nsys", "ncu"),
        again=False,
    ),
    *across(
        "mutate-shared-list", ["c = [5]\nd = c"], "c.append(6)", ["print(d)"], paths=("nsys", "ncu")
    ),
    *across(
        "read-only-keeps-identity",
        ["items = [[1], [2]]\nfirst = items[0]"],
        "total = sum(len(x) for x in items)",
        ["print(first is items[0])"],
        paths=("nsys", "ncu", "host"),
    ),
    *across(
        "nested-alias",
        ["from types import SimpleNamespace\nlst = [1]\nholder = SimpleNamespace(items=lst)"],
        "lst.append(2)",
        ["print(holder.items is lst)"],
        paths=("nsys", "ncu"),
    ),
    *across(
        "alias-bound-in-profiled-cell",
        ["d = {'k': 1}\nb = 0"],
        "b = d",
        ["print(b is d)"],
        paths=("nsys", "ncu", "drill"),
        again=False,
    ),
    Case(
        "rebind-then-mutate",
        ("c = [5]\nd = c", "%%nsys\nc = [6]\nc.append(7)", "print(d)"),
    ),
    *across(
        "new-instance-each-run",
        ["class Box:\n    pass"],
        "b = Box()",
        ["print(type(b))"],
        paths=("nsys", "ncu"),
    ),
]

# --- reads of notebook names ----------------------------------------------------------------------
READS = [
    *across(
        "augmented-assign",
        ["n = 0"],
        "n += 1",
        ["print(n)"],
        paths=("nsys", "ncu", "warmup"),
    ),
    *across(
        "assign-from-self",
        ["n = 0"],
        "n = n + 1",
        ["print(n)"],
        paths=("nsys", "host"),
    ),
    *across(
        "call-on-self",
        ["x = 2\ndef f(v):\n    return v * 3"],
        "x = f(x)",
        paths=("nsys", "ncu"),
    ),
    *across(
        "read-then-bind-other",
        ["x = 2\ndef f(v):\n    return v * 3"],
        "y = f(x)",
        ["print(x, y)"],
        paths=("nsys", "ncu", "host"),
    ),
    *across(
        "del-name",
        ["x = 1\ny = 2"],
        "del x",
        ["print('x' in globals())"],
        paths=("nsys", "ncu"),
        again=False,
    ),
    Case(
        "del-then-rebind",
        ("a = [1]", "%%nsys\ndel a", "%%nsys\na = [2]", "print(a)"),
    ),
    Case(
        "del-list-then-read-fails",
        ("a = [1]", "%%nsys\ndel a", "%%ncu\nb = a"),
    ),
    Case(
        "del-in-notebook-then-read",
        ("a = [1]", "%%nsys\nb = len(a)", "del a", "%%nsys\nc = 'a' in dir()"),
    ),
    Case("underscore-read", ("5 * 5", "%%nsys\nprev = _", "print(prev)")),
    Case("underscore-read-ncu", ("'text'", "%%ncu\nprev = _")),
    Case("trailing-expression", ("n = 3", "%%nsys\nn * 2", "print(_)")),
    Case("trailing-expression-ncu", ("n = 3", "%%ncu\nn + 1")),
]

# --- iterators, generators, numbers, frames, closures, modules, process state ---------------------
HELPERS = ("calls = []\ncount = 0\n\ndef bump():\n    global count\n    count += 1\n"
           "    calls.append(count)\n    return count\n")  # fmt: skip
CLOSURE = ("def make():\n    count = 0\n    def inc():\n        nonlocal count\n"
           "        count += 1\n        return count\n    return inc\ninc = make()")  # fmt: skip

OBJECTS = [
    *across(
        "iterator-next",
        ["it = iter([[1], [2], [3]])"],
        "batch = next(it)",
        ["print(batch, next(it))"],
        paths=("nsys", "ncu"),
    ),
    Case(
        "iterator-next-warmup",
        ("it = iter([1, 2, 3])", "%%nsys --warmup 1\nbatch = next(it)", "print(batch)"),
    ),
    # an itertools.count's state is only in how it is made: it comes back as a new object
    # (its value right, an alias of the old one left behind), said in one line
    *(
        Case(
            f"itertools-count-{path}",
            (
                "import itertools\nctr = itertools.count()",
                *PATHS[path]("a = next(ctr)"),
                "b = next(ctr)",
            ),
            declared=(1, "brought back as new objects"),
        )
        for path in ("nsys", "ncu")
    ),
    *across(
        "numpy-generator",
        ["import numpy as np\nrng = np.random.default_rng(0)"],
        "draw = rng.integers(0, 100, 3)",
        ["draw2 = rng.integers(0, 100, 3)"],
        paths=("nsys", "ncu", "warmup"),
    ),
    *across(
        "numpy-item-assign",
        ["import numpy as np\narr = np.zeros(3)\nview = arr[1:]"],
        "arr[1] += 5",
        ["print(view)"],
        paths=("nsys", "ncu", "warmup"),
    ),
    *across(
        "numpy-read",
        ["import numpy as np\narr = np.arange(4)\nview = arr[1:]"],
        "total = int(arr.sum())",
        ["print(view.base is arr)"],
        paths=("nsys", "ncu"),
    ),
    *across(
        "pandas-column",
        ["import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})"],
        "df['b'] = df['a'] * 2",
        ["print(list(df.columns))"],
        paths=("nsys", "ncu"),
        again=False,
    ),
    *across(
        "deque",
        ["from collections import deque\nq = deque(maxlen=3)"],
        "q.append(len(q))",
        paths=("nsys", "warmup"),
    ),
    *across(
        "simple-namespace",
        ["from types import SimpleNamespace\nns = SimpleNamespace(count=0)"],
        "ns.count += 1",
        paths=("nsys", "ncu"),
    ),
    *across(
        "closure-nonlocal",
        [CLOSURE],
        "v = inc()",
        ["w = inc()"],
        paths=("nsys", "ncu"),
    ),
    *across(
        "mutable-default",
        ["def remember(x, seen=[]):\n    seen.append(x)\n    return len(seen)"],
        "k = remember(1)",
        ["k2 = remember(2)"],
        paths=("nsys", "host"),
    ),
    *across(
        "class-attribute",
        ["class Counter:\n    total = 0\n    def __init__(self):\n        Counter.total += 1"],
        "c1 = Counter()",
        ["print(Counter.total)"],
        paths=("nsys", "ncu"),
    ),
    *across(
        "module-in-cwd",
        ["import helpers"],
        "r = helpers.bump()",
        ["print(helpers.count, helpers.calls)"],
        paths=("nsys", "ncu"),
        files={"helpers.py": HELPERS},
        declared="stays there",
    ),
    *across("exec-text", ["k = 0"], "exec('k += 1')", ["print(k)"], paths=("nsys", "ncu")),
    *across(
        "environ",
        ["import os"],
        "os.environ['DIFF_FLAG'] = 'on'",
        ["print(os.environ.get('DIFF_FLAG'))"],
        paths=("nsys", "ncu"),
        again=False,
        declared="stays there",
    ),
    *across(
        "chdir",
        ["import os\nos.makedirs('sub', exist_ok=True)"],
        "os.chdir('sub')",
        ["open('where.txt', 'w').write('here')"],
        paths=("nsys", "ncu"),
        again=False,
        declared="stays there",
    ),
    *across(
        "numpy-print-options",
        ["import numpy as np"],
        "np.set_printoptions(precision=2)",
        ["print(np.array([1 / 3]))"],
        paths=("nsys",),
        again=False,
        declared="stays there",
    ),
    *across(
        "pandas-options",
        ["import pandas as pd"],
        "pd.set_option('display.precision', 2)",
        paths=("nsys",),
        again=False,
        declared="stays there",
    ),
]

# --- stale copies: the notebook changed what a worker received ------------------------------------
POINT = ("class Point:\n    def __init__(self, x):\n        self.x = x\n"
         "    def moved(self):\n        return Point(self.x + 1)\np = Point(1)")  # fmt: skip

STALE_COPIES = [
    Case(
        "stale-list-every-worker",
        (
            "log = []",
            "%%nsys\nlog.append('nsys')",
            "log.append('nb')",
            "%%ncu\nlog.append('ncu')",
            "log.append('nb2')",
            "%%nsys --host\nlog.append('host')",
            "%%nsys\nlog.append('nsys2')",
            "print(log)",
        ),
    ),
    Case(
        "stale-dict-every-worker",
        (
            "d = {}",
            "%%ncu\nd['ncu'] = 1",
            "d['nb'] = 2",
            "%%nsys\nd['nsys'] = 3",
            "d.pop('ncu')",
            "%%ncu\nd['ncu2'] = len(d)",
            "print(d)",
        ),
    ),
    Case(
        "list-appended-by-notebook-then-ncu",
        (
            "log = []",
            "%%nsys\nlog.append('nsys')",
            "log.append('nb')",
            "%%ncu\nlog.append('ncu')",
            "print(log)",
        ),
    ),
    *across(
        "class-from-ordinary-cell",
        [POINT],
        "q = p.moved()",
        ["print(isinstance(q, Point), q.x)"],
        paths=("nsys", "ncu", "host"),
    ),
    *across(
        "class-from-ordinary-cell-once",
        [POINT],
        "q = p.moved()",
        ["print(isinstance(q, Point), q.x)"],
        paths=("nsys", "ncu", "host"),
        again=False,
    ),
    Case(
        "class-redefined",
        (
            "class A:\n    v = 1",
            "%%nsys\na = A()",
            "class A:\n    v = 2",
            "%%nsys\nb = A()\nval = b.v",
            "print(type(a) is A, type(b) is A)",
        ),
    ),
    Case(
        "function-redefined",
        (
            "def f():\n    return 1",
            "%%nsys\nr = f()",
            "def f():\n    return 2",
            "%%nsys\nr2 = f()",
            "%%ncu\nr3 = f()",
        ),
    ),
    Case(
        "rebound-then-read", ("x = [1]", "%%nsys\ny = len(x)", "x = [1, 2]", "%%nsys\ny2 = len(x)")
    ),
]

# --- RNG ------------------------------------------------------------------------------------------
RNG_CASES = [
    *across(
        "random-draws",
        ["import random\nrandom.seed(0)"],
        "a = random.random()",
        ["b = random.random()"],
        paths=("nsys", "ncu", "warmup"),
    ),
    *across(
        "numpy-global-draws",
        ["import numpy as np\nnp.random.seed(0)"],
        "a = np.random.rand()",
        ["b = np.random.rand()"],
        paths=("nsys", "ncu"),
    ),
    Case(
        "random-seed-in-setup",
        (
            "%%nsight_setup\nimport random\nrandom.seed(0)",
            "%%nsys\na = random.random()",
            "b = random.random()",
        ),
    ),
    Case(
        "random-seed-in-profiled-cell",
        ("import random", "%%nsys\nrandom.seed(1)", "b = random.random()"),
    ),
    Case(
        "torch-draws",
        ("import torch\ntorch.manual_seed(0);", "%%nsys\na = torch.rand(2)", "b = torch.rand(2)"),
        torch=True,
    ),
    Case(
        "all-three-seeded",
        (
            "import random\nimport numpy as np\nimport torch\n"
            "random.seed(0)\nnp.random.seed(0)\ntorch.manual_seed(0);",
            "%%nsys\na = (random.random(), np.random.rand(), float(torch.rand(1)))",
            "b = (random.random(), np.random.rand(), float(torch.rand(1)))",
        ),
        torch=True,
    ),
    Case(
        "torch-tensor-in-place",
        (
            "import torch\nt = torch.zeros(3)\nv = t[1:]",
            "%%nsys --warmup 1\nt.add_(1);",
            "print(v)",
        ),
        torch=True,
    ),
]

# --- repeats outside Python, interrupted and failing cells ----------------------------------------
APPEND = "with open('log.txt', 'a') as _f:\n    _f.write('x')"

REPEATS = [
    Case("warmup-prints-once", ("%%nsys --warmup 1\nprint('once')",)),
    Case("warmup-appends-file-once", (f"%%nsys --warmup 1\n{APPEND}",)),
    # %%nsys --repeat N: N captured runs, the notebook sees one (its prints once, one append)
    Case("repeat-prints-and-appends-once", (f"%%nsys --repeat 4\nprint('once')\n{APPEND}",)),
    *across(
        "repeat-draws-and-advances-once",
        ["import random\nrandom.seed(0)\nit = iter(range(9))"],
        "a = random.random()\nb = next(it)",
        ["print(a, b, random.random(), next(it))"],
        paths=("repeat",),
    ),
    # every repeat puts back to one look, taken before the first (WorkerState.one_look): what
    # a repeat made, rebound, deleted or changed deep inside is gone before the next one
    *across(
        "repeat-rebinds-deletes-and-nests-once",
        [
            "import types\nbox = types.SimpleNamespace(items=[1], tag='a')\nalias = box.items\n"
            "gone = 5\nd = {'n': 0}"
        ],
        "box.items.append(len(box.items))\nbox.tag += 'b'\nd['n'] += 1\n"
        "d.setdefault('made', []).append([d['n']])\nalias = list(alias)\ndel gone\n"
        "fresh = d['n']",
        ["print(box.items, box.tag, d, alias, alias is box.items, 'gone' in dir(), fresh)"],
        paths=("repeat",),
        again=False,
    ),
    Case(
        "repeat-then-drill-puts-back-once",
        (
            "d = {'n': 0}\nxs = []",
            "%%nsys --repeat 3\nd['n'] += 1\nxs.append([d['n']])\nlast = xs[-1]",
            "#!drill kernel gemm",
            "print(d, xs, last, last is xs[-1])",
        ),
    ),
    Case(
        "repeat-that-raises-is-the-run",
        ("hits = []", "%%nsys --repeat 3\nhits.append(1)\nraise ValueError('x')", "print(hits)"),
    ),
    *across(
        "drill-prints-and-appends",
        [],
        f"print('run')\n{APPEND}",
        ["print(open('log.txt').read())"],
        paths=("drill", "range", "top"),
        again=False,
    ),
    Case(
        "sweep-leaves-state",
        (
            "hits = []",
            '%%nsys --sweep "x=1,2"\nhits.append(x)\ny = x',
            "print(hits, 'x' in globals())",
        ),
    ),
    Case(
        "sweep-then-profiled-read",
        (
            "hits = [0]",
            '%%nsys --sweep "x=1,2"\nhits.append(x)',
            "%%ncu\ntotal = sum(hits)",
            "%%nsys\nhits.append(len(hits))",
        ),
    ),
    Case("sweep-appends-file", (f'%%nsys --sweep "x=1,2"\n{APPEND}',)),
    Case("sweep-keeps-swept-name", ("x = 'mine'", '%%nsys --sweep "x=1,2"\nz = x', "print(x)")),
    *across(
        "interrupt-after-mutating",
        ["hits = []"],
        "hits.append(1)\nz = 5\nraise KeyboardInterrupt",
        ["print(hits)"],
        paths=("nsys", "ncu", "host"),
        again=False,
    ),
    *across(
        "raise-after-mutating",
        ["hits = []"],
        "hits.append(1)\nz = 5\nraise ValueError('boom')",
        ["print(hits, z)"],
        paths=("nsys", "ncu", "warmup"),
        again=False,
    ),
    Case(
        "raise-in-notebook-function",
        (
            STEP + "\ndef bad():\n    step()\n    raise ValueError('x')",
            "%%nsys\nbad()",
            "print(hits)",
        ),
    ),
]

# --- a crashed worker, then a re-run --------------------------------------------------------------
CRASH = "import os\nos._exit(1)"

CRASHES = [
    Case(
        "crash-then-rerun-nsys",
        ("hits = [0]", f"%%nsys\nhits.append(1)\n{CRASH}", "%%nsys\nhits.append(2)", "print(hits)"),
    ),
    Case(
        "crash-then-rerun-ncu",
        ("hits = [0]", f"%%ncu\n{CRASH}", "%%ncu\nhits.append(2)", "print(hits)"),
    ),
    Case(
        "crash-then-rerun-host",
        (
            "hits = [0]",
            f"%%nsys --host\n{CRASH}",
            "%%nsys --host\nhits.append(2)",
            "%%nsys\nhits.append(3)",
        ),
    ),
    Case(
        "crash-keeps-notebook-state",
        (
            "a = [1, 2]\n" + STEP,
            "%%nsys\nn = step()",
            f"%%nsys\nn = step()\n{CRASH}",
            "%%nsys\nb = sum(a)\nm = step()",
            "print(hits, n, m)",
        ),
    ),
    Case(
        "crash-keeps-setup-state",
        (
            f"%%nsight_setup\n{STEP}",
            "%%nsys\nn = step()",
            f"%%nsys\n{CRASH}",
            "%%ncu\nm = step()",
            "print(hits, n, m)",
        ),
    ),
]

# --- a setup cell whose names the worker had, made its own by a replay (the GPU acceptance of
# 2026-12-07: the last result ``_`` held a run, the setup's ``for _ in`` counted as binding it:
# every new worker replayed the setup and the notebook lost torch, the model and generate) ------
SETUP_REPLAYS = [
    Case(
        "last-result-unpicklable-setup-with-underscore",
        (
            "%%nsight_setup\nimport math\ndef f():\n    for _ in range(2):\n        pass\n"
            "    return math.pi",
            "import threading\nthreading.Lock()",
            "%%ncu\ny = f()",
            "%%nsys --host\nz = f() + 1",
            "print(y, z, math.pi == y, f.__name__)",
        ),
    ),
    Case(
        "setup-name-rebound-to-a-lock",
        (
            "%%nsight_setup\nobj = [1]\nk = 1",
            "%%nsys\na = len(obj) + k",
            "import threading\nobj = threading.Lock()",
            "%%nsys\nb = k + 1",
            "print(a, b, k)",
        ),
    ),
]

# --- refusals the product is designed to make: one line, checked instead of equality --------------
DECLARED = [
    Case(
        "lock-read",
        ("import threading\nlock = threading.Lock()", "%%nsys\nwith lock:\n    x = 1"),
        declared=(1, "lock cannot be pickled"),
    ),
    Case(
        "socket-read",
        ("import socket\ns = socket.socket()", "%%nsys\nfam = s.family", "s.close()"),
        declared=(1, "cannot receive"),
    ),
    Case(
        "generator-read",
        ("def gen():\n    yield 1\ng = gen()", "%%ncu\nv = next(g)"),
        declared=(1, "generator cannot be pickled"),
    ),
    Case(
        "lock-bound",
        ("%%nsys\nimport threading\nlk = threading.Lock()",),
        declared=(0, "not brought back to the notebook"),
    ),
]

# --- definitions that do not pickle travel as their source --------------------------------------
# what Triton's @triton.jit is to a notebook function: a wrapper holding a lock (it cannot be
# pickled) that reads the function's source with inspect.getsource when it is made
JIT = (
    "import inspect, threading\n\n"
    "class jit:\n"
    "    def __init__(self, fn):\n"
    "        self.fn, self.lock = fn, threading.RLock()\n"
    "        self.src = inspect.getsource(fn)\n"
    "        self.calls = 0\n"
    "    def __getitem__(self, grid):\n"
    "        return lambda *args: self.fn(*args) * grid\n\n"
    "def autotune(configs):\n"
    "    def wrap(fn):\n"
    "        tuned = jit(fn.fn)\n"
    "        tuned.configs = configs\n"
    "        return tuned\n"
    "    return wrap\n"
)
KERNEL = ("from jitlib import jit, autotune\nSCALE = 3\n\n@autotune(configs=[1, 2])\n@jit\n"
          "def kernel(x):\n    return x * SCALE\n")  # fmt: skip
DEFINITIONS = [
    *across(
        "jit-kernel-in-a-cell",
        [KERNEL],
        "y = kernel[2](7)",
        ["print(y, kernel.src.splitlines()[0], kernel.configs)"],
        paths=ALL,
        files={"jitlib.py": JIT},
    ),
    Case(
        "jit-kernel-sweep",
        (KERNEL, "%%nsys --sweep g=1,2\ny = kernel[g](1)", "print(kernel.src.splitlines()[0])"),
        files={"jitlib.py": JIT},
    ),
    Case(
        "jit-kernel-redefined",
        (
            KERNEL,
            "%%nsys\ny = kernel[1](1)",
            KERNEL.replace("x * SCALE", "x * SCALE + 1"),
            "%%nsys\nz = kernel[1](1)",
        ),
        files={"jitlib.py": JIT},
    ),
]

# torch.compile installs globals into the namespace of a function it compiles (the notebook's,
# or the worker's for a function made there by its own def): neither side's are the other's,
# and they are never said "not sent" (the acceptance on the H100 printed two such lines, then
# its worker died after a reduce-overhead cell, 2026-12-07)
COMPILED = (
    "import torch\n\n@torch.compile(backend='eager')\ndef cf(x):\n    return torch.sin(x) * 2 + 1"
)
DEFINITIONS += across(
    "torch-compile-in-a-cell",
    [COMPILED, "w = cf(torch.ones(3))"],
    "y = cf(torch.ones(3)) + float(w.sum())",
    ["print(y, [n for n in dir() if n.startswith('__compiled')] != [])"],
    paths=("nsys", "warmup", "ncu"),
    torch=True,
)

# --- found by a new user's hunt (2026-12-07): library-made classes and functions, torch's casts,
# slots, a factory, a cast, a loss, torch settings ----------------------------------------------
HUNT = [
    # a NamedTuple's methods are collections' code (its class is the notebook's): a profiled
    # cell that does not even read it broke the notebook's class (NameError: 'repr_fmt')
    *across(
        "namedtuple-class",
        [
            "from typing import NamedTuple\nclass Q(NamedTuple):\n    a: int\n    b: int",
            "q = Q(1, 2)\nimport collections\nR = collections.namedtuple('R', 'x y')\nr = R(3, 4)",
        ],
        "n = 1",
        ["print(q, r, q._replace(a=5), R._make([1, 2]))"],
        paths=("nsys", "warmup", "ncu", "drill"),
    ),
    # a dataclass's __repr__ is made by dataclasses (their globals): the instance pickles
    *across(
        "dataclass-instance",
        [
            "from dataclasses import dataclass, field\n@dataclass\nclass P:\n    x: int = 0\n"
            "    seen: list = field(default_factory=list)",
            "p = P()",
        ],
        "p.x += 1\np.seen.append(p.x)",
        ["print(p, p == P(2, [1, 2]))"],
        paths=("nsys", "warmup", "ncu"),
    ),
    *across(
        "slots-object",
        ["class S:\n    __slots__ = ('x', 'y')", "s = S()\ns.x = 1\nitems = [S()]\nitems[0].x = 0"],
        "s.y = 5\ns.x += 1\nitems[0].x += 1",
        ["print(s.x, s.y, items[0].x)"],
        paths=("nsys", "ncu"),
    ),
    *across(
        "defaultdict-factory",
        ["import collections\ndd = collections.defaultdict(list)"],
        "dd.default_factory = int\ndd['a'] += 1",
        ["dd['b'] += 2\nprint(dict(dd))"],
        paths=("nsys",),
        again=False,
    ),
    # a loss comes back as its values: its graph cannot leave the worker (said)
    Case(
        "loss-graph",
        (
            "import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(3, 1)",
            "%%nsys\nloss = model(torch.ones(3)).sum()",
        ),
        declared=(1, "without their autograd graph"),
        torch=True,
    ),
    # an LR scheduler wraps opt.step with a library closure (a weakref to the optimizer), which
    # torch's Optimizer pickle leaves out: made again in the worker (else its first
    # sched.step() warned that opt.step was replaced), and the stray FutureWarning of a
    # warm-up's walk into torch.distributed's globals is gone
    *across(
        "lr-scheduler",
        [
            "import torch\ntorch.manual_seed(0)\nm = torch.nn.Linear(3, 1)\n"
            "opt = torch.optim.SGD(m.parameters(), lr=0.5)\n"
            "sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)"
        ],
        "m(torch.ones(3)).sum().backward()\nopt.step()\nsched.step()\nopt.zero_grad()",
        ["print(sched.get_last_lr(), m.weight.sum().item(), getattr(opt, '_opt_called', None))"],
        paths=("nsys", "warmup", "ncu"),
        torch=True,
    ),
    # a data loader's iterator cannot be pickled: said with torch's own words formatted
    Case(
        "dataloader-iterator",
        (
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "it = iter(DataLoader(list(range(8)), batch_size=2))",
            "%%nsys\nb = next(it)",
        ),
        declared=(1, "_SingleProcessDataLoaderIter cannot be pickled)"),
        torch=True,
    ),
    # torch's process-wide switches stay in the worker: said (docs/sessions.md)
    Case(
        "torch-settings",
        ("import torch", "%%nsys\ntorch.set_default_dtype(torch.float64)"),
        declared=(1, "torch's options"),
        torch=True,
    ),
    *across(
        "module-cast",
        ["import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(3, 2)\nw = model.weight"],
        "model.half()",
        ["print(model.weight.dtype, w.dtype, model.weight is w)"],
        paths=("nsys", "ncu", "host"),
        again=False,
        torch=True,
    ),
]

# --- a second hunt: what the first left (empty states, views, repeats' files, caches) -------------
LRU = (
    "import functools\ncalls = []\n@functools.lru_cache\ndef f(x):\n    calls.append(x)\n"
    "    return x * 2"
)
LOG = (
    "import os\ndef log():\n"
    "    fd = os.open('log.txt', os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n"
    "    os.write(fd, b'x')\n    os.close(fd)"
)

HUNT_AGAIN = [
    # pickle leaves out an empty __dict__ and unset slots: the object came back as a new one
    # ("its state is only in how it is made"), and a deleted slot stayed set
    *across(
        "del-last-attr",
        ["class A: pass\na = A()\na.v = 1\nb = a"],
        "del a.v",
        ["print(vars(a), a is b)"],
        paths=("nsys", "ncu"),
        again=False,
    ),
    *across(
        "del-slot",
        ["class S:\n    __slots__ = ('x', 'y')\ns = S()\ns.x = 1\ns.y = 2"],
        "del s.x",
        ["print(hasattr(s, 'x'), s.y)"],
        paths=("nsys", "ncu"),
        again=False,
    ),
    # an lru_cache's entries cannot be read: the worker's stay there (said); a repeat's entries
    # in a cache that was empty are emptied again (else the counted run hits them)
    Case("lru-cache", (LRU, "%%nsys\ny = f(3)"), declared=(1, "f's functools cache")),
    *across(
        "lru-cache-warm",
        [LRU],
        "y = f(3)",
        ["print(calls)"],
        paths=("warmup",),
        again=False,
        declared="f's functools cache",
    ),
    # frames do not pickle: said
    *across(
        "exc-traceback",
        ["def boom():\n    raise ValueError('x')"],
        "try:\n    boom()\nexcept ValueError as e:\n    err = e",
        ["print(err, err.__traceback__ is not None)"],
        paths=("nsys",),
        again=False,
        declared="came back without its traceback",
    ),
    # each warm-up starts where the notebook is: files renamed, directories made and removed,
    # bytes written through os.open, a list popped (a drill-down re-runs the cell from where it
    # left the notebook: a cell that cannot run twice, os.replace of a file it moved, fails
    # there with its own error)
    *across(
        "warmup-os-files",
        ["import os, pathlib\nopen('a.txt','w').write('1')\nos.mkdir('old')"],
        "os.replace('a.txt', 'c.txt')\nos.mkdir('out')\nos.rmdir('old')\n"
        "pathlib.Path('out/x').write_text('y')",
        ["print(sorted(os.listdir('.')), os.listdir('out'))"],
        paths=("warmup",),
        again=False,
    ),
    *across(
        "warmup-pop",
        ["queue = [1]"],
        "batch = queue.pop()",
        ["print(batch, queue)"],
        paths=("warmup", "repeat"),
        again=False,
    ),
    *across(
        "warmup-append-write",
        [LOG],
        "log()",
        ["print(open('log.txt').read())"],
        paths=("warmup", "repeat", "drill"),
        again=False,
    ),
    # torch's Optimizer pickles its __getstate__ only: its hooks were left behind
    *across(
        "optimizer-hook",
        [
            "import torch\ntorch.manual_seed(0)\nm = torch.nn.Linear(2, 1)\n"
            "opt = torch.optim.SGD(m.parameters(), lr=0.1)\nseen = []\n"
            "h = opt.register_step_post_hook(lambda o, a, k: seen.append(1))"
        ],
        "m(torch.ones(2)).sum().backward()\nopt.step()",
        ["print(seen, m.weight.sum().item())"],
        paths=("nsys", "warmup", "ncu"),
        torch=True,
    ),
    *across(
        "module-hook",
        [
            "import torch\nm = torch.nn.Linear(2, 1)\nacts = []\n"
            "h = m.register_forward_hook(lambda mod, i, o: acts.append(o.shape))"
        ],
        "y = m(torch.ones(2)).detach()",
        ["print(acts)"],
        paths=("nsys", "warmup"),
        torch=True,
    ),
    # a view of an array the notebook names is a view in the worker too
    *across(
        "numpy-view",
        ["import numpy as np\na = np.zeros(4)\nv = a[:2]"],
        "v[0] = 9\ns = a.sum()",
        ["print(a, v, s, v.base is a)"],
        paths=("nsys", "ncu"),
    ),
    *across(
        "torch-view",
        ["import torch\na = torch.zeros(4)\nv = a[:2]"],
        "v[0] += 9\na[1] += 1\ns = a.sum().item()",
        ["print(a, v, s, v._base is a)"],
        paths=("nsys", "warmup"),
        torch=True,
    ),
]

# --- a third hunt (helper's 338 probes): gradients, views made in a cell, remade objects ---------
LINEAR_SGD = (
    "import torch\ntorch.manual_seed(0)\nm = torch.nn.Linear(2, 1)\n"
    "opt = torch.optim.SGD(m.parameters(), lr=1.0)"
)
LIST_HANDLER = (
    "import logging\nrecords = []\nclass ListHandler(logging.Handler):\n"
    "    def emit(self, r):\n        records.append(r.getMessage())\n"
    "log = logging.getLogger('nb')\nlog.addHandler(ListHandler())\nlog.setLevel(logging.INFO)"
)
DROPS_CACHE = (
    "class C:\n    def __init__(self):\n        self.v = 1\n        self.cache = {'k': 1}\n"
    "    def __getstate__(self):\n        return {'v': self.v}\nc = C()"
)

HUNT_THIRD = [
    # a gradient backward() made had no key: its tensor's print did not change, so it never
    # came back, and the notebook's opt.step() did nothing
    *across(
        "grad-made-by-backward",
        [LINEAR_SGD],
        "loss = m(torch.ones(2)).sum()\nloss.backward()",
        ["print(m.weight.grad)\nopt.step()\nprint(m.weight)"],
        paths=("nsys", "ncu", "host", "drill"),
        torch=True,
        again=False,
    ),
    *across(
        "grad-set",
        ["import torch\nt = torch.zeros(3, requires_grad=True)"],
        "t.grad = torch.ones(3)",
        ["print(t.grad)"],
        paths=("nsys", "warmup"),
        torch=True,
        again=False,
    ),
    # an inference tensor has no in-place counter (its print was an error: not brought back)
    *across(
        "inference-mode",
        ["import torch\ntorch.manual_seed(0)\nm = torch.nn.Linear(2, 2)"],
        "with torch.inference_mode():\n    y = m(torch.ones(2))",
        ["print(y)"],
        paths=("nsys", "warmup"),
        torch=True,
    ),
    # two names of one memory written in one cell: both writes land (one was lost)
    *across(
        "two-aliases-one-cell",
        ["import numpy as np\na = np.zeros(4)\nr = a[:2]"],
        "a[3] = 1\nr[1] = 3",
        ["print(a, r)"],
        paths=("nsys", "warmup", "ncu"),
    ),
    *across(
        "view-made-in-cell",
        ["import numpy as np\na = np.zeros(4)"],
        "v = a[:2]",
        ["v[1] = 7\nprint(a)"],
        paths=("nsys",),
        again=False,
    ),
    # a repeat's object whose state is in how it is made is made again as it was
    *across(
        "enumerate-warm",
        ["batches = [10, 20, 30]"],
        "i, b = next(enumerate(batches))",
        ["print(i, b)"],
        paths=("warmup", "repeat"),
    ),
    # an array.array is filled in place (it came back as a new object, and a repeat's appends
    # stayed)
    *across(
        "array-module-warm",
        ["import array\narr = array.array('i', [1])"],
        "arr.append(len(arr))",
        ["print(arr)"],
        paths=("warmup", "repeat", "drill"),
        again=False,
    ),
    # torch's Module.__setstate__ updates: an attribute the worker deleted stayed
    *across(
        "module-del-attr",
        ["import torch\nm = torch.nn.Linear(2, 1)\nm.tag = 'x'"],
        "del m.tag",
        ["print(hasattr(m, 'tag'))"],
        paths=("nsys", "ncu"),
        torch=True,
        again=False,
    ),
    # what a class's __getstate__ leaves out (a cache) stays the notebook's
    *across(
        "getstate-drops-cache",
        [DROPS_CACHE],
        "c.v += 1",
        ["print(c.v, c.__dict__.get('cache'))"],
        paths=("nsys",),
        again=False,
    ),
    # Python 3.11's cached_property holds a lock (the class could not go); a cached method's
    # reduce names a global the class's copy lacks
    *across(
        "cached-property-and-method",
        [
            "import functools\nclass M:\n    def __init__(self):\n        self.n = 1\n"
            "    @functools.cached_property\n    def big(self):\n        return [self.n]\n"
            "    @functools.lru_cache(maxsize=8)\n    def enc(self, s):\n        return len(s)\n"
            "m = M()"
        ],
        "v = m.big\nk = m.enc('abc')",
        ["print(v, k, m.big is v, 'big' in vars(m))"],
        paths=("nsys", "warmup"),
        again=False,
    ),
    # an exception's chain comes back, and a subclass whose __init__ takes other arguments
    # than it passes on (pickle's own way fails there); its traceback cannot (said)
    *across(
        "exception-chain",
        [
            "class MyErr(Exception):\n    def __init__(self, msg, code):\n"
            "        super().__init__(msg)\n        self.code = code"
        ],
        "try:\n    try:\n        1 / 0\n    except ZeroDivisionError as z:\n"
        "        raise MyErr('bad', 7) from z\nexcept MyErr as e:\n    err = e",
        ["print(repr(err), err.code, repr(err.__cause__), err.__suppress_context__)"],
        paths=("nsys", "ncu"),
        again=False,
        declared="came back without its traceback",
    ),
    # a view made in the cell is a view torch knows (its _base); a state_dict()'s tensors share
    # their parameters' memory; pandas' arrays stay pandas' own (copy-on-write)
    *across(
        "torch-view-made-in-cell",
        ["import torch\nt = torch.zeros(4)"],
        "v = t[:2]\nv[0] = 9",
        ["v[1] = 7\nprint(t, v, v._base is t)"],
        paths=("nsys", "ncu"),
        torch=True,
        again=False,
    ),
    *across(
        "state-dict-alias",
        ["import torch\ntorch.manual_seed(0)\nm = torch.nn.Linear(2, 2)"],
        "sd = m.state_dict()",
        ["with torch.no_grad():\n    m.weight.fill_(3)\nprint(sd['weight'])"],
        paths=("nsys", "warmup"),
        torch=True,
        again=False,
    ),
    *across(
        "pandas-series-made-in-cell",
        ["import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})"],
        "s = df['a']",
        ["s.iloc[0] = 100\nprint(df['a'].tolist(), s.tolist())"],
        paths=("nsys",),
        again=False,
    ),
    # a hook handle's state holds the module's own hook dict (it was copied: remove() in the
    # worker left the hook on)
    *across(
        "hook-remove",
        [
            "import torch\nm = torch.nn.Linear(2, 2)\nseen = []\n"
            "h = m.register_forward_hook(lambda mod, i, o: seen.append(1))"
        ],
        "h.remove()",
        ["z = m(torch.ones(2))\nprint(seen, len(m._forward_hooks))"],
        paths=("nsys", "ncu"),
        torch=True,
        again=False,
    ),
    # GradScaler's pickle leaves out its scale and growth tracker (AMP started over)
    *across(
        "gradscaler",
        [
            "import torch\ntorch.manual_seed(0)\n"
            "scaler = torch.amp.GradScaler('cpu', init_scale=16.0)\n"
            "m = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)"
        ],
        "loss = m(torch.ones(2)).sum()\nscaler.scale(loss).backward()\nscaler.step(opt)\n"
        "scaler.update()\nopt.zero_grad()",
        ["print(scaler.get_scale(), scaler._growth_tracker, m.weight)"],
        paths=("nsys", "warmup", "ncu"),
        torch=True,
    ),
    # a np.memmap (nanoGPT's dataset) is the same file mapped on the other side (it failed
    # with RecursionError; a copy would send the whole file)
    *across(
        "numpy-memmap",
        [
            "import numpy as np\nmm = np.memmap('mm.bin', dtype='int8', mode='w+', shape=(4,))\n"
            "mm[:] = 1\nmm.flush()"
        ],
        "s = int(mm.sum())\nmm[0] = 5\nmm.flush()",
        ["print(s, mm[:], type(mm).__name__)"],
        paths=("nsys", "ncu"),
    ),
    # pandas' block manager is made from its blocks: a repeat makes it again and gives it back
    # to its frame (a column += 1 ran once per warm-up)
    *across(
        "pandas-column-warm",
        ["import pandas as pd\ndf = pd.DataFrame({'a': [1]})"],
        "df['b'] = df['a'] * 2\ndf['a'] += 1",
        ["print(df.to_dict('list'))"],
        paths=("warmup", "repeat", "drill"),
        again=False,
    ),
    # the cell's output as written: blank lines, an open line, a bar redrawn by "\r"
    *across(
        "output-as-written",
        ["import sys"],
        "print('a')\nprint()\nprint('b', end='')\nprint('c', end='\\r')\nprint('d')\n"
        "sys.stdout.write('e')",
        ["print('next')"],
    ),
    # a project's modules on the notebook's sys.path (insert(0, ...) and append): the worker
    # makes the notebook's functions of them and the cell imports them
    *across(
        "project-path-insert",
        [
            "import os, sys\nos.makedirs('src', exist_ok=True)\n"
            "open('src/mylib.py', 'w').write('def helper(x):\\n    return x + 1\\n')\n"
            "sys.path.insert(0, os.path.abspath('src'))\nfrom mylib import helper"
        ],
        "y = helper(1)\nimport mylib\nz = mylib.helper(y)",
        ["print(y, z)"],
        paths=("nsys", "ncu", "host", "drill"),
    ),
    *across(
        "project-path-append",
        [
            "import os, sys\nos.makedirs('lib2', exist_ok=True)\n"
            "open('lib2/mylib2.py', 'w').write('K = 5\\n')\nsys.path.append('lib2')\nimport mylib2"
        ],
        "y = mylib2.K + 1",
        ["print(y)"],
        paths=ONE,
    ),
    # a project module edited and reloaded in the notebook (importlib.reload, %autoreload):
    # the worker, which imported it before, runs the notebook's new code too
    *across(
        "module-reloaded",
        [
            "open('modx.py', 'w').write('def f():\\n    return 1\\n')\nimport modx",
            "%%nsys\ny = modx.f()",
            "import importlib, os\nt = os.stat('modx.py').st_mtime\n"
            "open('modx.py', 'w').write('def f():\\n    return 2\\n')\n"
            "os.utime('modx.py', (t + 5, t + 5))\n_ = importlib.reload(modx)\ndel t",
        ],
        "z = modx.f()",
        ["print(y, z)"],
        paths=("nsys", "ncu", "warmup"),
        again=False,
    ),
    Case(
        "module-autoreloaded",
        (
            "%load_ext autoreload\n%autoreload 2",
            "open('mody.py', 'w').write('def f():\\n    return 1\\n"
            "class C:\\n    def m(self):\\n        return 1\\n')\nimport mody\n"
            "from mody import f\nc = mody.C()",
            "%%nsys\ny = mody.f()",
            "import os\nt = os.stat('mody.py').st_mtime\n"
            "open('mody.py', 'w').write('def f():\\n    return 22\\n"
            "class C:\\n    def m(self):\\n        return 22\\n')\n"
            "os.utime('mody.py', (t + 5, t + 5))\ndel t",
            "x = 0",
            "%%nsys\nz = (mody.f(), f(), c.m())",
            "print(y, z)",
        ),
    ),
    # what the cell writes to stderr stays stderr: a warning, a bar, a log line (the worker's
    # stderr shares its stdout's pipe)
    *across(
        "stderr-as-written",
        ["import logging, sys, warnings"],
        "print('a')\nwarnings.warn('careful')\nsys.stderr.write('\\r 10%')\n"
        "sys.stderr.write('\\r100%\\n')\nlogging.getLogger('z').warning('w')\nprint('b')",
    ),
    # a cell with a magic runs with an IPython shell in the worker: the shell's own names
    # (its 'open') stay there; a cell that displays gets one too
    *across(
        "magic-keeps-the-shells-names",
        ["import os"],
        "y = %pwd\nsame = y == os.getcwd()\ndel y",
        ["print(same, sorted(k for k in dir() if k == 'open'))"],
    ),
    *across(
        "display-keeps-the-shells-names",
        ["x = 1"],
        "display(x)",
        ["print(dir().count('open'))"],
        paths=ONE,
    ),
    # a drill-down re-runs the cell from the notebook's state of now: a cell that uses up what
    # it reads fails there, said as the re-run's (not "the profiled cell raised")
    *(
        Case(
            f"drill-rerun-{name}",
            (before, f"%%nsys\n{body}", "#!drill kernel gemm"),
            declared=(2, "from the notebook's state as it is now"),
        )
        for name, before, body in (
            ("next", "it = iter([1])", "v = next(it)"),
            ("pop", "lst = [1]", "v = lst.pop()"),
            ("del", "a = 1", "del a"),
        )
    ),
    # what stays in the worker, said
    Case(
        "logger-handlers",
        (LIST_HANDLER, "%%nsys\nlog.info('step')"),
        declared=(1, "a logger goes to the nsys worker by its name"),
    ),
    Case(
        "logging-level",
        ("import logging\nlog = logging.getLogger('nb2')", "%%nsys\nlog.setLevel(logging.ERROR)"),
        declared=(1, "logging's levels and handlers"),
    ),
    Case(
        "sys-path",
        ("import sys", "%%nsys\nsys.path.append('/nonexistent-x')"),
        declared=(1, "sys.path"),
    ),
    Case(
        "cudnn-benchmark",
        ("import torch", "%%nsys\ntorch.backends.cudnn.benchmark = True"),
        declared=(1, "torch's options"),
        torch=True,
    ),
]

CASES: list[Case] = [*TRAINING, *DICT_SUBCLASS, *REBINDING, *READS, *OBJECTS, *STALE_COPIES,
                     *RNG_CASES, *REPEATS, *CRASHES, *SETUP_REPLAYS, *DECLARED,
                     *DEFINITIONS, *HUNT, *HUNT_AGAIN, *HUNT_THIRD]  # fmt: skip
