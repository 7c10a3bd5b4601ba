#!/usr/bin/env bash
# Repeated measured runs on a CPU + GPU machine: cluster detect, profile, then `compare --env measured`
# GPU_REPEATS times with GPU_STEPS steps each, so that a placement's measured step comes with its spread.
#
#     OUT=docs/results/gpu/repeats bash benchmarks/gpu_repeat.sh          # on the machine with the GPU (~3 minutes)
#     .venv/bin/python benchmarks/gpu_check.py repeats docs/results/gpu/repeats   # the table, from its JSON
#     .venv/bin/python benchmarks/gpu_check.py resimulate docs/results/gpu/repeats  # measured against today's simulator
# The profiled graph (lm.profiled.json.gz) and each method's placement (placements/) stay in OUT with the
# measurements, so that a later simulator can be checked against these runs without a GPU.
#
# Set-up as benchmarks/gpu_check.sh (carried wheels in .whl, the C simulator built in place).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT=${OUT:-/tmp/gpu-repeat-out}
PY=${PYTHON:-python3}
REPEATS=${GPU_REPEATS:-3}
STEPS=${GPU_STEPS:-21}
METHODS=${GPU_METHODS:-single-gpu,metis,auto,m-sct,heft}
W=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
AP=("$PY" -m autoplace.cli)
{
"$PY" benchmarks/gpu_check.py wheels --dir .whl --target /tmp/site
"$PY" setup.py -q build_ext --inplace >/dev/null 2>&1 || echo "no C simulator: numba"
"$PY" benchmarks/gpu_check.py base --cpus 4 -o "$W/base.json"
timeout 150 "${AP[@]}" cluster detect --base "$W/base.json" --repeats 10 -o "$OUT/cluster.json"
timeout 90 "${AP[@]}" zoo export rnnlm-2 -P hidden=512 -P vocab=2000 -P steps=10 -P batch=32 -o "$W/lm.json.gz"
timeout 150 "${AP[@]}" profile "$W/lm.json.gz" -c "$OUT/cluster.json" --rounds 2 -o "$OUT/lm.profiled.json.gz"
timeout 120 "${AP[@]}" compare "$OUT/lm.profiled.json.gz" -c "$OUT/cluster.json" --methods "$METHODS" --budget 5 \
    --json >"$OUT/compare_simulated.json"
# each method's placement (compare places with the same seed and budget), so that a later simulator can
# re-simulate the measured runs: benchmarks/gpu_check.py resimulate OUT
mkdir -p "$OUT/placements"
for m in ${METHODS//,/ }; do
    timeout 120 "${AP[@]}" place "$OUT/lm.profiled.json.gz" -c "$OUT/cluster.json" --method "$m" --seed 0 --budget 5 \
        -o "$OUT/placements/$m.json" >/dev/null
done
for r in $(seq 1 "$REPEATS"); do
    timeout 200 "${AP[@]}" compare "$OUT/lm.profiled.json.gz" -c "$OUT/cluster.json" --methods "$METHODS" \
        --budget 5 --env measured --steps "$STEPS" --timeout 60 --json >"$OUT/compare_measured_$r.json"
done
"$PY" benchmarks/gpu_check.py repeats "$OUT"
"$PY" benchmarks/gpu_check.py resimulate "$OUT"
} 2>&1 | tee "$OUT/log.txt"
rm -rf "$W"
