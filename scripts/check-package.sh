#!/usr/bin/env bash
# Build the wheel and install it into a fresh virtual environment (not the checkout), then use it as
# a user would: --version, list, suites, a CPU run of one shard of a packaged suite, and recommend on it.
#   scripts/check-package.sh [PYTHON]      (PYTHON builds the wheel; default .venv/bin/python)
# The new environment holds the wheel alone (pip install --no-deps) and borrows its dependencies from PYTHON's
# environment through a .pth line written after the install: a .pth-added folder's own .pth files are not read, so
# the checkout's editable install never answers there (the script asserts which attnbench imports), and the wheel's
# declared dependencies are held against the versions it borrows. FRESH_DEPS=1 installs the dependencies from the
# package index instead, as a user's first install does (torch from TORCH_CPU_SPEC on a machine without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
TORCH_CPU_SPEC=${TORCH_CPU_SPEC:-torch==2.13.0}
FRESH_DEPS=${FRESH_DEPS:-0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PY" -m build --wheel --outdir "$work/dist" . > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/attnbench-*.whl)
echo "built $(basename "$wheel")"
# PYTHON's own interpreter version, so that its site-packages can be borrowed; PYTHON's pip installs into it
"$PY" -m venv --without-pip "$work/venv"
bin="$work/venv/bin"
quiet_pip() { "$PY" -m pip --python "$bin/python" install --quiet "$@" 2>&1 | grep -v '^WARNING: Location' || true; }
if [ "$FRESH_DEPS" = 1 ]; then
  command -v nvidia-smi >/dev/null 2>&1 || quiet_pip "$TORCH_CPU_SPEC"
  quiet_pip "$wheel"
else
  quiet_pip --no-deps "$wheel"
  deps=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  here=$("$bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$deps" > "$here/zz-borrowed-deps.pth"
fi
cd "$work"  # away from the checkout: only the installed package can answer
# the wheel's attnbench answers, and (when borrowed) every dependency it declares is installed at a version it accepts
"$bin/python" - "$work/venv" "$FRESH_DEPS" <<'EOF'
import sys
from importlib.metadata import distribution, version

import attnbench

assert attnbench.__file__.startswith(sys.argv[1]), f"attnbench imported from {attnbench.__file__}, not the wheel"
if sys.argv[2] == "1":
    sys.exit()  # pip resolved them itself
from packaging.requirements import Requirement

for line in distribution("attnbench").requires or []:
    req = Requirement(line)
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        assert req.specifier.contains(version(req.name), prereleases=True), f"{line}: {version(req.name)} installed"
EOF
"$bin/attnbench" --version
"$bin/attnbench" list --device cpu > list.txt && grep -q "sdpa-flash" list.txt
"$bin/attnbench" suites > suites.txt && grep -q "^long" suites.txt && grep -q "^models/llama-3.1-8b" suites.txt  # (a pipe into grep -q can end in SIGPIPE)
# one shard of the quick suite: the packaged YAML expands to all its cases, one of them is measured and reported
"$bin/attnbench" run quick --device cpu --backend sdpa --shard 0/8 --out "$work/run" > run.log 2>&1 \
  || { cat run.log; exit 1; }
test -s "$work/run/results.jsonl" && test -s "$work/run/report.html"
"$bin/attnbench" recommend "$work/run" --out "$work/dispatch.json" > recommend.log 2>&1 || { cat recommend.log; exit 1; }
"$bin/python" -c "from attnbench.report.dispatch_table import schema; assert schema()['title']"  # the schema ships
echo "wheel OK: installed, listed backends, ran a shard of the packaged quick suite, $(wc -l < "$work/run/results.jsonl") record(s)"
