"""The picker, %%ncu and NVTX-range drill-downs end to end on a GPU (pytest -m gpu -s tests/gpu).

Skipped unless nsys and ncu are found and torch sees CUDA. Prints what it finds."""

from __future__ import annotations

import time

import pytest

from nsight_magic.errors import NothingCapturedError
from nsight_magic.run_folders import runs
from nsight_magic.session.manager import MANAGER

from .conftest import cuda, have, magic

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (have("nsys") and have("ncu")), reason="nsys/ncu not found"),
    pytest.mark.skipif(not cuda(), reason="no CUDA device"),
]

CELL = (
    "import torch\n"
    "a = torch.randn(2048, 2048, device='cuda', dtype=torch.bfloat16)\n"
    "b = torch.relu(a)\n"
    "for _ in range(3):\n"
    "    c = a @ b\n"
    "d = torch.sin(c.float()).sum()\n"
    "torch.cuda.synchronize()\n"
)

LLM = (
    "import torch, nvtx\n"
    "x = torch.randn(1 << 20, device='cuda')\n"
    "y = torch.cos(x)\n"
    "gen = nvtx.start_range('generate', domain='LLM')\n"
    "with nvtx.annotate('LLM@prefill', domain='LLM'):\n    z = torch.sin(x)\n"
    "with nvtx.annotate('decode', domain='LLM'):\n    w = torch.exp(x)\n"
    "nvtx.end_range(gen)\n"
    "torch.cuda.synchronize()\n"
)


def test_picker_in_a_warm_session(ip) -> None:  # type: ignore[no-untyped-def]
    run = magic(ip, "nsys", "--name picker", CELL)
    assert not isinstance(run, Exception), run
    summary = run.kernel_summary()
    top = str(summary["name"].iloc[0])
    instance = min(1, int(summary["instances"].iloc[0]) - 1)
    walls = []
    for set_ in ("roofline", "roofline", "full"):
        t0 = time.perf_counter()
        child = run.profile_kernel(top, instance=instance, set=set_)
        walls.append(time.perf_counter() - t0)
        k = child.kernels()
        assert len(k) == 1 and str(k["name"].iloc[0]) in top
        assert child.meta["mode"] == "warm" and child.parent is run
        assert child.run_dir.parent == run.run_dir / "ncu"
    print(f"\npicked {top[:60]!r}: first {walls[0]:.1f} s (ncu worker start), then "
          f"{walls[1]:.1f} s (roofline), {walls[2]:.1f} s (full)")  # fmt: skip
    assert walls[1] < walls[0]
    meta = runs.read_json(run.run_dir / "meta.json")
    assert [c["mode"] for c in meta["children"]] == ["warm", "warm", "warm"]
    # the cold re-run of the saved script still works
    cold = run.profile_kernel(top, instance=instance, fresh=True)
    assert cold.meta["mode"] == "fresh" and len(cold.kernels()) == 1


def test_ncu_cells_and_nvtx_ranges_in_any_domain(ip) -> None:  # type: ignore[no-untyped-def]
    whole = magic(ip, "ncu", "--set basic --name whole", LLM)
    assert not isinstance(whole, Exception), whole
    assert len(whole.kernels()) >= 4 and whole.meta["mode"] == "warm"
    only = magic(ip, "ncu", "--set basic --nvtx LLM:LLM@prefill", LLM)
    assert not isinstance(only, Exception), only
    names = list(only.kernels()["demangled"])
    print(f"\n--nvtx LLM:LLM@prefill -> {only.meta['options']['nvtx_include']}: {names}")
    assert len(names) == 1 and "sin" in names[0].lower()
    # a range that does not exist: the message lists the ranges the cell has
    err = magic(ip, "ncu", "--set basic --nvtx nope", LLM)
    assert isinstance(err, NothingCapturedError), err
    assert "LLM:LLM@prefill" in str(err) and "LLM:generate (StartEnd)" in str(err)


def test_profile_range_from_an_nsys_run(ip) -> None:  # type: ignore[no-untyped-def]
    run = magic(ip, "nsys", "--name ranges", LLM)
    assert not isinstance(run, Exception), run
    child = run.profile_range("LLM", "LLM@prefill", "PushPop", set="basic")
    assert [n for n in child.kernels()["demangled"] if "sin" in n.lower()]
    start_end = run.profile_range("LLM", "generate", "StartEnd", set="basic")
    print(f"\nStartEnd 'generate': {list(start_end.kernels()['demangled'])}")
    assert len(start_end.kernels()) == 2  # sin and exp ran inside it
    statuses = {s.tool for s in MANAGER.status()}
    assert statuses == {"nsys", "ncu"}


FIRST = (
    "# %%ncu --nvtx as the first profiled cell\n"
    "import torch, nvtx\n"
    "x = torch.randn(1 << 20, device='cuda')\n"
    "y = torch.cos(x)\n"
    "gen = nvtx.start_range('generate', domain='LLM')\n"
    "with nvtx.annotate('LLM@prefill', domain='LLM'):\n    z = torch.sin(x)\n"
    "with nvtx.annotate('decode', domain='LLM'):\n    w = torch.exp(x)\n"
    "nvtx.end_range(gen)\n"
    "with nvtx.annotate('sample'):\n    v = torch.tanh(x)\n"
    "torch.cuda.synchronize()\n"
)


def _kernels(run) -> list[str]:  # type: ignore[no-untyped-def]
    assert not isinstance(run, Exception), run
    return sorted(str(n).lower() for n in run.kernels()["demangled"])


def test_nvtx_every_spelling_as_the_first_profiled_cell(ip) -> None:  # type: ignore[no-untyped-def]
    """The seeds' pattern (issue 21): no %%nsys run of the cell before, so the script itself
    finds the range's domain and marks it for ncu. Warm (a new ncu worker) and --fresh."""
    first = magic(ip, "ncu", "--set basic --launch-count 3 --nvtx LLM@prefill", FIRST)
    names = _kernels(first)
    target = first.meta["cell_status"]["target"]
    print(f"\nfirst cell, warm, --nvtx LLM@prefill: {names}; the script marked {target}")
    assert first.meta["mode"] == "warm" and len(names) == 1 and "sin" in names[0]
    fresh = magic(ip, "ncu", "--fresh --set basic --launch-count 3 --nvtx LLM@prefill", FIRST)
    assert fresh.meta["mode"] == "fresh" and _kernels(fresh) == names
    for spec, want in (("LLM:LLM@prefill", ["sin"]), ("'LLM:LLM@prefill (PushPop)'", ["sin"]),
                       (":sample", ["tanh"]), ("sample", ["tanh"]),
                       ("LLM:generate", ["exp", "sin"])):  # fmt: skip
        got = _kernels(magic(ip, "ncu", f"--set basic --nvtx {spec}", FIRST))
        print(f"--nvtx {spec}: {got}")
        assert len(got) == len(want) and all(any(w in g for g in got) for w in want)
    err = magic(ip, "ncu", "--set basic --nvtx :LLM@prefill", FIRST)
    assert isinstance(err, NothingCapturedError), err
    assert "Use --nvtx 'LLM:LLM@prefill'" in str(err), str(err)
