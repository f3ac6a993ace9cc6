"""Step 16 of the acceptance (issue 41 items 5 and 8): a training notebook whose state fills
>= 40% of an 80 GB H100, in a Run All, each first profiled cell timed against the step's own
time in the notebook.

The state: a transformers Llama with random weights (3072 wide, 36 layers, bf16: 4.27 B
parameters), an EMA copy, fused AdamW with its state (exp_avg, exp_avg_sq and a step tensor per
parameter): 34.2 GB in 1,635 tensors. A GPU step counter that each training step increments
and integer checksums of a weight, its EMA copy and its AdamW moment prove that each profiled
training cell steps the notebook's model exactly once and that a drill-down, a warm-up and a
whole-state save leave every byte as it was. NVTX phases ``step``/``fwd``/``bwd``/``opt`` in the
default domain (``torch.cuda.nvtx.range``), the step a notebook function reading ``_``-names.

Each first cell is timed in the notebook (``last_wall``) with its worker's receive and prepare
(``run.meta["timings"]``); the targets (issue 41 item 5) are asserted in the "checked" cells:
each first cell <= body + 6 s, a whole-state save and restore <= body + 4 s over the run's own
capture, the receive of the state by a new worker <= 2 s.
"""

from __future__ import annotations

Step = tuple[str, str, str | None]

SETUP = r"""
import copy
from transformers import LlamaConfig, LlamaForCausalLM
cfg = LlamaConfig(hidden_size=3072, intermediate_size=8192, num_hidden_layers=36,
                  num_attention_heads=24, num_key_value_heads=24, vocab_size=32000,
                  max_position_embeddings=2048)
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg)
torch.set_default_dtype(torch.float32)
ema = copy.deepcopy(model).requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
batch = torch.randint(0, 32000, (1, 1024), device="cuda")
counter = torch.zeros((), dtype=torch.int64, device="cuda")
_mp, _ep = list(model.parameters()), list(ema.parameters())
def train_step():
    with torch.cuda.nvtx.range("step"):
        with torch.cuda.nvtx.range("fwd"):
            loss = model(batch, labels=batch).loss
        with torch.cuda.nvtx.range("bwd"):
            loss.backward()
        with torch.cuda.nvtx.range("opt"):
            opt.step()
            opt.zero_grad()
            with torch.no_grad():
                torch._foreach_lerp_(_ep, _mp, 0.01)
            counter.add_(1)
    return loss.detach()
def _sum(t):
    return int(t.view(torch.int16).sum(dtype=torch.int64))
def checksums():
    torch.cuda.synchronize()
    w = _mp[5]
    return (int(counter), _sum(w), _sum(_ep[5]), _sum(opt.state[w]["exp_avg"]), _sum(_mp[-1]))
train_step()  # mid-training: AdamW's state exists
state = [*_mp, *_ep, *(t for s in opt.state.values() for t in s.values() if torch.is_tensor(t))]
FIG["scale_tensors"] = len(state)
FIG["scale_state_gb"] = sum(t.numel() * t.element_size() for t in state) / 1e9
FIG["scale_gpu"] = torch.cuda.get_device_name()
FIG["scale_gpu_total_gb"] = torch.cuda.mem_get_info()[1] / 1e9
FIG["scale_state_of_80gb_pct"] = 100 * FIG["scale_state_gb"] / 80
for _ in range(2):
    train_step()
torch.cuda.synchronize()
t0 = time.perf_counter()
train_step()
torch.cuda.synchronize()
SBODY = FIG["scale_body_s"] = time.perf_counter() - t0
SEEN = [checksums()]
FIG["scale"] = {}
def took(tag, run=None, stepped=True):
    # the cell's wall time and where it went; the counter rose by one exactly when stepped
    now = checksums()
    row = {"wall_s": round(last_wall(), 3), "counter": now[0]}
    if run is not None:
        t = run.meta.get("timings") or {}
        row.update({k: round(v, 3) for k, v in t.items() if isinstance(v, (int, float))})
        row["kept"] = (run.meta.get("cell_status") or {}).get("kept")
        row["imported"] = (run.meta.get("shared_vars") or {}).get("imported")
    FIG["scale"][tag] = row
    print(tag, row)
    json.dump(FIG, open(os.environ["ACCEPT_FIG"], "w"), default=str, indent=1)  # kept if cut
    before = SEEN[-1]
    SEEN.append(now)
    if stepped:
        assert now[0] == before[0] + 1, (tag, before, now)
        assert now[1:] != before[1:], (tag, "the step changed no weight", now)
    else:
        assert now == before, (tag, "changed the notebook's state", before, now)
    return row
assert FIG["scale_tensors"] >= 1500 and FIG["scale_state_gb"] >= 32, FIG
print(FIG["scale_tensors"], "tensors,", round(FIG["scale_state_gb"], 1), "GB; body", SBODY)
"""


def _checked(tag: str, run: str, bound: str) -> str:
    return f'row = took("{tag}", {run})\nassert row["wall_s"] <= {bound}, row\n'


