#!/usr/bin/env bash
# attnbench's CUDA check on a lent GPU machine, from the checkout, every step bounded (docs/development.md
# "On a GPU: scripts/gpu-check.sh"):
#   scripts/gpu-check.sh [--dry-run] [DIR]        (DIR defaults to reports/; results go to DIR/<gpu>-<date>/)
# The libraries come as one site that scripts/gpu-wheels.sh installed and packed here and scripts/gpu-carry.sh
# unpacked there into $GPU_CHECK_SITE (default /tmp/attnbench-site): it is put on PYTHONPATH ahead of the machine's
# packages, and scripts/gpu-site/sitecustomize.py makes it a site directory in every Python process, so its .pth
# files are read (cutlass-dsl reaches `cutlass` through one). The steps, in order of what the evidence most needs:
#   doctor    which libraries import, with their kernels, and the machine's state (nvidia-smi, versions)
#   suites    the first of GPU_SUITES (suites/gpu-check.yaml: every backend) always, within what is left; each other
#             (gpu-long, gpu-workloads, gpu-decode) only when its forecast (its dry run's --estimate-gpu H200, x
#             GPU_FORECAST_MARGIN) fits what is left; --trace but on gpu-long. FlashInfer's kernels are compiled in
#             the run's compile phase, before the first measurement, with their own limit (--compile-timeout) and
#             cache (--cache-dir $GPU_CHECK_CACHE), never inside a measurement's --timeout. No report is rendered
#             there (--no-report): `attnbench report` renders it from the records that come back.
#   pytest    pytest -m gpu -v, each test bounded (--timeout), so a limit still names what ran and what failed
#   kernels   scripts/check_kernel_names.py: every CUDA backend's profiled kernels against the names it declares
#   pack      with GPU_CHECK_PACK=FOLDER: FOLDER/gpu-check.tgz (all but traces) and FOLDER/gpu-traces.tgz, each under
#             16 MiB (a lent machine returns at most 8 files of 16 MiB)
# Each step's limit is its own cap or what is left of GPU_CHECK_BUDGET_S (default 570 s: the last call's 10 minutes less
# the carry's unpacking; with a machine's start, about a minute, and the first carry call, 12 minutes of the lent
# machine); steps.tsv records each step's exit code and seconds.
# --dry-run prints the whole device plan on any machine, a CPU included, in a minute: the carry calls (from
# .whl/manifest.tsv), the carried site's packages as scripts/gpu-site finds them (nothing imported), and each step
# with its forecast and limit. GPU_CHECK_ALLOW_CPU=1 runs the steps on a CPU (for testing the script itself).
set -uo pipefail
cd "$(dirname "$0")/.."
dry=0
if [ "${1:-}" = --dry-run ]; then dry=1; shift; fi
DIR=${1:-reports}
PY=${PYTHON:-python3}
site=${GPU_CHECK_SITE:-/tmp/attnbench-site}
[ "$dry" = 1 ] && [ -z "${GPU_CHECK_SITE:-}" ] && site=.whl/site  # the site as packed here, before its carry
export GPU_CHECK_SITE=$site
export PYTHONPATH="$PWD:$PWD/scripts/gpu-site:$site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
budget=${GPU_CHECK_BUDGET_S:-570}
margin=${GPU_FORECAST_MARGIN:-1.25}
cache=${GPU_CHECK_CACHE:-/tmp/attnbench-cache}
compile_budget=${GPU_COMPILE_BUDGET_S:-240}  # twice the slowest FlashInfer module seen on the H200 (119 s, five at once)
suites=${GPU_SUITES:-gpu-check gpu-long gpu-workloads gpu-decode}  # names under suites/, or paths to suite files
doctor_cap=30
pytest_least=${GPU_TEST_LEAST_S:-60}  # kept for pytest while the suites run; it gets what they leave
end_cap=30  # kernels and pack

