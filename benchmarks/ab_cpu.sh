#!/bin/sh
# The A/B runs committed under reports/ (docs/ab.md): suites/quick.yaml measured by `attnbench ab`
#   ab-quick-A-vs-A      the same environment on both sides: must be quiet (exit 0)
#   ab-quick-torch       environment A against environment B (two torch versions): whatever it finds
#   ab-quick-planted     A against A with the `planted` backend (benchmarks/verdict_batch.py) 15% slower in B
#                        only (PLANTED_SLOWDOWN, read in B's worker): must name `planted` (exit 1)
#   ab-quick-planted-wrapper  the same with a share of 1e-9: B's planted backend wrapped but not spinning, so
#                        what the wrapper alone costs (added after the three above, run alone from the same tree)
# usage, from the repository root: benchmarks/ab_cpu.sh PYTHON_A PYTHON_B [OUT]
# Each environment needs torch and this attnbench (pip install -e .); PYTHON runs the parent (default .venv/bin/python).
set -u
A=$1
B=$2
OUT=${3:-reports}
PY=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=1  # one thread per side: the machine is shared, and both sides get the same
$PY -m attnbench ab suites/quick.yaml --a "$A" --b "$A" --out "$OUT/ab-quick-A-vs-A"
echo "A vs A: exit $?"
$PY -m attnbench ab suites/quick.yaml --a "$A" --b "$B" --out "$OUT/ab-quick-torch"
echo "A vs B: exit $?"
# Both workers load the planted plugin from this checkout; only B's spins.
PYTHONPATH=$(pwd) $PY -m attnbench ab suites/quick.yaml --a "$A" --b "$A" --b-env PLANTED_SLOWDOWN=0.15 \
  --plugin benchmarks.verdict_batch:Planted \
  --backend naive --backend sdpa --backend sdpa-math --backend sdpa-flash --backend sdpa-efficient \
  --backend sdpa-cudnn --backend planted --out "$OUT/ab-quick-planted"
echo "planted: exit $?"
PYTHONPATH=$(pwd) $PY -m attnbench ab suites/quick.yaml --a "$A" --b "$A" --b-env PLANTED_SLOWDOWN=1e-9 \
  --plugin benchmarks.verdict_batch:Planted --backend sdpa-flash --backend planted \
  --out "$OUT/ab-quick-planted-wrapper"
echo "wrapper only: exit $?"
