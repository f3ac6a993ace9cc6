"""P16 a sweep and top-N (issue 44), on a machine with a GPU, nsys, ncu and transformers. One
process plays the notebook: a real IPython shell with the extension loaded, as the magics run in
a notebook (``benchmarks.one_copy``'s way), the workload a 4-layer transformers Llama (random
weights, bf16, 1024 wide) built by a ``%%nsight_setup`` cell and a prefill cell of ``bs`` prompts
of ``seq`` tokens. Side by side, in this order:

1. the body of each of the 9 configurations (bs 1, 4, 16 x seq 128, 512, 2048) in the notebook,
   no profiler: its first run (cold: cuBLAS picks kernels for the shape) and its best of 3;
2. a first ``%%nsys`` cell (the nsys worker up and warm, as after any earlier cell), then
   ``%%nsys --sweep bs=1,4,16 --sweep seq=128,512,2048 --warmup 1``: the whole cell's wall time
   and each configuration's (``sweep.json``'s ``wall_s``, its run's own timings). Target: sweep
   wall <= sum over the configurations of (body + 3.5 s);
3. on the largest configuration's run: a first drill-down (it starts the ncu worker; not
   compared), then ``profile_top(10)`` (ONE ncu re-run of the cell) against 10 single
   ``profile_kernel`` drill-downs of the same 10 kernels (10 re-runs), roofline set each.
   Target: profile_top <= body + 15 s.

    python -m benchmarks sweep --json OUT.json [--runs DIR] [--singles N]

Prints one line per target; the JSON (rewritten after each step, so a stopped run keeps what it
measured) has every figure, each configuration's and each drill-down's pipeline timings, and the
error that stopped a step.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

SETUP = """\
import torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                  num_key_value_heads=16, num_hidden_layers=4, vocab_size=32000,
                  max_position_embeddings=4096)
model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
ids = torch.randint(0, 32000, (16, 2048), device="cuda")
"""
BODY = """\
with torch.no_grad():
    logits = model(ids[:bs, :seq], use_cache=False).logits
