"""``%%nsys --repeat`` on the GPU (issue 59): one notebook run by nbclient in a real ipykernel,
profiled, that captures what the CPU tests read and what the docs quote:

- a Qwen2 prefill once, then ``--repeat 10`` twice (the same cell twice must compare ``same``;
  its RSD over the repeats under 5%); the cost of a repeat beside a single capture and the
  body's own time without a profiler;
- naive fp32 attention and fused bf16 SDPA (the bundled example's pair), ``--repeat 10`` each:
  ``compare()`` must say ``faster`` with its interval;
- a small cell of three kernels, ``--repeat 5``, whose report is tests/data's fixture, with a
  counter that must read 1 after it (the notebook sees one run);
- a drill-down of the repeated prefill's top kernel and a sweep with ``repeat=3``.

    source .device/env.sh && python3 tests/gpu/repeats.py --out $OUT

Writes ``repeats.json`` (the figures), the executed notebook and ``runs.tar.gz`` (each run's
folder with its report's sqlite export, pickles left out, for the CPU side); exits 1 when a
cell raised.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

SETUP = r"""
import json, time, torch, torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM
torch.manual_seed(0)
config = Qwen2Config(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                     num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                     attn_implementation="eager")
with torch.device("cuda"):
    model = Qwen2ForCausalLM(config).to(torch.bfloat16).eval()
ids = torch.randint(0, 32000, (4, 512), device="cuda")
q, k, v = (torch.randn(8, 16, 1024, 64, device="cuda") for _ in range(3))
qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
def naive(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1) @ v
a = torch.randn(512, 512, device="cuda"); b = torch.randn(512, 512, device="cuda")
counter = 0
with torch.no_grad():  # the body's own time, warm, no profiler
    for _ in range(3):
        model(ids)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(10):
        model(ids)
    torch.cuda.synchronize(); body_s = (time.perf_counter() - t0) / 10
print(f"prefill body {body_s * 1e3:.2f} ms")
"""

PREFILL = "with torch.no_grad():\n    out = model(ids)\ntorch.cuda.synchronize()"
CELLS = [
    ("setup", SETUP),
    ("single", f"%%nsys --warmup 1 -o single\n{PREFILL}"),
    ("rep10", f"%%nsys --warmup 1 --repeat 10 -o rep10\n{PREFILL}"),
    ("rep10b", f"%%nsys --warmup 1 --repeat 10 -o rep10b\n{PREFILL}"),
    (
        "naive",
        "%%nsys --warmup 1 --repeat 10 -o naive\nfor _ in range(10):\n"
        "    o = naive(q, k, v)\ntorch.cuda.synchronize()",
    ),
    (
        "sdpa",
        "%%nsys --warmup 1 --repeat 10 -o sdpa\nfor _ in range(10):\n"
        "    o = F.scaled_dot_product_attention(qb, kb, vb)\ntorch.cuda.synchronize()",
    ),
    (
        "small",
        "%%nsys --warmup 1 --repeat 5 -o small\ncounter += 1\nc = a @ b\n"
        "d = torch.relu(c) + 1\ns = d.sum()\ntorch.cuda.synchronize()",
    ),
    ("counter", "assert counter == 1, counter\nprint('counter', counter)"),
    (
        "drill",
        "top = rep10.kernel_summary()['name'].iloc[0]\n"
        "drill = rep10.profile_kernel(top, set='none')\nprint(drill)",
    ),
    (
        "sweep",
        "sw = nsight_magic.sweep('c = a[:n] @ b\\ntorch.cuda.synchronize()', "
        "{'n': [256, 512]}, repeat=3, warmup=1)\nprint(sw.table().to_string())",
    ),
]

FIGURES = r"""
from nsight_magic import compare
fig = {"body_s": body_s, "versions": {"torch": torch.__version__}}
def _t(run):
    m = run.meta
    return {"total_s": m.get("timings", {}).get("total_s"),
            "capture_s": m.get("timings", {}).get("capture_s"),
            "cell_s": (m.get("cell_status") or {}).get("cell_s"),
            "repeat_cell_s": (m.get("cell_status") or {}).get("repeat_cell_s"),
            "repeat_gpu": (m.get("cell_status") or {}).get("repeat_gpu"),
            "kernels": int(len(run.kernels()))}