# A dry run here forecasts with this machine's own packages (the carried site is built for the GPU machine's Python).
plan=()
[ "$dry" = 1 ] && plan=(env "PYTHONPATH=$PWD" GPU_CHECK_SITE=)
suite_file() { case $1 in *.yaml) echo "$1" ;; *) echo "suites/$1.yaml" ;; esac; }
# Forecast of one suite in seconds on an H200, times the margin (-1: none).
forecast() {
  ${plan[@]+"${plan[@]}"} "$PY" -m attnbench run "$(suite_file "$1")" --device cuda --dry-run --estimate-gpu H200 \
    2>/dev/null | "$PY" -c '
import re, sys
m = re.search(r"([\d.]+) (s|min|h) in total", sys.stdin.read())
print(round(float(m[1]) * {"s": 1, "min": 60, "h": 3600}[m[2]] * float(sys.argv[1])) if m else -1)' "$margin"
}
# The limit a suite runs under, given the seconds left before pytest's share; 0: left out. The first always runs.
suite_limit() {
  local suite=$1 first=$2 left=$3 f
  f=$(forecast "$suite")
  if [ "$first" = 1 ]; then
    [ "$f" -ge 0 ] && [ $((f * 3 / 2 + 30)) -lt "$left" ] && left=$((f * 3 / 2 + 30))
    echo "$f $left"
  elif [ "$f" -ge 0 ] && [ "$f" -le "$left" ]; then
    echo "$f $((f * 3 / 2 + 30 < left ? f * 3 / 2 + 30 : left))"
  else
    echo "$f 0"
  fi
}

if [ "$dry" = 1 ]; then
  parts=$(grep -v '^#' .whl/manifest.tsv 2>/dev/null | cut -f4)
  echo "gpu-check plan: the check's budget ${budget} s, in the last of ${parts:-?} carry call(s):"
  for n in $(seq 1 "${parts:-1}"); do
    tail=""; [ "$n" = "${parts:-1}" ] && tail=" && GPU_CHECK_PACK=\$OUT scripts/gpu-check.sh /tmp/gpu-check"
    echo "  run(carry=[\".whl/batch$n\"], command=\"scripts/gpu-carry.sh $n$tail\")"
  done
  "$PY" - <<'PY'
import importlib.util
import os
import tomllib

names = {"pydantic": "attnbench", "cutlass": "flash-attn-4's CuTe DSL (through its .pth)", "flash_attn": "flash-attn-4",
         "flashinfer": "FlashInfer", "cudnn": "cuDNN frontend", "sageattention": "SageAttention",
         "jsonschema": "the test extra"}
for module, what in names.items():
    print(f"  {'found  ' if importlib.util.find_spec(module) else 'MISSING'} {module:14s} {what}")
site = os.environ["GPU_CHECK_SITE"]
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]
if os.path.isdir(site):
    carried = sorted(d.split("-")[0] for d in os.listdir(site) if d.endswith(".dist-info"))
    print(f"  the test extra (pyproject.toml, {len(extra)} requirements) less the machine's; the site holds: "
          + ", ".join(carried))
else:
    print(f"  no site at {site}: run scripts/gpu-wheels.sh")
PY
  left=$((budget - doctor_cap - pytest_least - end_cap))
  echo "  doctor: ${doctor_cap} s at most"
  first=1
  for suite in $suites; do
    read -r f limit < <(suite_limit "$suite" "$first" "$left")
    if [ "$limit" -gt 0 ]; then
      echo "  $suite: forecast ${f} s (x$margin), runs within ${limit} s; FlashInfer compiles ahead within ${compile_budget} s"
      left=$((left - (f > 0 && f < limit ? f : limit)))
    else
      echo "  $suite: forecast ${f} s (x$margin), left out (${left} s left)"
    fi
    first=0
  done
  echo "  pytest -m gpu -v: $((left + pytest_least)) s at most (${pytest_least} s and what the suites leave)"
  echo "  kernels and pack: ${end_cap} s"
  echo "device time: a start (about 60 s), ${parts:-1} carry call(s) (about 15 s each) and the check's ${budget} s:" \
    "about $(( (60 + 15 * ${parts:-1} + budget + 59) / 60 )) min of the 12 the plan allows"
  exit 0
fi

