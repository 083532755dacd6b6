#!/usr/bin/env bash
# One sitting of the device benchmarks on a single accelerator (no fake devices), most wanted
# first: bench_anakin's peer comparison (with the returns each program reaches); with
# anakin_ab.py the rollout unroll (rollouts.ROLLOUT_UNROLL) against one step per iteration at 8
# and 1 seeds and the iteration's metrics packed against unpacked; a kernel-level trace of
# Anakin (trace_anakin.py, packed in kernels.tgz); GAE's backward scan unrolled whole against 16
# steps per iteration; anakin_compile.py (first lower + compile, fresh processes, against the
# reference's); then bench_update, bench_group and bench_anakin's run to 475.
# Each benchmark has its own time limit so a slow one cannot starve the others; run under an
# outer limit, what does not fit is cut from the end.
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

step 170 bench_anakin_peer python3 benchmarks/bench_anakin.py --peer --peer-seeds 8 64 --repeats 1
cp benchmarks/results/bench_anakin_peer.json "$OUT/" 2>/dev/null
for seeds in 8 1; do
    step 110 "anakin_ab_$seeds" python3 benchmarks/anakin_ab.py --change rollout-unroll \
        --values 1 4 --seeds "$seeds" --repeats 3
done
# The iteration loop's ~34 metrics stored as 2 arrays (core.packing.packed_scan) against one each.
step 110 iteration_packed python3 benchmarks/anakin_ab.py --change iteration-packed --seeds 64 \
    --repeats 3
kernels=$(mktemp -d)
step 90 trace_anakin python3 benchmarks/trace_anakin.py --seeds 64 --updates 5 \
    --variant anakin --out "$kernels/trace"
tar czf "$OUT/kernels.tgz" -C "$kernels" .
# GAE's 8 loop iterations are launched from the host (4 kernels each, too few for a CUDA graph);
# the whole rollout in one iteration leaves no loop.
step 110 gae_unroll python3 benchmarks/anakin_ab.py --change backward-unroll --values 16 128 \
    --seeds 64 --repeats 3
# Issue 24 item 5 on the GPU: each program's first lower + compile in a fresh process.
step 120 anakin_compile python3 benchmarks/anakin_compile.py --seeds 8 --rounds 2 \
    --out "$OUT/anakin_compile.json"
step 75 bench_update python3 benchmarks/bench_update.py --repeats 7
cp benchmarks/results/bench_update.json "$OUT/" 2>/dev/null
step 75 bench_group python3 benchmarks/bench_group.py --fake-cpu-devices 0 --repeats 5
cp benchmarks/results/bench_group.json "$OUT/" 2>/dev/null
step 120 bench_anakin python3 benchmarks/bench_anakin.py --seeds 1 32
cp benchmarks/results/bench_anakin.json "$OUT/" 2>/dev/null
exit 0
