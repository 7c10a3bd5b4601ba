#!/usr/bin/env bash
# The README's 5-minute tour, run end to end in a scratch folder: the figures the README quotes.
#
#     bash benchmarks/tour.sh [SCRATCH]        # default: a new temporary folder
#
# Prints each step's command, its output and its wall time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ap="$root/.venv/bin/autoplace"
work=${1:-$(mktemp -d)}
mkdir -p "$work" && cd "$work"
export RAY_AUTH_MODE=disabled

step() {
  echo; echo "\$ $*"
  local t0=$SECONDS
  "$@"
  echo "[$((SECONDS - t0)) s]"
}

step "$ap" compare inception-v3 --cluster k80x4 --methods single-gpu,expert,metis,m-sct,auto
step "$ap" capture "$root/examples/tiny_lm.py:make_step" -o tiny_lm.json.gz
step "$ap" compare tiny_lm.json.gz -c p100x2 --methods single-gpu,expert,metis,m-sct,dp-split,auto --budget 10 \
    --plot compare.png
step "$ap" place tiny_lm.json.gz -c p100x2 -o auto.json
step "$ap" report tiny_lm.json.gz -c p100x2 -p auto.json --compare single-gpu,expert,metis --png tour -o tour.html
step "$ap" place tiny_lm.json.gz -c p100x2 -m rl --samples 2000 --workers 2 --seed 0 --curve rl -o rl.json
step "$ap" simulate tiny_lm.json.gz -c p100x2 -p rl.json
echo; echo "files in $work:"; ls "$work"
