#!/usr/bin/env bash
# Build the wheel and install it into a fresh virtual environment (not the checkout), then use it as
# a user would: --version, list, suites, and a tiny CPU run of a packaged suite.
#   scripts/check-package.sh [PYTHON]      (PYTHON builds the wheel; default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
TORCH_CPU_SPEC=${TORCH_CPU_SPEC:-torch==2.13.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PY" -m build --wheel --outdir "$work/dist" . > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/attnbench-*.whl)
echo "built $(basename "$wheel")"
python3 -m venv "$work/venv"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  "$work/venv/bin/pip" install --quiet "$TORCH_CPU_SPEC" 2>&1 | grep -v '^WARNING: Location' || true
fi
"$work/venv/bin/pip" install --quiet "$wheel" 2>&1 | grep -v '^WARNING: Location' || true
cd "$work"  # away from the checkout: only the installed package can answer
bin="$work/venv/bin"
"$bin/attnbench" --version
"$bin/attnbench" list --device cpu > list.txt && grep -q "sdpa-flash" list.txt
"$bin/attnbench" suites > suites.txt && grep -q "^long" suites.txt && grep -q "^models/llama-3.1-8b" suites.txt  # (a pipe into grep -q can end in SIGPIPE)
"$bin/attnbench" run quick --device cpu --backend sdpa --out "$work/run" > run.log 2>&1 || { cat run.log; exit 1; }
test -s "$work/run/results.jsonl" && test -s "$work/run/report.html"
"$bin/attnbench" recommend "$work/run" --out "$work/dispatch.json" > recommend.log 2>&1 || { cat recommend.log; exit 1; }
"$bin/python" -c "from attnbench.report.dispatch_table import schema; assert schema()['title']"  # the schema ships
echo "wheel OK: installed, listed backends, ran the packaged quick suite ($(wc -l < "$work/run/results.jsonl") records)"
