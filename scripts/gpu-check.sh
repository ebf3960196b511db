#!/usr/bin/env bash
# Run attnbench's CUDA checks on a GPU machine, from the checkout, with nothing installed:
# the gpu-marked tests, then suites/gpu-check.yaml. Writes everything to OUT/<gpu>-<date>/.
#   scripts/gpu-check.sh [OUT]            (OUT defaults to reports/)
# Missing dependencies are installed, without network, into a private folder put on PYTHONPATH
# ($GPU_CHECK_SITE, default /tmp/attnbench-site): by scripts/gpu-carry.sh, batch by batch, from the wheels
# scripts/gpu-wheels.sh fetched and cut (pydantic and friends, FlashAttention 4 with its CuTe DSL, FlashInfer,
# cuDNN's frontend, SageAttention: docs/development.md says how), or here from wheels lying in $WHEELS/*.whl
# (default .whl/), fetched elsewhere with e.g.
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_17_x86_64 -d .whl \
#     pydantic pydantic-core annotated-types typing-inspection
# GPU_CHECK_ALLOW_CPU=1 lets the script run on a CPU machine (for testing the script itself).
# Sizing: the whole script must fit in GPU_CHECK_BUDGET_S (default 480 s: 8 minutes on one H100-class GPU, flex's
# compiles counted; a lent machine allows 10 minutes a command). On an H200 with torch 2.11 (2026-11-30) the
# gpu-marked tests took 66-78 s (82 tests then; 157 now, not yet timed on a GPU) and gpu-check.yaml's 240
# measurements 154-178 s wall against a forecast of 136 s (1.13-1.31x short). The four suites' forecasts now
# (--dry-run --estimate-gpu H200, every CUDA backend taken as installed): 1.7, 2.5, 0.9 and 0.6 min, 5.7 min in all,
# which with the tests is over the budget: so each suite runs only when its own dry run's forecast, times 1.31, fits
# in what is left of the budget, in the order below, and a suite left out is named in skipped-suites.txt.
# gpu-check.yaml runs with --trace (a second profiled call per measurement, setup; its cost on a GPU is not yet
# measured), and scripts/check_kernel_names.py holds every CUDA backend's records and traces against the kernel
# names it declares. The timeouts below (240 s, 360 s) only stop a hung step.
# On a lent machine that returns only a few files, pack the result: tar czf "$OUT/gpu-check.tgz" -C OUT .
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-reports}
WHEELS=${WHEELS:-.whl}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

site=${GPU_CHECK_SITE:-/tmp/attnbench-site}
if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$WHEELS"/*.whl \
    || exit 1
fi
if [ -d "$site" ]; then
  export PYTHONPATH="$PYTHONPATH:$site"
fi
missing=$("$PY" - <<'PY'
import importlib.util
need = ["pydantic", "typer", "rich", "yaml", "pandas", "torch", "pytest", "matplotlib", "jinja2"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
  echo "missing Python packages: $missing (put their wheels in $WHEELS/, see the top of this script)" >&2
  exit 1
fi

device=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
if [ "$device" != cuda ] && [ "${GPU_CHECK_ALLOW_CPU:-0}" != 1 ]; then
  echo "no CUDA GPU here: nothing to check (GPU_CHECK_ALLOW_CPU=1 runs the script on CPU)" >&2
  exit 1
fi
name=$("$PY" -c "
import re, torch
n = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'
print(re.sub(r'[^A-Za-z0-9]+', '-', n).strip('-'))")
dir="$OUT/$name-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$dir"
echo "gpu-check: writing to $dir"
{
  date -u
  nvidia-smi 2>/dev/null || echo "(no nvidia-smi)"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
} > "$dir/machine.txt" 2>&1
# The GPU's own account of its state, raw, for the record (and as fixtures for attnbench's parsers).
nvidia-smi -q -x > "$dir/nvidia-smi-q.xml" 2>/dev/null || rm -f "$dir/nvidia-smi-q.xml"
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,clocks.sm,clocks.mem,clocks.applications.graphics,clocks.applications.memory,clocks.max.sm,clocks.max.mem,power.limit,power.draw,temperature.gpu,persistence_mode,ecc.mode.current,mig.mode.current,compute_mode,clocks_event_reasons.active \
  --format=csv > "$dir/nvidia-smi-query.csv" 2>&1 || true
nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv > "$dir/nvidia-smi-apps.csv" 2>&1 || true

status=0
"$PY" -m attnbench list --device "$device" > "$dir/list.txt" 2>&1 || status=1
"$PY" -m attnbench doctor --device "$device" > "$dir/doctor.txt" 2>&1  # exit 1 = a backend is missing: recorded, not fatal
"$PY" -m attnbench doctor --device "$device" --json > "$dir/doctor.json" 2>/dev/null
timeout "${GPU_TEST_TIMEOUT:-240}" "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/ -rs > "$dir/pytest-gpu.log" 2>&1 || status=1
tail -n 3 "$dir/pytest-gpu.log"
# The suites, in order of what the next check most needs (each into its own directory, each with its own limit):
# gpu-check (every backend, 4K/16K, packed documents, ragged paged decode), gpu-long (8K-128K, the sustained state and
# its energy), gpu-workloads (softcap, ALiBi, MLA head sizes, absorbed MLA decode, 128K paged decode), gpu-decode
# (decode bandwidth). GPU_SUITES narrows them, e.g. GPU_SUITES="gpu-check gpu-long".
budget=${GPU_CHECK_BUDGET_S:-480}
for suite in ${GPU_SUITES:-gpu-check gpu-long gpu-workloads gpu-decode}; do
  forecast=$("$PY" -m attnbench run "suites/$suite.yaml" --device "$device" --dry-run 2>/dev/null | "$PY" -c '
import re, sys
m = re.search(r"([\d.]+) (s|min|h) in total", sys.stdin.read())
print(round(float(m[1]) * {"s": 1, "min": 60, "h": 3600}[m[2]] * 1.31) if m else -1)')
  left=$((budget - SECONDS))
  if [ "${forecast:--1}" -lt 0 ] || [ "$forecast" -gt "$left" ]; then
    echo "$suite left out: forecast ${forecast:-none} s (its dry run's x1.31; -1: none), ${left} s left of the ${budget} s budget" \
      | tee -a "$dir/skipped-suites.txt"
    continue
  fi
  trace=()
  if [ "$suite" = gpu-check ]; then trace=(--trace); fi  # every backend: the traces the kernel names are held to
  timeout "${GPU_SUITE_TIMEOUT:-360}" "$PY" -m attnbench run "suites/$suite.yaml" --device "$device" --out "$dir/$suite" \
    --timeout 120 ${trace[@]+"${trace[@]}"} > "$dir/$suite.log" 2>&1 || status=1
  tail -n 3 "$dir/$suite.log"
done
# Which kernel ran: every CUDA backend's profiled kernels, in every suite's records and gpu-check's traces, against the
# names it declares (Capabilities.kernel_names). A wrong_kernel record, a measured record with no kernels, or a trace
# without the profiled call, the timed sample and a declared kernel fails the check; backends that declare no CUDA
# names are listed as unchecked.
"$PY" scripts/check_kernel_names.py "$dir" --device "$device" > "$dir/kernel-names.log" 2>&1 || status=1
tail -n 1 "$dir/kernel-names.log"
echo "gpu-check: done (status $status); results in $dir"
exit $status