STEPS: list[Step] = [
    ("16 setup: a Llama of 34 GB, EMA, fused AdamW, mid-training", SETUP, None),
    ("16 first %%nsys", "%%nsys -o s1\nloss = train_step()\n", None),
    (
        "16 first %%nsys checked: <= body + 6 s, the receive <= 2 s",
        _checked("nsys", "s1", "SBODY + 6") + 'assert row.get("receive_s", 0) <= 2, row\n',
        None,
    ),
    ("16 first %%nsys --memory", "%%nsys --memory -o s2\nloss = train_step()\n", None),
    (
        "16 first --memory checked: <= body + 6 s, mapped memory not the worker's",
        _checked("memory", "s2", "SBODY + 6")
        + 'assert row.get("receive_s", 0) <= 2, row\n'
        + "m = s2.gpu_memory_summary()\nprint(m)\n"
        + 'FIG["scale"]["memory"]["mapped_gb"] = float(m["mapped_bytes"].max()) / 1e9\n'
        + 'assert FIG["scale"]["memory"]["mapped_gb"] >= 30, FIG["scale"]["memory"]\n',
        None,
    ),
    (
        "16 first drill-down of a backward kernel: <= body + 6 s, nothing changed",
        r"""
k, v = s1.report.kernels(), s1.nvtx()
main_tid = int(v[(v["domain"] == "nsight_magic") & (v["range"] == "cell")]["tid"].iloc[0])
tids = k.groupby("name")["tid"].agg(lambda t: set(t.astype(int)))
ranked = s1.kernel_summary()["name"]
backward = [n for n in ranked if main_tid not in tids[n]]
t0 = time.perf_counter()
d1 = s1.profile_kernel(backward[0])
FIG["scale"]["drill_kernel"] = backward[0][:80]
wall = time.perf_counter() - t0
row = took("drill", d1, stepped=False)
row["wall_s"] = round(wall, 3)
assert len(d1.kernels()) >= 1
assert wall <= SBODY + 6, row
""",
        None,
    ),
    ("16 first %%nsys --host", "%%nsys --host -o s3\nloss = train_step()\n", None),
    (
        "16 first --host checked: <= body + 6 s",
        _checked("host", "s3", "SBODY + 6") + 'assert row.get("receive_s", 0) <= 2, row\n',
        None,
    ),
    ("16 first %%ncu", "%%ncu --launch-count 1 -o s4\nloss = train_step()\n", None),
    ("16 first %%ncu checked: <= body + 6 s", _checked("ncu", "s4", "SBODY + 6"), None),
    (
        "16 a warm-up that saves and restores the whole state (exec hides what it changes)",
        '%%nsys --warmup 1 -o s5\nexec("loss = train_step()")\n',
        None,
    ),
    (
        "16 whole-state warm-up checked: the save and restore <= body + 4 s",
        r"""
row = took("whole_state_warmup", s5)
# the prepare step is the warm-up: the body once, with the state saved before it and
# written back after it
assert row["vars_s"] <= SBODY + 4, row
""",
        None,
    ),
    (
        "16 a drill-down that saves and restores the whole state",
        r"""
from nsight_magic.session.manager import MANAGER
FIG["scale"]["workers_before_whole_state_drill"] = [
    (s.tool, s.gpu_memory_mib, round(s.mapped_bytes / 1e9, 1),
     {d: round(m["reserved_bytes"] / 2**20) for d, m in s.cuda_memory.items()})
    for s in MANAGER.status()]
t0 = time.perf_counter()
# bounded: twice on the H100 it sat over 4 min in "starting" until the device call ended
# (acceptance_scale_memory.jsonl has the host's memory meanwhile)
said = []
def say(p):  # each new phase once, with the time
    if not said or said[-1] != (p.phase, p.detail):
        said.append((p.phase, p.detail))
        print(time.strftime("%H:%M:%S"), p.describe())
d5 = s5.profile_kernel(s5.kernel_summary()["name"].iloc[0], timeout=150, progress=say)
wall = time.perf_counter() - t0
row = took("whole_state_drill", d5, stepped=False)
row["wall_s"] = round(wall, 3)
""",
        None,
    ),
    (
        "16 workers: own memory and what each maps",
        r"""
from nsight_magic.session.manager import MANAGER
# item 6: what each worker's own GPU memory is, by nvidia-smi and by torch's allocator (the
# ncu worker held 13,156 MiB by nvidia-smi after the whole-state drill-down at 06:17 and 06:49:
# torch's blocks, or ncu's own replay buffers?); again 5 s later (the idle release)
def own():
    return [(s.tool, s.gpu_memory_mib, round(s.mapped_bytes / 1e9, 1),
             {d: (round(m["reserved_bytes"] / 2**20), round(m["allocated_bytes"] / 2**20))
              for d, m in s.cuda_memory.items()}) for s in MANAGER.status()]
FIG["scale"]["workers"] = own()
time.sleep(5)
FIG["scale"]["workers_5s_later"] = own()
print(FIG["scale"]["workers"], FIG["scale"]["workers_5s_later"])
""",
        None,
    ),
]