for name in ("single", "rep10", "rep10b", "naive", "sdpa", "small"):
    run = globals()[name]
    fig[name] = _t(run)
    try:
        stats = run.repeat_stats
        fig[name]["repeats"] = stats.line() if stats else None
        fig[name]["warnings"] = run.warnings
        fig[name]["phases"] = run.nvtx_phases().head(3).to_dict("records")
    except Exception as exc:
        fig[name]["error"] = repr(exc)
for a_, b_ in (("rep10", "rep10b"), ("naive", "sdpa"), ("single", "rep10")):
    try:
        c = compare(globals()[a_], globals()[b_])
        fig[f"{a_}_vs_{b_}"] = c.summary()
    except Exception as exc:
        fig[f"{a_}_vs_{b_}"] = repr(exc)
try:
    fig["drill"] = {"status": drill.meta.get("status"), "kernels": int(len(drill.kernels()))}
except Exception as exc:
    fig["drill"] = repr(exc)
print("FIGURES=" + json.dumps(fig, default=str))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    import nbformat
    from nbclient import NotebookClient

    work = Path(tempfile.mkdtemp(prefix="nsight-repeats-"))
    runs = work / "runs"
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(
        f"%load_ext nsight_magic\n%config NsightMagic.runs_dir = {str(runs)!r}\n"
        "import nsight_magic"))  # fmt: skip
    for _, source in CELLS:
        nb.cells.append(nbformat.v4.new_code_cell(source.strip()))
    nb.cells.append(nbformat.v4.new_code_cell(FIGURES.strip()))
    copy = "\n".join([
        "import shutil, os, subprocess, tarfile",
        f"_dest = {str(work / 'keep')!r}",
        "for _n in ('single', 'rep10', 'rep10b', 'naive', 'sdpa', 'small'):",
        "    _src = str(globals()[_n].run_dir)",
        "    shutil.copytree(_src, os.path.join(_dest, _n),",
        "                    ignore=shutil.ignore_patterns('*.pkl', '*.pickle'))",
        "    _rep = os.path.join(_src, 'report.nsys-rep')",
        "    if not os.path.exists(os.path.join(_dest, _n, 'report.sqlite')):",
        "        subprocess.run(['nsys', 'export', '--type', 'sqlite', '-f', 'true', '-o',",
        "                        os.path.join(_dest, _n, 'report.sqlite'), _rep], check=False)",
        f"with tarfile.open({str(out / 'runs.tar.gz')!r}, 'w:gz') as _t:",
        "    _t.add(_dest, arcname='runs')",
    ])  # fmt: skip
    nb.cells.append(nbformat.v4.new_code_cell(copy))
    walls: list[float] = []
    t0 = time.perf_counter()
    last = [t0]

    def executed(cell: object, cell_index: int, execute_reply: object) -> None:
        now = time.perf_counter()
        walls.append(now - last[0])
        last[0] = now
        first = cell.source.splitlines()[0][:70] if cell.source else ""  # type: ignore[attr-defined]
        print(f"[{now - t0:7.1f} s] cell {cell_index} ({walls[-1]:.2f} s): {first}", flush=True)

    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(work)}})  # fmt: skip
    client.on_cell_executed = executed
    try:
        client.execute()
    finally:
        nbformat.write(nb, out / "repeats.ipynb")
    errors = [
        f"cell {i}: {o.get('ename')}: {o.get('evalue')}"
        for i, cell in enumerate(nb.cells)
        for o in cell.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    text = "".join(o.get("text", "") for o in nb.cells[-2].get("outputs", []))
    line = next((x for x in text.splitlines() if x.startswith("FIGURES=")), "FIGURES={}")
    figures = json.loads(line[len("FIGURES=") :])
    figures["cell_walls_s"] = dict(zip(["ext"] + [n for n, _ in CELLS], walls, strict=False))
    figures["errors"] = errors
    (out / "repeats.json").write_text(json.dumps(figures, indent=1, default=str))
    print(json.dumps(figures, indent=1, default=str)[:6000])
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
