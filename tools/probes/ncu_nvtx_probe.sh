#!/usr/bin/env bash
# Probe (2026-11-23, lent H100, Nsight Compute 2025.3.1): which --nvtx-include spellings match a
# push/pop range "LLM@prefill" in domain "LLM" and "pick" in the default domain, and whether a
# shell child (nvidia-smi) run from a process under `ncu --nvtx` crashes (the SIGSEGV that killed
# the warm ncu worker right after replaying a `!nvidia-smi -L` cell).
set -u
out="${OUT:-/tmp}/nvtx_probe.txt"; : > "$out"
w=$(mktemp -d)
cat > "$w/s.py" <<'PY'
import torch, nvtx
x = torch.randn(1 << 16, device="cuda")
torch.cuda.synchronize()
with nvtx.annotate("LLM@prefill", domain="LLM"):
    y = torch.sin(x)
with nvtx.annotate("pick"):
    z = torch.cos(x)
torch.cuda.synchronize()
PY
probe() {  # $1 = the --nvtx-include value
  n=$(ncu --target-processes all --nvtx --nvtx-include "$1" --metrics gpu__time_duration.sum \
        python3 "$w/s.py" 2>&1 | grep -c '==PROF== Profiling')
  echo "include=$1 -> profiled_kernels=$n" | tee -a "$out"
}
for spec in 'LLM@LLM\@prefill/' 'LLM@LLM@prefill/' 'LLM\@prefill/' 'regex:LLM@.*prefill/' \
            'regex:.*@LLM\\@prefill/' 'regex:^([^@]*@)?LLM\\@prefill/' 'regex:[^@]*@LLM.prefill/' \
            'pick/' 'regex:pick/' 'regex:([^@]*@)?pick/'; do
  probe "$spec"
done
echo "--- nvidia-smi under ncu --nvtx" | tee -a "$out"
ncu --target-processes all --nvtx --nvtx-include 'LLM@LLM\@prefill/' nvidia-smi -L >> "$out" 2>&1; echo "rc=$?" | tee -a "$out"
echo "--- nvidia-smi under ncu (no --nvtx)" | tee -a "$out"
ncu --target-processes all nvidia-smi -L >> "$out" 2>&1; echo "rc=$?" | tee -a "$out"
echo "--- python + shell child under ncu --nvtx" | tee -a "$out"
ncu --target-processes all --nvtx --nvtx-include 'LLM@LLM\@prefill/' python3 -c \
  "import torch,subprocess;torch.zeros(1,device='cuda');r=subprocess.run('nvidia-smi -L',shell=True);print('child rc',r.returncode);print('python alive')" >> "$out" 2>&1
echo "rc=$?" | tee -a "$out"
echo "--- python + shell child under ncu --mode launch --nvtx, one attach" | tee -a "$out"
cat > "$w/l.py" <<'PY'
import subprocess, time, torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
r = subprocess.run("nvidia-smi -L", shell=True); print("child rc", r.returncode, flush=True)
x = torch.randn(1 << 16, device="cuda")
import nvtx
with nvtx.annotate("LLM@prefill", domain="LLM"):
    y = torch.sin(x)
torch.cuda.synchronize(); print("python alive", flush=True)
PY
ncu --mode launch --target-processes all --nvtx --nvtx-include 'LLM@LLM\@prefill/' python3 "$w/l.py" >> "$out" 2>&1 &
sleep 20
timeout 120 ncu --mode attach --hostname 127.0.0.1 --metrics gpu__time_duration.sum -o "$w/att" >> "$out" 2>&1
wait; echo "rc=$?" | tee -a "$out"
cat "$out"