torch.cuda.synchronize()
"""
BS = (1, 4, 16)
SEQ = (128, 512, 2048)
PER_CONFIG_S = 3.5  # the sweep's target: each configuration <= its body + this
TOP_S = 15.0  # profile_top's target: <= the body + this
TOP_N = 10


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def session(runs: Path, out: dict[str, Any], save: Any, singles: int = TOP_N) -> None:
    """The steps above in this process, figures in seconds into ``out`` (``save()`` after
    each step)."""
    from IPython.core.interactiveshell import InteractiveShell

    from nsight_magic.analysis.top_kernels import top_kernel_names
    from nsight_magic.session.manager import MANAGER

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "nsight_magic")
    ip.run_line_magic("config", f'NsightMagic.runs_dir = "{runs}"')

    def cell(text: str) -> Any:
        result = ip.run_cell(text)
        if not result.success:
            raise RuntimeError(_first_line(result.error_in_exec or result.error_before_exec))
        return result.result

    try:
        t0 = time.perf_counter()
        ip.run_cell_magic("nsight_setup", "--name model", SETUP)
        out["setup_s"] = time.perf_counter() - t0
        out["versions"] = ip.ev(
            "{'torch': torch.__version__, 'gpu': torch.cuda.get_device_name(),"
            " 'transformers': __import__('transformers').__version__}"
        )
        # 1. each configuration's body in the notebook, no profiler
        bodies: dict[str, dict[str, float]] = {}
        for bs in BS:
            for seq in SEQ:
                ip.user_ns.update(bs=bs, seq=seq)
                times = []
                for _ in range(4):
                    t0 = time.perf_counter()
                    cell(BODY)
                    times.append(time.perf_counter() - t0)
                bodies[f"bs={bs} seq={seq}"] = {"cold_s": times[0], "body_s": min(times[1:])}
        out["bodies"] = bodies
        save()
        # 2. a first cell (the worker up), then the sweep
        ip.user_ns.update(bs=BS[0], seq=SEQ[0])
        t0 = time.perf_counter()
        first = cell(f"%%nsys --name first -o first\n{BODY}")
        out["first_cell_s"] = time.perf_counter() - t0
        out["first_cell_timings"] = first.meta.get("timings")
        line = " ".join(f"--sweep {name}={','.join(map(str, values))}"
                        for name, values in (("bs", BS), ("seq", SEQ)))  # fmt: skip
        t0 = time.perf_counter()
        sw = cell(f"%%nsys {line} --warmup 1 --name sweep9 -o sw\n{BODY}")
        out["sweep_s"] = time.perf_counter() - t0
        configs = []
        for key, entry in zip(sw.configs, sw.record.configs, strict=True):
            run = sw.runs.get(key)
            row = {"config": entry.label, "status": entry.status, "error": entry.error,
                   "run_wall_s": entry.wall_s, **bodies.get(entry.label, {})}  # fmt: skip
            if run is not None:
                row["timings"] = run.meta.get("timings")
                row["cell_s"] = (run.meta.get("cell_status") or {}).get("cell_s")
                row["kernels"] = len(run.kernels())
            configs.append(row)
        out["configs"] = configs
        out["sweep_target_s"] = sum(bodies[c]["body_s"] + PER_CONFIG_S for c in bodies)
        out["sweep_met"] = out["sweep_s"] <= out["sweep_target_s"]
        # --warmup 1 runs each configuration's body once more, at a shape new to the worker:
        # its cold time (the notebook's first run at that shape) is the cell's own work too
        out["sweep_target_with_warmup_s"] = sum(bodies[c]["cold_s"] + bodies[c]["body_s"]
                                                + PER_CONFIG_S for c in bodies)  # fmt: skip
        save()
        # 3. profile_top(10) against 10 single drill-downs, on the largest configuration
        key = (BS[-1], SEQ[-1])
        big = sw.run(key)
        label = f"bs={key[0]} seq={key[1]}"
        names = top_kernel_names(big.kernel_summary(), TOP_N)
        top: dict[str, Any] = {"config": label, "body_s": bodies[label]["body_s"],
                               "names": names}  # fmt: skip
        out["top"] = top
        t0 = time.perf_counter()
        warm_up = big.profile_kernel(names[0], set="roofline")
        top["first_drill_s"] = time.perf_counter() - t0
        top["first_drill_timings"] = warm_up.meta.get("timings")
        save()
        t0 = time.perf_counter()
        child = big.profile_top(TOP_N, set="roofline")
        top["profile_top_s"] = time.perf_counter() - t0
        top["profile_top_timings"] = child.meta.get("timings")
        launches = child.kernels()
        top["launches"] = len(launches)
        profiled = set(launches["demangled"])
        top["names_profiled"] = int(sum(n in profiled for n in names))
        # which: the launches' names in order, and the names asked for that ncu did not profile
        top["launch_names"] = [str(n) for n in launches["demangled"]]
        top["names_missing"] = [n for n in names if n not in profiled]
        top["target_s"] = top["body_s"] + TOP_S
        top["met"] = top["profile_top_s"] <= top["target_s"]
        save()
        top["singles"] = []
        for name in names[:singles]:
            t0 = time.perf_counter()
            one = big.profile_kernel(name, set="roofline")
            top["singles"].append({"name": name, "wall_s": time.perf_counter() - t0,
                                   "timings": one.meta.get("timings")})  # fmt: skip
            save()
        top["singles_total_s"] = sum(s["wall_s"] for s in top["singles"])
    except Exception as exc:  # keep what was measured; the JSON says where it stopped
        out["error"] = _first_line(exc)
    finally:
        MANAGER.stop()
        save()


def report(out: dict[str, Any]) -> None:
    """The benchmark's lines, from what ``session`` measured (whatever it got to)."""
    configs = out.get("configs") or []
    if "sweep_s" in out:
        each = "; ".join(
            f"{c['config']} {c.get('run_wall_s') or float('nan'):.2f} s"
            f" (body {c.get('body_s', float('nan')):.3f} s)"
            + ("" if c["status"] == "ok" else f" {c['status'].upper()}: {c.get('error')}")
            for c in configs
        )  # fmt: skip
        verdict = "met" if out["sweep_met"] else "MISSED"
        print(
            f"P16 sweep: {len(configs)} configurations in {out['sweep_s']:.1f} s (first %%nsys "
            f"cell before it {out.get('first_cell_s', float('nan')):.1f} s); target <= sum of "
            f"(body + {PER_CONFIG_S} s) = {out['sweep_target_s']:.1f} s: {verdict} (with "
            f"each --warmup run's cold body: "
            f"{out.get('sweep_target_with_warmup_s', float('nan')):.1f} s). Per "
            f"configuration: {each}",
            flush=True,
        )
    top = out.get("top") or {}
    if "profile_top_s" in top:
        singles = top.get("singles") or []
        walls = ", ".join(f"{s['wall_s']:.1f}" for s in singles)
        total = sum(s["wall_s"] for s in singles)
        print(
            f"P16 top-N on {top['config']} (body {top['body_s']:.3f} s): profile_top({TOP_N}) "
            f"{top['profile_top_s']:.1f} s, {top['launches']} launches, "
            f"{top['names_profiled']} of {len(top['names'])} kernels profiled; target <= body + "
            f"{TOP_S:.0f} s = {top['target_s']:.1f} s: {'met' if top['met'] else 'MISSED'}. "
            f"{len(singles)} single drill-downs: {total:.1f} s ({walls})"
            + (f", {total / top['profile_top_s']:.1f}x profile_top" if singles else "")
            + f"; the first drill-down (ncu worker start) {top['first_drill_s']:.1f} s",
            flush=True,
        )
        if top.get("names_missing"):
            print(f"P16 top-N: not profiled: {'; '.join(top['names_missing'])}", flush=True)
    if out.get("error"):
        print(f"P16 stopped: {out['error']}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks sweep", description=__doc__)
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--runs", type=Path, default=None, help="run folders go here")
    parser.add_argument("--singles", type=int, default=TOP_N,
                        help="single drill-downs beside profile_top (default 10)")  # fmt: skip
    args = parser.parse_args(argv)
    runs = args.runs or Path(tempfile.mkdtemp(prefix="nsight-sweep-bench-"))
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    out: dict[str, Any] = {"benchmark": "P16 sweep and top-N", "host": platform.node(),
                           "started": started}  # fmt: skip

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(out, indent=1, default=str))

    session(runs, out, save, singles=args.singles)
    report(out)


if __name__ == "__main__":
    main()
