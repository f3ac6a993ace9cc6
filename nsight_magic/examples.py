"""Real runs that ship with the package, one line each, so the product can be tried with no GPU
and no Nsight tools::

    import nsight_magic
    nsight_magic.examples.llm()          # %%nsys of a small GPT's prefill (8 layers, bf16)
    nsight_magic.examples.llm_kernel()   # the picker's ncu run of that prefill's top GEMM
    nsight_magic.examples.compare()      # naive fp32 attention -> fused bf16 SDPA
    nsight_magic.examples.memory()       # %%nsys --memory of a training step (the Memory tab)

All were captured on an NVIDIA H200 with Nsight Systems / Compute 2025.3.1 (committed
2026-11-22) by the code of the notebooks in ``notebooks/`` (02 and 03) and by ``tools/fixtures``
(``tour``). The committed notebooks and their run folders in ``notebooks/runs/`` are a later
execution of the same code on an H100, so their numbers differ. The reports are stored xz-packed
(300 kB in all): SQLite exports are unpacked once per process into a temporary folder that is
removed when Python exits (an nsys report reads its tables on demand); an ``.ncu-rep`` is
unpacked into a temporary folder that is removed as soon as it is read (the ncu reader reads the
whole report when it opens it).
"""

from __future__ import annotations

import lzma
import shutil
import tarfile
import tempfile
from pathlib import Path

from .errors import ReportNotFoundError
from .reports import open_report
from .results import NcuRun, NsysRun
from .results.comparison import Comparison
from .results.comparison import compare as _compare
from .vocabulary.arguments import text_arg

DATA = Path(__file__).parent / "example_data"

# name -> (packed file, what it is). Shown by ``available()``.
RUNS = {
    "tour": ("tour.sqlite.xz", "a cell with 5 statements, user NVTX ranges, copies, 2 streams"),
    "llm_prefill": ("llm_prefill.sqlite.xz", "GPT prefill: 8 layers, d_model 1024, bf16"),
    "llm_decode": ("llm_decode.sqlite.xz", "GPT decode: 32 tokens with a KV cache"),
    "llm_kernel": (
        "llm_prefill_top_gemm.ncu-rep.xz",
        "ncu --set roofline on the prefill's top kernel (a bf16 GEMM)",
    ),
    "attention_naive": ("attention_naive_fp32.sqlite.xz", "naive fp32 attention, 10 calls"),
    "attention_sdpa": ("attention_sdpa_bf16.sqlite.xz", "fused bf16 SDPA, 10 calls"),
}

# a whole run folder of %%nsys --memory (meta.json, status.json with torch's counts, the
# allocator snapshot, report.sqlite), tar-packed by tools/fixtures/capture_memory_example.sh
MEMORY_RUN = "memory_train.tar.xz"
MEMORY_ABOUT = "%%nsys --memory of a training step: a 2-layer MLP and AdamW (the Memory tab)"
if (DATA / MEMORY_RUN).is_file():
    RUNS["memory"] = (MEMORY_RUN, MEMORY_ABOUT)

_unpacked: tempfile.TemporaryDirectory[str] | None = None


def _session_dir() -> Path:
    # One folder per process; TemporaryDirectory removes it when it is collected or at exit.
    global _unpacked
    if _unpacked is None:
        _unpacked = tempfile.TemporaryDirectory(prefix="nsight-magic-examples-")
    return Path(_unpacked.name)


def _unpack(packed: str, into: Path) -> Path:
    target = into / packed[: -len(".xz")]
    if not target.exists():
        with lzma.open(DATA / packed) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return target


def _nsys(key: str, name: str) -> NsysRun:
    report = open_report(_unpack(RUNS[key][0], _session_dir()))
    return NsysRun(report, meta={"name": name, "example": key, "about": RUNS[key][1]})


def available() -> dict[str, str]:
    """Example name -> what it holds."""
    return {key: about for key, (_, about) in RUNS.items()}


def tour() -> NsysRun:
    """The feature tour: a cell of 5 statements (one NVTX range each), the user's own ranges
    (``LLM@prefill``, ``decode``, ``decode/step``, a start/end ``side-work``), a pinned
    host-to-device and a device-to-host copy, two streams."""
    return _nsys("tour", "tour")


def llm(phase: str = "prefill") -> NsysRun:
    """``%%nsys`` of a small GPT (8 layers, d_model 1024, bf16) on an H200: ``"prefill"`` (one
    forward over the prompt) or ``"decode"`` (32 tokens, one at a time, with a KV cache)."""
    text_arg(phase, "phase", "examples.llm()", choices=("prefill", "decode"))
    return _nsys(f"llm_{phase}", f"llm {phase}")


def llm_kernel() -> NcuRun:
    """What the picker returned for the prefill's top kernel (a bf16 GEMM, ``--set
    roofline``): roofline, advice and MFU, the latter on the prefill's real-clock time."""
    with tempfile.TemporaryDirectory(prefix="nsight-magic-example-") as tmp:
        report = open_report(_unpack(RUNS["llm_kernel"][0], Path(tmp)))
    meta = {"name": "llm prefill: top GEMM", "example": "llm_kernel"}
    return NcuRun(report, meta=meta, parent=llm("prefill"))


def attention(kind: str = "naive") -> NsysRun:
    """Attention over the same q, k, v: ``"naive"`` (fp32 matmul + softmax + matmul) or
    ``"sdpa"`` (``F.scaled_dot_product_attention`` in bf16, one fused kernel)."""
    text_arg(kind, "kind", "examples.attention()", choices=("naive", "sdpa"))
    return _nsys(f"attention_{kind}", f"attention {kind}")


def has_memory_example() -> bool:
    """Whether this copy of the package has the ``--memory`` run (``memory()``)."""
    return (DATA / MEMORY_RUN).is_file()


def memory() -> NsysRun:
    """``%%nsys --memory`` of one training step of a 2-layer MLP with AdamW (model, optimizer
    and data built in a ``%%nsight_setup`` cell), loaded from its run folder: device memory
    per process over time, the peak and the statement open then, PyTorch's own counts and the
    tensors alive at its peak with the lines that made them (the Memory tab)."""
    if not has_memory_example():
        raise ReportNotFoundError(
            f"This copy of nsight_magic has no --memory example ({MEMORY_RUN} is missing from "
            f"{DATA}). Profile a cell with %%nsys --memory to see the Memory tab on your own run."
        )
    from .results.loading import load_run

    folder = _session_dir() / "memory_train"
    if not folder.is_dir():
        with tarfile.open(DATA / MEMORY_RUN, "r:xz") as tar:
            if hasattr(tarfile, "data_filter"):  # plain files only (Python 3.10.12+)
                tar.extractall(_session_dir(), filter="data")
            else:  # pragma: no cover - our own packed file
                tar.extractall(_session_dir())
    folder.chmod(0o700)  # a run folder is ours alone (run_folders/ownership.py)
    run = load_run(folder)
    run.meta.update(example="memory", about=MEMORY_ABOUT)
    return run


def compare() -> Comparison:
    """Two different real runs side by side: naive fp32 attention -> fused bf16 SDPA."""
    return _compare(attention("naive"), attention("sdpa"))
