#!/usr/bin/env bash
# One sitting of the device benchmarks on a single accelerator (no fake devices):
# bench_update, bench_group and bench_anakin (the peer comparison and the run to 475), the
# A/B of GAE's unrolled backward scan (anakin_ab.py), then where Anakin's GPU time goes:
# hlo_kernels (launches per loop body) and trace_anakin (a kernel-level profile of Anakin and
# the fused reference, one process each), packed in kernels.tgz.
# Each benchmark has its own time limit so a slow one cannot starve the others.
#
# Run from the repository root: OUT=/some/dir bash benchmarks/gpu_sitting.sh
# Writes sitting.log (everything printed) and each benchmark's JSON into $OUT.
set -u
OUT=${OUT:-benchmarks/results/gpu_sitting}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
log=$OUT/sitting.log

step() {  # step SECONDS NAME COMMAND...
    local limit=$1 name=$2
    shift 2
    echo "=== $name ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$log"
    timeout "$limit" "$@" 2>&1 | tee -a "$log"
    echo "=== $name exit ${PIPESTATUS[0]}" | tee -a "$log"
}

step 60 environment python3 -c "import jax, jaxlib, flax, optax, jaxlearner; \
print(jax.__version__, jaxlib.__version__, flax.__version__, optax.__version__); \
print(jax.devices())"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$log"

step 75 bench_update python3 benchmarks/bench_update.py --repeats 7
cp benchmarks/results/bench_update.json "$OUT/" 2>/dev/null
step 75 bench_group python3 benchmarks/bench_group.py --fake-cpu-devices 0 --repeats 5
cp benchmarks/results/bench_group.json "$OUT/" 2>/dev/null
step 170 bench_anakin_peer python3 benchmarks/bench_anakin.py --peer --peer-seeds 8 64 --repeats 1
cp benchmarks/results/bench_anakin_peer.json "$OUT/" 2>/dev/null
# GAE's backward scan, one step per iteration (before) against 16 (after), beside the reference.
step 150 anakin_ab python3 benchmarks/anakin_ab.py --change backward-unroll --seeds 64 --repeats 5
kernels=$(mktemp -d)
step 120 hlo_kernels python3 benchmarks/hlo_kernels.py --what update anakin --dump "$kernels/hlo"
for variant in anakin reference; do
    step 90 "trace_$variant" python3 benchmarks/trace_anakin.py --seeds 64 --updates 5 \
        --variant "$variant" --out "$kernels/trace"
done
tar czf "$OUT/kernels.tgz" -C "$kernels" .
step 120 bench_anakin python3 benchmarks/bench_anakin.py --seeds 1 32
cp benchmarks/results/bench_anakin.json "$OUT/" 2>/dev/null
exit 0