missing=$("$PY" - <<'PY'
import importlib.util
need = ["pydantic", "typer", "rich", "yaml", "pandas", "torch", "pytest", "matplotlib", "jinja2"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
  echo "missing Python packages: $missing (carry them: scripts/gpu-wheels.sh, then scripts/gpu-carry.sh there)" >&2
  exit 1
fi
device=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
if [ "$device" != cuda ] && [ "${GPU_CHECK_ALLOW_CPU:-0}" != 1 ]; then
  echo "no CUDA GPU here: nothing to check (GPU_CHECK_ALLOW_CPU=1 runs the script on CPU; --dry-run plans it)" >&2
  exit 1
fi
name=$("$PY" -c "
import re, torch
n = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu'
print(re.sub(r'[^A-Za-z0-9]+', '-', n).strip('-'))")
dir="$DIR/$name-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$dir"
echo "gpu-check: writing to $dir"
printf 'step\texit\tseconds\tat\n' > "$dir/steps.tsv"
status=0
# step NAME CAP COMMAND...: bounded by CAP or what is left of the budget; output in NAME.log.
step() {
  local name=$1 cap=$2; shift 2
  local left=$((budget - SECONDS)) began=$SECONDS rc
  [ "$cap" -gt "$left" ] && cap=$left
  if [ "$cap" -le 0 ]; then
    echo "$name: not run, the budget is spent" | tee -a "$dir/skipped.txt"; return 0
  fi
  timeout -k 5 "$cap" "$@" > "$dir/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - began))" "$SECONDS" >> "$dir/steps.tsv"
  echo "$name: exit $rc in $((SECONDS - began)) s (limit $cap s; $((budget - SECONDS)) s of the budget left)"
  tail -n 3 "$dir/$name.log" | cut -c1-300
  [ "$rc" = 0 ] || status=1
}

{
  date -u
  nvidia-smi 2>/dev/null || echo "(no nvidia-smi)"
  "$PY" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
  "$PY" -m pip list 2>/dev/null | grep -i -E "^(jax|onnx|triton|pytest)"
  ls "$site" 2>/dev/null | grep dist-info
} > "$dir/machine.txt" 2>&1
nvidia-smi -q -x > "$dir/nvidia-smi-q.xml" 2>/dev/null || rm -f "$dir/nvidia-smi-q.xml"
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,clocks.max.sm,power.limit,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv > "$dir/nvidia-smi-query.csv" 2>&1 || true
step doctor "$doctor_cap" "$PY" -m attnbench doctor --device "$device"
"$PY" -m attnbench doctor --device "$device" --json > "$dir/doctor.json" 2>/dev/null

first=1
for suite in $suites; do
  read -r f limit < <(suite_limit "$suite" "$first" $((budget - SECONDS - pytest_least - end_cap)))
  first=0
  label=$(basename "$suite" .yaml)
  if [ "$limit" -le 0 ]; then
    echo "$label left out: forecast ${f} s (its dry run's x$margin) does not fit what is left" | tee -a "$dir/skipped.txt"
    continue
  fi
  trace=()
  [ "$label" != gpu-long ] && trace=(--trace)  # the traces the kernel names are held to (gpu-long: energy)
  step "$label" "$limit" "$PY" -m attnbench run "$(suite_file "$suite")" --device "$device" --out "$dir/$label" \
    --timeout 90 --cache-dir "$cache" --compile-timeout "$compile_budget" --no-report ${trace[@]+"${trace[@]}"}
done
step pytest "$((budget - SECONDS - end_cap))" "$PY" -m pytest -v -p no:cacheprovider -m gpu tests/ -rs --timeout 60
step kernels 20 "$PY" scripts/check_kernel_names.py "$dir" --device "$device"
if [ -n "${GPU_CHECK_PACK:-}" ]; then
  mkdir -p "$GPU_CHECK_PACK"
  tar czf "$GPU_CHECK_PACK/gpu-check.tgz" --exclude=traces -C "$DIR" "$(basename "$dir")"
  (cd "$DIR" && find "$(basename "$dir")" -type d -name traces -print0 | tar czf "$GPU_CHECK_PACK/gpu-traces.tgz" --null -T -)
  for f in "$GPU_CHECK_PACK"/gpu-check.tgz "$GPU_CHECK_PACK"/gpu-traces.tgz; do
    if [ "$(stat -c %s "$f")" -gt $((16 << 20)) ]; then echo "gpu-check: $f is over 16 MiB: it will not come back" >&2; status=1; fi
  done
  ls -la "$GPU_CHECK_PACK"
fi
echo "gpu-check: done (status $status) in $SECONDS s; results in $dir"
exit $status
