#!/usr/bin/env bash
# The GPU work of this project, in stages, on the lent GPU machine (device tool, carry .device):
#     source .device/env.sh && bash tools/gpu_session.sh tests notebooks bench-gpu bench-ingest
# Stages: acceptance, acceptance-ranks (2 GPUs), tests, notebooks|nb02|nb03|nb04|nb06, bench-gpu,
# bench-p3-deep, bench-session, bench-warm, bench-first-cell, bench-setup-race (RACE_PACKAGES=
# "--package DIR --package ." for before/after), bench-tracing, bench-two-ranks, bench-ingest,
# bench-sweep, probe-cold-body. (Issue 44's first GPU batch: tools/fixtures/gpu_batch_sweep.sh.)
# Each stage logs to $OUT (what comes back); see tests/gpu, notebooks/, benchmarks/README.md.
set -uo pipefail
# NVLink multicast stays off in every process (the lent 2-GPU machine needs it; harmless on one)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out="${OUT:-/tmp/gpu-out}"; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$out/gpu.txt"
for stage in "$@"; do
  echo "=== $stage $(date -u +%H:%M:%S)"
  case "$stage" in
    acceptance)  # issue 21's user session, one notebook kernel (tests/gpu/README.md), ~5 min
      python3 tests/gpu/acceptance.py --out "$out" 2>&1 | tee "$out/acceptance.log" ;;
    acceptance-ranks)  # its step 11, 2 GPUs (nvidia-h200-x2)
      python3 tests/gpu/acceptance.py --ranks --out "$out" 2>&1 | tee "$out/acceptance_ranks.log" ;;
    tests)  # one GPU: the ranks tests skip; on nvidia-h200-x2 they run too
      python3 -m pytest -q -s -m gpu tests/gpu -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log" ;;
    notebooks|nb02|nb03|nb04|nb06)  # nb04 needs 2 GPUs (nvidia-h200-x2)
      case "$stage" in nb02) nbs=(02_llm_drilldown) ;; nb03) nbs=(03_compare) ;;
                       nb04) nbs=(04_multi_gpu) ;; nb06) nbs=(06_sweep) ;;
                       *) nbs=(02_llm_drilldown 03_compare) ;; esac
      [ "$stage" = nb06 ] && rm -rf notebooks/runs/06_sweep_shared  # its share() copy
      for nb in "${nbs[@]}"; do
        rm -rf "notebooks/runs/$nb"
        (cd notebooks && python3 ../tools/run_notebook.py "$nb.ipynb" --inplace --timeout 900)
      done 2>&1 | tee "$out/notebooks.log"
      tar cJf "$out/$stage.tar.xz" notebooks/*.ipynb notebooks/runs ;;
    bench-gpu)
      python3 -m benchmarks gpu --json "$out/bench_gpu.json" 2>&1 | tee "$out/bench_gpu.log" ;;
    bench-p3-deep)  # the drill-down on a deeper cell (more launches for ncu --set full)
      python3 -m benchmarks gpu --only p3 --layers 8 --json "$out/bench_p3_deep.json" 2>&1 \
        | tee "$out/bench_p3_deep.log" ;;
    bench-session)
      python3 -m benchmarks session --json "$out/bench_session.json" 2>&1 | tee "$out/bench_session.log" ;;
    bench-warm)  # P5/P6 extended: first cell after setup, first drill-down, --pytorch, later cell
      python3 -m benchmarks session --only warm --json "$out/bench_warm.json" 2>&1 \
        | tee "$out/bench_warm.log" ;;
    bench-first-cell)  # P5 first cell: the worker started at the setup cell vs before it
      python3 -m benchmarks.first_cell --json "$out/first_cell.json" 2>&1 \
        | tee "$out/first_cell.log" ;;
    bench-setup-race)  # issue 42: the first cell right after the setup, each worker's steps
      python3 -m benchmarks.setup_race --gpu --rounds 2 ${RACE_PACKAGES:-} \
        --json "$out/setup_race.json" 2>&1 | tee "$out/setup_race.log" ;;
    bench-tracing)
      python3 -m benchmarks tracing --json "$out/tracing.json" 2>&1 | tee "$out/tracing.log" ;;
    bench-sweep)  # P16: a 9-configuration sweep, profile_top(10) against 10 drill-downs
      python3 -m benchmarks sweep --json "$out/bench_sweep.json" 2>&1 | tee "$out/bench_sweep.log" ;;
    bench-two-ranks)  # 2 GPUs
      python3 -m benchmarks two-ranks --json "$out/p8.json" 2>&1 | tee "$out/p8.log" ;;
    bench-ingest)
      python3 -m benchmarks ingest --workdir /tmp/bench --json "$out/bench_ingest.json" 2>&1 \
        | tee "$out/bench_ingest.log" ;;
    probe-cold-body)  # what the first run of a cell costs in a new process (issue 22)
      python3 tools/fixtures/probes/cold_body_probe.py "$out" 2>&1 | tee "$out/cold_body_probe.log" ;;
    *) echo "unknown stage $stage" ;;
  esac
done
