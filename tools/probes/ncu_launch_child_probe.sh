#!/usr/bin/env bash
# Probe (2026-11-23, lent H100, Nsight Compute 2025.3.1): does a shell child (nvidia-smi) of a
# process started by `ncu --mode launch --nvtx` crash, and does it take the process with it?
# (The warm ncu worker died by SIGSEGV right after replaying a `!nvidia-smi -L` cell when it was
# launched with --nvtx; without --nvtx the same replay was fine.)
set -u
out="${OUT:-/tmp}/launch_child_probe.txt"; : > "$out"
w=$(mktemp -d)
cat > "$w/l.py" <<'PY'
import subprocess, sys, time, torch, nvtx
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
how = sys.argv[1]
if how == "shell":
    r = subprocess.run("nvidia-smi -L", shell=True)
elif how == "argv":
    r = subprocess.run(["nvidia-smi", "-L"])
else:
    r = subprocess.run(["/bin/true"])
print("child rc", r.returncode, flush=True)
time.sleep(15)
x = torch.randn(1 << 16, device="cuda")
with nvtx.annotate("LLM@prefill", domain="LLM"):
    y = torch.sin(x)
torch.cuda.synchronize(); print("python alive", flush=True)
PY
for combo in "--nvtx shell" "--nvtx argv" "- shell"; do
  read -r nv how <<< "$combo"; [ "$nv" = - ] && nv=""
  {
    echo "=== launch $nv child=$how" | tee -a "$out"
    ncu --mode launch --target-processes all $nv python3 "$w/l.py" "$how" >> "$out" 2>&1 &
    pid=$!
    sleep 12
    timeout 60 ncu --mode attach --hostname 127.0.0.1 ${nv:+--nvtx --nvtx-include 'LLM@LLM\@prefill/'} \
      --metrics gpu__time_duration.sum -o "$w/att_${how}${nv}" >> "$out" 2>&1
    echo "attach rc=$?" >> "$out"
    wait $pid; echo "launch rc=$?" | tee -a "$out"
  }
done
cat "$out"
