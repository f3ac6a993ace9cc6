"""argv for ``ncu`` over a generated cell script, with kernel names and NVTX ranges escaped.

Kernel filter: ``--kernel-name regex:^...$`` with only the regex syntax characters escaped
(``\\^$.|?*+()[]{}``): Python's ``re`` and ncu's ECMAScript-style engine then read the pattern
the same way, whereas ``re.escape`` also escapes spaces etc., which some engines reject.

NVTX filter grammar (ncu docs, "NVTX Filtering"): ``[domain@]range`` where ``@`` separates
the domain, push/pop ranges end with ``/`` (and ``/`` separates nested push/pop ranges), a
trailing ``]`` means top of stack. A literal ``@``, ``/`` or ``\\`` inside a name is escaped
with a backslash.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..vocabulary.nvtx_names import CAPTURE_RANGE, NVTX_DOMAIN, TARGET_RANGE, statement_line
from .options import option

# the cell's start/end range (no slash): kernels launched on any thread while the cell runs,
# the backward pass's on autograd's thread included (the push/pop ``cell/`` held only the main
# thread's: a picked backward GEMM was "nothing captured")
CELL_FILTER = f"{NVTX_DOMAIN}@{CAPTURE_RANGE}"
# the start/end range the cell script opens around the range ``--nvtx`` names (no slash:
# start/end ranges take none; measured form: a start/end range ``LLM@generate``,
# docs/workloads.md)
TARGET_FILTER = f"{NVTX_DOMAIN}@{TARGET_RANGE}"
REGEX_SPECIAL = frozenset("\\^$.|?*+()[]{}")
NVTX_SPECIAL = frozenset("\\@/")


def regex_escape(text: str) -> str:
    """Backslash the regex syntax characters only (see module doc)."""
    return "".join("\\" + c if c in REGEX_SPECIAL else c for c in text)


def exact_kernel_regex(name: str) -> str:
    """An anchored regex matching exactly ``name`` (nothing longer, nothing similar)."""
    return f"^{regex_escape(name)}$"


def kernel_name_base(name: str) -> str:
    """Which name ncu should compare: ``mangled`` for ``_Z...``, ``demangled`` for a full
    signature (has ``(`` or template ``<``/``::``), else the bare ``function`` name."""
    if name.startswith("_Z"):
        return "mangled"
    if any(tok in name for tok in ("(", "<", "::")):
        return "demangled"
    return "function"


def kernel_filter_args(name: str) -> list[str]:
    """``--kernel-name-base B --kernel-name regex:^name$`` for one exact kernel name."""
    return [
        "--kernel-name-base",
        kernel_name_base(name),
        "--kernel-name",
        "regex:" + exact_kernel_regex(name),
    ]


def kernel_id_regex(names: Sequence[str]) -> str:
    """One anchored regex matching exactly each of ``names``, for ``--kernel-id``, whose
    fields are separated by ``:``: a ``:`` inside a name (``at::native::...``) is written
    ``\\x3a`` (ECMAScript's escape for it), so no field separator appears in the regex."""
    alternatives = "|".join(regex_escape(name).replace(":", "\\x3a") for name in names)
    return f"^({alternatives})$"


def first_launches_args(names: Sequence[str]) -> list[str]:
    """``--kernel-name-base B --kernel-id ::regex:^(a|b|c)$:1``: the first launch (invocation
    1) of each kernel named in ``names``, in one ncu pass. ``--kernel-id``'s fields are
    ``context-id:stream-id:[name-operator:]kernel-name:invocation-nr`` (ncu CLI docs: ``::Foo:2``
    is the second invocation of Foo); empty context and stream match any, and the invocation
    counts each matched kernel function's launches on its own. The name base is the one every
    name can be read in (``kernel_name_base``: the demangled names nsys shows; mangled only
    when every name is)."""
    bases = {kernel_name_base(name) for name in names}
    base = bases.pop() if len(bases) == 1 else "demangled"
    return ["--kernel-name-base", base, "--kernel-id", f"::regex:{kernel_id_regex(names)}:1"]


def escape_nvtx_name(name: str) -> str:
    """Escape ``\\``, ``@`` and ``/`` so ncu reads ``name`` as one literal range/domain name."""
    return "".join("\\" + c if c in NVTX_SPECIAL else c for c in name)


def nvtx_filter(
    ranges: str | Sequence[str], *, domain: str | None = None, push_pop: bool = True
) -> str:
    """Filter for a range (or nested push/pop ranges, outermost first) in ``domain`` (None =
    the default domain). Push/pop ranges get the trailing ``/``; start/end ranges do not."""
    parts = [ranges] if isinstance(ranges, str) else list(ranges)
    if not parts or any(p == "" for p in parts):
        raise ValueError("NVTX range names must be non-empty")
    if not push_pop and len(parts) > 1:
        raise ValueError("only push/pop ranges nest")
    body = "/".join(escape_nvtx_name(p) for p in parts) + ("/" if push_pop else "")
    return (escape_nvtx_name(domain) + "@" if domain else "") + body


def parse_nvtx_filter(text: str) -> tuple[str | None, list[str], bool]:
    """Inverse of ``nvtx_filter``: ``(domain, ranges, push_pop)``; used to check escaping."""
    tokens: list[str] = []
    seps: list[str] = []
    cur, i = "", 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur += text[i + 1]
            i += 2
            continue
        if c in "@/":
            tokens.append(cur)
            seps.append(c)
            cur = ""
        else:
            cur += c
        i += 1
    tokens.append(cur)
    domain = None
    if seps and seps[0] == "@":
        domain = tokens.pop(0)
        seps.pop(0)
    push_pop = bool(seps) and tokens[-1] == ""
    if push_pop:
        tokens.pop()
    return domain, tokens, push_pop


def _metric_list(text: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in text.split(",") if m.strip())


def _section_set(text: str | None) -> str | None:
    return None if text in ("none", "", None) else text


def _blank_none(text: str | None) -> str | None:
    return text or None


@dataclass(frozen=True)
class NcuOptions:
    """What ncu collects (``set``, ``sections``, ``metrics``) and which launches it profiles:
    the options of ``%%ncu``, declared once (``profilers/options.py`` generates the magic's
    flags, its help, meta.json's ``options`` and what a drill-down may set from these fields).

    ``kernel_exact`` is a kernel name (escaped and anchored here); ``kernel_regex`` the user's own
    regex, passed as is. ``nvtx_include``/``nvtx_exclude`` are ncu NVTX filter expressions,
    already spelled for ncu (default: the cell's own range); ``nvtx_target`` is a range as the
    user wrote it (``%%ncu --nvtx``): the cell script marks it and the filter selects the mark
    (``TARGET_FILTER``, in place of ``nvtx_include``); ``launch_skip``/``launch_count``
    count matching launches only, from the start of the run (fresh) or of the attach (warm)."""

    set: str | None = option(
        "roofline",
        "--set",
        "ncu section set: roofline (default), basic, detailed, full, or 'none'.",
        metavar="SET",
        parse=_section_set,
        drill=True,
    )
    sections: tuple[str, ...] = option(
        (), "--section", "ncu section (repeatable).", metavar="SECTION", repeat=True, drill=True
    )
    metrics: tuple[str, ...] = option(
        (), "--metrics", "Extra ncu metrics.", metavar="M1,M2", parse=_metric_list, drill=True
    )
    kernel_regex: str | None = option(
        None, "--kernel", "Only kernels matching REGEX.", metavar="REGEX", meta_key="kernel"
    )
    kernel_exact: str | None = option(None, meta_key="kernel")
    # profile_top: the first launch of each of these kernels (exact names), in one pass
    first_launch_of: tuple[str, ...] = option((), meta_key="top_kernels")
    launch_skip: int | None = option(
        None, "--launch-skip", "Skip the first N launches that match the filters.", metavar="N"
    )
    launch_count: int | None = option(
        None, "--launch-count", "Profile at most N launches that match the filters.", metavar="N"
    )
    nvtx_include: tuple[str, ...] = option((CELL_FILTER,))
    nvtx_exclude: tuple[str, ...] = option(())
    extra_args: tuple[str, ...] = option(())
    nvtx_target: str | None = option(
        None,
        "--nvtx",
        "Only kernels inside this NVTX range, as the NVTX tab shows it: "
        "DOMAIN:RANGE (':RANGE' for the default domain) or a bare RANGE in any domain, matched "
        "as plain text while the cell runs ('LLM@prefill' finds it in domain LLM).",
        metavar="RANGE",
        parse=_blank_none,
    )
    # set by the session: only this opening of ``nvtx_target`` (1 = the first) is marked; a
    # drill-down of a run that ``%%nsys --nvtx RANGE#K`` captured counts launches within it
    nvtx_instance: int | None = option(None)

    def __post_init__(self) -> None:
        if self.kernel_regex and self.kernel_exact:
            raise ValueError("give kernel_regex or kernel_exact, not both")
        if self.first_launch_of and (
            self.kernel_regex or self.kernel_exact or self.launch_skip or self.launch_count
        ):
            # the invocation number picks the launches; a count of matching launches would cut
            raise ValueError("first_launch_of takes no other kernel filter nor launch count")
        for flag, value in (
            ("--launch-skip", self.launch_skip),
            ("--launch-count", self.launch_count),
        ):
            if value is not None and int(value) < 0:
                raise ValueError(f"{flag} must be >= 0")

    def collect_args(self) -> list[str]:
        """What to measure: ``--set``, ``--section``..., ``--metrics``."""
        args = ["--set", self.set] if self.set else []
        for section in self.sections:
            args += ["--section", section]
        if self.metrics:
            args += ["--metrics", ",".join(self.metrics)]
        return args

    def filter_args(self) -> list[str]:
        """Which launches: NVTX includes, kernel name, skip/count (no ``--nvtx``: attach mode
        refuses it; it goes on the launching command)."""
        args: list[str] = []
        includes = (TARGET_FILTER,) if self.nvtx_target is not None else self.nvtx_include
        for expression in includes:
            args += ["--nvtx-include", expression]
        for expression in self.nvtx_exclude:
            args += ["--nvtx-exclude", expression]
        if self.first_launch_of:
            args += first_launches_args(self.first_launch_of)
        elif self.kernel_exact:
            args += kernel_filter_args(self.kernel_exact)
        elif self.kernel_regex:
            args += ["--kernel-name", "regex:" + self.kernel_regex]
        for flag, value in (
            ("--launch-skip", self.launch_skip),
            ("--launch-count", self.launch_count),
        ):
            if value is not None:
                args += [flag, str(int(value))]
        return args

    def describe_filter(self) -> str:
        """The filter in words, for "nothing matched" messages."""
        args = self.filter_args()
        pairs = [(args[i], args[i + 1]) for i in range(0, len(args), 2)]
        # the marker filter is ours: the user reads the range they named instead
        hidden = {"--kernel-name-base"} | ({"--nvtx-include"} if self.nvtx_target else set())
        parts = [f"{flag} {value!r}" for flag, value in pairs if flag not in hidden]
        if self.nvtx_target is not None:
            which = f"#{self.nvtx_instance}" if self.nvtx_instance else ""
            parts.insert(0, f"--nvtx {self.nvtx_target + which!r}")
        return "the filter " + " ".join(parts) if parts else "any kernel"


def profile_argv(
    ncu: str | os.PathLike[str],
    report_base: str | os.PathLike[str],
    command: Sequence[str] = (),
    *,
    options: NcuOptions | None = None,
) -> list[str]:
    """``ncu --target-processes all --nvtx [collect] [filters] -f -o REPORT [extra] COMMAND``
    for a fresh run (COMMAND empty: the prefix a per-rank shim completes)."""
    options = options or NcuOptions()
    return [
        os.fspath(ncu),
        "--target-processes",
        "all",
        "--nvtx",
        *options.collect_args(),
        *options.filter_args(),
        "-f",
        "-o",
        os.fspath(report_base),
        *options.extra_args,
        *[os.fspath(c) for c in command],
    ]


def launch_argv(ncu: str | os.PathLike[str], port: int, command: Sequence[str]) -> list[str]:
    """``ncu --mode launch`` of a warm worker: it runs with ncu's injection and stops at its
    first CUDA call until a tool attaches (measured: tools/fixtures/probes/session_probe*.py).
    Only the worker itself (``application-only``; a fresh run follows every process): what a
    cell starts (``!nvidia-smi``, inductor's compile workers, ptxas) runs without ncu's
    injection. Injected, such a child was followed by the worker's SIGSEGV (issue 41:
    ``!nvidia-smi``; a notebook whose setup cells ``torch.compile`` and capture a CUDA graph:
    benchmarks/README.md, design measurements), and a child that calls CUDA would wait for an
    attach no one makes."""
    return [os.fspath(ncu), "--mode", "launch", "--port", str(port),
            "--target-processes", "application-only", "--nvtx", *command]  # fmt: skip


def attach_argv(
    ncu: str | os.PathLike[str], port: int, report_base: str | os.PathLike[str], options: NcuOptions
) -> list[str]:
    """``ncu --mode attach`` to the warm worker on ``port``: profiles what ``options`` select
    while attached; the report is complete once the launches ran (the CLI itself stays
    connected until it is sent SIGINT)."""
    return [
        os.fspath(ncu),
        "--mode",
        "attach",
        "--hostname",
        "127.0.0.1",
        "--port",
        str(port),
        *options.collect_args(),
        *options.filter_args(),
        "-f",
        "-o",
        os.fspath(report_base),
        *options.extra_args,
    ]


# An attach that selects no launch: releases a worker held at its first CUDA call.
RELEASE = NcuOptions(set=None, kernel_regex="^$", nvtx_include=())


def listed_identifiers(text: str) -> frozenset[str]:
    """The identifiers of ``ncu --list-sets`` / ``--list-sections`` output: the first word of
    each table row (rows wrapped onto more lines continue indented)."""
    names = set()
    body = False
    for line in text.splitlines():
        if line.startswith("Identifier"):
            body = True
            continue
        if not body or not line.strip() or line.startswith(("-", " ", "\t")):
            continue
        names.add(line.split()[0])
    return frozenset(names)


def parse_range_spec(spec: str) -> tuple[str | None, str]:
    """A range as the NVTX tab (and ``nsys stats``) writes it -> (domain, name): "DOMAIN:RANGE",
    ":RANGE" for the default domain (domain ""), or "RANGE" alone (domain None: not said). A
    statement label ("L3: y = f(x)") names a range of the cell's own domain."""
    spec = spec.strip()
    if not spec:
        raise ValueError("the range name is empty")
    if statement_line(spec) is not None:
        return NVTX_DOMAIN, spec
    domain, sep, name = spec.partition(":")
    if not sep:
        return None, spec
    if not name:
        raise ValueError("no range name after 'DOMAIN:'")
    return domain, name
